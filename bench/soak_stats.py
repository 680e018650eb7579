"""bench/soak.py's figures from the RSS readings: the growth ratio between two checkpoints, a window's median,
and the fit that separates growth with time from growth with the live population. No I/O: tested on its own
(tests/test_bench_soak.py).
"""

from __future__ import annotations


def ratio(points: dict[str, int | None]) -> float | None:
    first, last = points.get("25"), points.get("100")
    return round(last / first, 4) if first and last else None


def window_median(readings: list[tuple[float, int]]) -> int | None:
    """The median of the RSS readings of the last window (bench/soak.py's RSS_WINDOW_SECONDS): one reading can
    land inside a scrape."""
    values = sorted(value for _, value in readings)
    return values[len(values) // 2] if values else None


def growth_at_equal_population(samples: list[tuple[float, float, float]], span_minutes: float,
                               base: float) -> float | None:
    """The growth ratio that time alone accounts for, the live pod count held equal: a least-squares fit
    rss = a + b * minute + c * live_pods over (minute, live_pods, rss) samples, as 1 + b * span / base.

    Why: the live population drifts by several per cent between two checkpoints (jobs of up to 40 pods
    running up to 3 hours), and every live pod holds memory, so the plain ratio moves with it in either
    direction; a leak shows in b whatever the population does. A diagnostic beside the ratio, not the target.
    None when the samples cannot separate the two (fewer than four, or the count moved in step with time).
    """
    if len(samples) < 4 or base <= 0:
        return None
    n = len(samples)
    mean_t, mean_p, mean_r = (sum(s[i] for s in samples) / n for i in range(3))
    tt = sum((t - mean_t) ** 2 for t, _, _ in samples)
    pp = sum((p - mean_p) ** 2 for _, p, _ in samples)
    tp = sum((t - mean_t) * (p - mean_p) for t, p, _ in samples)
    tr = sum((t - mean_t) * (r - mean_r) for t, _, r in samples)
    pr = sum((p - mean_p) * (r - mean_r) for _, p, r in samples)
    det = tt * pp - tp * tp
    if det <= 1e-9 * tt * pp:  # also when either never moved (tt or pp 0, so tp 0 and det 0)
        return None
    per_minute = (tr * pp - pr * tp) / det
    return round(1 + per_minute * span_minutes / base, 4)

