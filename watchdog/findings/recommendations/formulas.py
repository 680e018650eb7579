"""The math of a recommendation (`recommend`), in the manner of the VPA recommender, on one container's
decaying histograms: targets and bounds before any policy (watchdog.findings.recommendations.policy) is applied.

With p = percentile of the decaying histogram and m = 1 + safety_margin:
- CPU: every usage sample goes into the CPU histogram with weight 1 (VPA weights by the container's
  request, to compare containers of different sizes inside one aggregate; our histograms are per
  container already, and the usage sample carries no request). target = p(cpu_percentile) x m.
- Memory: only the *peak* of each `memory_interval_hours` interval (aligned to the epoch, so daily
  intervals are UTC days) is a sample, placed at the interval's end. While an interval is open, a
  higher sample replaces its peak (the old one is subtracted). target = p(memory_percentile) x m.
  Memory is not compressible: one high peak a day matters, the average does not.
- OOM kill: a memory sample of `max(peak x oom_bump_ratio, peak + oom_min_bump_bytes)` enters the
  current interval; also, for one memory interval after the kill the memory target is at least
  that bump (`oom_bumped`), however much calmer history outweighs it.
- History, in days: `min(last - first sample, samples / 1440)` (VPA: a sample a minute is "full"
  sampling, so sparse sampling counts for less). confidence = min(1, days / 7): a week of history
  is full confidence.
- Bounds (VPA's formulas, on the history in days d, at least one hour):
  lower = p50 x m x (1 + 0.001/d)^-2, upper = p95 x m x (1 + 1/d) — the upper bound is 2x after
  one day and 1.14x after a week; lower <= target <= upper always.
- Minimums (`min_cpu_cores`, `min_memory_bytes`) apply to all three. CPU is rounded up to a
  millicore, memory up to a byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.state.histogram import DecayingHistogram

SAMPLES_PER_DAY = 1440.0  # one sample a minute counts as full sampling (as in VPA)
FULL_CONFIDENCE_DAYS = 7.0
MIN_BOUND_DAYS = 1.0 / 24  # bounds widen as for at least one hour of history
LOWER_PERCENTILE = 0.5
UPPER_PERCENTILE = 0.95

@dataclass(frozen=True)
class Estimate:
    """What `recommend` computes for one container."""

    cpu_target_cores: float
    cpu_lower_cores: float
    cpu_upper_cores: float
    memory_target_bytes: float
    memory_lower_bytes: float
    memory_upper_bytes: float
    confidence: float
    oom_bumped: bool


def history_days(samples: int, first_ts: float | None, last_ts: float | None,
                 samples_per_day: float = SAMPLES_PER_DAY) -> float:
    if first_ts is None or last_ts is None or samples <= 0:
        return 0.0
    return max(0.0, min((last_ts - first_ts) / 86400.0, samples / samples_per_day))


def oom_bump(peak_bytes: float, settings: Recommendations) -> float:
    return max(peak_bytes * settings.oom_bump_ratio, peak_bytes + settings.oom_min_bump_bytes)


def recommend(h_cpu: DecayingHistogram, h_mem: DecayingHistogram, settings: Recommendations, *, samples: int,
              first_ts: float | None, last_ts: float | None, now_ts: float, last_oom_ts: float | None = None,
              last_oom_memory_bytes: float = 0.0, samples_per_day: float = SAMPLES_PER_DAY) -> Estimate:
    """The pure math (module docstring). Timestamps are seconds since the epoch."""
    days = history_days(samples, first_ts, last_ts, samples_per_day)
    bound_days = max(days, MIN_BOUND_DAYS)
    margin = 1.0 + settings.safety_margin
    up = 1.0 + 1.0 / bound_days
    down = (1.0 + 0.001 / bound_days) ** -2

    def bounds(hist: DecayingHistogram, percentile: float) -> tuple[float, float, float]:
        p50, pt, p95 = hist.percentiles((LOWER_PERCENTILE, percentile, UPPER_PERCENTILE))
        target = pt * margin
        return min(p50 * margin * down, target), target, max(p95 * margin * up, target)

    cpu_lower, cpu_target, cpu_upper = bounds(h_cpu, settings.cpu_percentile)
    mem_lower, mem_target, mem_upper = bounds(h_mem, settings.memory_percentile)
    oom_bumped = (last_oom_ts is not None and last_oom_memory_bytes > 0
                  and now_ts - last_oom_ts <= settings.memory_interval_hours * 3600)
    if oom_bumped:
        mem_target = max(mem_target, oom_bump(last_oom_memory_bytes, settings))
        mem_upper = max(mem_upper, mem_target)

    def cores(x: float) -> float:
        return math.ceil(round(max(x, settings.min_cpu_cores) * 1000, 6)) / 1000

    def byte(x: float) -> float:
        return float(math.ceil(max(x, settings.min_memory_bytes)))

    return Estimate(cores(cpu_target), cores(cpu_lower), cores(cpu_upper), byte(mem_target), byte(mem_lower),
                    byte(mem_upper), min(1.0, days / FULL_CONFIDENCE_DAYS), oom_bumped)
