"""Decaying histograms with exponential buckets, in the manner of the Kubernetes VPA recommender.

Why this shape:
- Exponential buckets (each 5% wider than the one before, the first 0.01 core or 10 MiB wide) give
  the same *relative* resolution for a 50m sidecar and a 64-core trainer, with ~180 buckets covering
  up to 1000 cores / 1 TiB. A percentile answers with the *end* of the bucket it falls in (rounding
  up, like VPA), so it is at most one bucket width (~5%) above the exact value.
- Sample weights decay with a half-life: a sample taken at `ts` is stored with weight
  `w * 2**((ts - ref) / half_life)`. Newer samples weigh exponentially more; old history fades
  without ever being revisited. Percentiles only need relative weights, so nothing is recomputed
  when time passes. When exponents grow large the reference moves forward by a whole number of
  half-lives and every bucket is scaled by the same exact power of two (so a sample added earlier
  can still be subtracted exactly later); buckets that became negligible are dropped, which is what
  keeps the stored form small.
- `to_dict` is sparse (only non-empty buckets) and JSON-safe; it is stored in
  `WorkloadHistogram.cpu` / `.memory`. `from_dict` never raises: garbage gives an empty histogram
  and a logged warning (the workload relearns), `decode` raises `ValueError` for callers that count.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MAX_EXPONENT = 40.0  # move the reference once weights reach 2**40 (floats keep 53 bits)
PRUNE_RATIO = 1e-7  # a bucket below this fraction of the total weight is dropped on shift / save
_EMPTY_EPSILON = 1e-12  # relative: a total below this (after subtractions) counts as empty

# Bucket layouts (VPA: 0.01 core / 1e7 bytes first bucket, ratio 1.05, max 1000 cores / 1e12 bytes).
CPU_FIRST_BUCKET = 0.01
CPU_MAX = 1000.0
MEMORY_FIRST_BUCKET = 10.0 * 2**20
MEMORY_MAX = float(2**40)
RATIO = 1.05


def _number(value: Any) -> float:
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int beyond float range
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r:.40}")
    return number


@functools.lru_cache(maxsize=16)
def _bucket_starts(first_bucket: float, ratio: float, num_buckets: int) -> tuple[float, ...]:
    """Bucket i spans [start(i), start(i + 1)); one extra entry is the end of the last finite one.
    Shared by every histogram of the same layout (tens of thousands of them are decoded at once)."""
    return tuple(first_bucket * (ratio**i - 1) / (ratio - 1) for i in range(num_buckets + 1))


class DecayingHistogram:
    """Weighted histogram of non-negative values; see the module docstring for the why."""

    __slots__ = ("_buckets", "_inv_log", "_scale", "_starts", "_total", "first_bucket", "half_life_seconds",
                 "max_value", "num_buckets", "ratio", "ref")

    def __init__(self, first_bucket: float, ratio: float, max_value: float, half_life_seconds: float) -> None:
        if not (first_bucket > 0 and ratio > 1 and max_value > first_bucket and half_life_seconds > 0):
            raise ValueError("need first_bucket > 0, ratio > 1, max_value > first_bucket, half_life_seconds > 0")
        self.first_bucket = float(first_bucket)
        self.ratio = float(ratio)
        self.max_value = float(max_value)
        self.half_life_seconds = float(half_life_seconds)
        self._scale = (ratio - 1) / first_bucket
        self._inv_log = 1.0 / math.log(ratio)
        self.num_buckets = math.ceil(math.log(max_value * self._scale + 1) * self._inv_log) + 1
        self._starts = _bucket_starts(self.first_bucket, self.ratio, self.num_buckets)
        self._buckets: dict[int, float] = {}
        self._total = 0.0
        self.ref: float | None = None  # reference timestamp (seconds since the epoch) of the weights

    # -- buckets ------------------------------------------------------------------------------------
    def bucket_index(self, value: float) -> int:
        starts = self._starts
        if value <= 0.0:
            return 0
        if value >= starts[-2]:  # the last bucket has no end: huge values land there
            return self.num_buckets - 1
        i = int(math.log(1.0 + value * self._scale) * self._inv_log)
        # The logarithm may land one off at a boundary: settle it against the exact starts.
        if starts[i + 1] <= value:
            return i + 1
        if i and starts[i] > value:
            return i - 1
        return i

    def bucket_start(self, index: int) -> float:
        return self._starts[index]

    # -- samples ------------------------------------------------------------------------------------
    def _shift(self, ts: float) -> None:
        """Move the reference forward by whole half-lives so `ts` is within MAX_EXPONENT of it."""
        assert self.ref is not None
        steps = math.floor((ts - self.ref) / self.half_life_seconds)
        self.ref += steps * self.half_life_seconds
        scale = 2.0 ** -steps
        buckets = {i: w * scale for i, w in self._buckets.items()}
        total = sum(buckets.values())
        self._buckets = {i: w for i, w in buckets.items() if w > total * PRUNE_RATIO}
        self._total = sum(self._buckets.values())

    def add(self, value: float, weight: float, ts: float) -> None:
        """Add `value` with `weight` as of time `ts` (seconds). A negative weight subtracts a sample
        added earlier with the same value and ts (used to replace an interval's memory peak)."""
        if value * 0.0 + weight * 0.0 + ts * 0.0 != 0.0 or not weight:  # NaN or an infinity; or no weight
            return
        buckets = self._buckets
        ref = self.ref
        if ref is None or not buckets:
            if weight < 0:
                return
            ref = self.ref = math.floor(ts / self.half_life_seconds) * self.half_life_seconds
            buckets.clear()
            self._total = 0.0
        exponent = (ts - ref) / self.half_life_seconds
        if exponent > MAX_EXPONENT:
            self._shift(ts)
            buckets = self._buckets
            exponent = (ts - self.ref) / self.half_life_seconds  # type: ignore[operator]
        scaled = weight * 2.0**exponent
        if not scaled:
            return
        index = self.bucket_index(value)
        old = buckets.get(index, 0.0)
        if weight > 0:
            buckets[index] = old + scaled
            self._total += scaled
            return
        if old + scaled <= -scaled * 1e-9:  # removed (within rounding), or was not there
            buckets.pop(index, None)
            self._total -= old
        else:
            buckets[index] = old + scaled
            self._total += scaled
        if self._total <= 0 or not buckets:
            buckets.clear()
            self._total = 0.0

    def merge(self, other: DecayingHistogram) -> None:
        """Add every sample of `other` (same layout and half-life) as if it had been added here: history
        back-filled from Prometheus joins what the live path collected. Both are brought to the later
        reference time (an exact power of two when the references are whole half-lives apart)."""
        if other.is_empty() or other.ref is None:
            return
        if (other.first_bucket, other.ratio, other.half_life_seconds) != (
                self.first_bucket, self.ratio, self.half_life_seconds):
            raise ValueError("cannot merge histograms of different layouts or half-lives")
        if self.is_empty() or self.ref is None:
            self._buckets, self._total, self.ref = dict(other._buckets), other._total, other.ref
            return
        ref = max(self.ref, other.ref)
        mine, theirs = 2.0 ** ((self.ref - ref) / self.half_life_seconds), \
            2.0 ** ((other.ref - ref) / self.half_life_seconds)
        buckets = {i: w * mine for i, w in self._buckets.items()}
        for i, w in other._buckets.items():
            buckets[i] = buckets.get(i, 0.0) + w * theirs
        total = sum(buckets.values())
        self._buckets = {i: w for i, w in buckets.items() if w > total * PRUNE_RATIO}
        self._total = sum(self._buckets.values())
        self.ref = ref

    # -- queries ------------------------------------------------------------------------------------
    def total_weight(self) -> float:
        """Sum of the weights, in the scale of the current reference time (only ratios matter)."""
        return self._total

    def is_empty(self) -> bool:
        return not self._buckets or self._total <= 0

    def percentiles(self, ps: Iterable[float]) -> list[float]:
        """Several percentiles in one pass over the buckets (0 each when empty). Each is the end of the
        first bucket where the cumulative weight reaches p x total (the start of the last bucket, which
        has no end)."""
        wanted = [min(max(p, 0.0), 1.0) for p in ps]
        if self.is_empty():
            return [0.0] * len(wanted)
        order = sorted(range(len(wanted)), key=wanted.__getitem__)
        out = [0.0] * len(wanted)
        indices = sorted(self._buckets)
        last = self.num_buckets - 1
        cumulative = 0.0
        k = 0
        for index in indices:
            cumulative += self._buckets[index]
            while k < len(order) and cumulative >= wanted[order[k]] * self._total * (1 - 1e-12):
                out[order[k]] = self._starts[index + 1] if index < last else self._starts[index]
                k += 1
            if k == len(order):
                break
        top = indices[-1]
        for j in order[k:]:  # rounding left the cumulative a hair short of the total
            out[j] = self._starts[top + 1] if top < last else self._starts[top]
        return out

    def percentile(self, p: float) -> float:
        return self.percentiles((p,))[0]

    # -- storage ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Sparse, JSON-safe form: bucket indices and weights relative to `ref`."""
        floor = self._total * PRUNE_RATIO
        kept = sorted(i for i, w in self._buckets.items() if w > floor)
        return {
            "v": FORMAT_VERSION,
            "first": self.first_bucket,
            "ratio": self.ratio,
            "ref": self.ref if kept else None,
            "i": kept,
            "w": [self._buckets[i] for i in kept],
        }

    @classmethod
    def decode(cls, data: Any, first_bucket: float, ratio: float, max_value: float,
               half_life_seconds: float) -> DecayingHistogram:
        """Strict `from_dict`: raises ValueError on anything that is not a histogram of this layout."""
        hist = cls(first_bucket, ratio, max_value, half_life_seconds)
        if not isinstance(data, dict):
            raise ValueError(f"histogram is a {type(data).__name__}, not a mapping")
        if data.get("v") != FORMAT_VERSION:
            raise ValueError(f"unknown histogram format version {data.get('v')!r:.40}")
        if not (math.isclose(_number(data.get("first")), hist.first_bucket)
                and math.isclose(_number(data.get("ratio")), hist.ratio)):
            raise ValueError("histogram has a different bucket layout")
        indices, weights = data.get("i"), data.get("w")
        if not isinstance(indices, list) or not isinstance(weights, list) or len(indices) != len(weights):
            raise ValueError("histogram buckets are not two lists of equal length")
        if not indices:
            return hist
        hist.ref = _number(data.get("ref"))
        # Validated in bulk (C loops): tens of thousands of these are decoded per recommendation run.
        if not all(type(i) is int for i in indices) or min(indices) < 0 or max(indices) >= hist.num_buckets:
            raise ValueError("bucket indices are not integers in range")
        if len(set(indices)) != len(indices):
            raise ValueError("repeated bucket index")
        if not all(type(w) is float or type(w) is int for w in weights) or min(weights) < 0:
            raise ValueError("bucket weights are not non-negative numbers")
        try:
            total = math.fsum(weights)  # NaN or inf when a weight is
        except OverflowError:
            total = math.inf
        if not math.isfinite(total):
            raise ValueError("bucket weights are not finite")
        hist._buckets = {i: float(w) for i, w in zip(indices, weights, strict=True) if w > 0}
        hist._total = total
        return hist

    @classmethod
    def from_dict(cls, data: dict[str, Any], first_bucket: float = CPU_FIRST_BUCKET, ratio: float = RATIO,
                  max_value: float = CPU_MAX, half_life_seconds: float = 86400.0) -> DecayingHistogram:
        """Tolerant decode: a malformed stored histogram is logged and replaced by an empty one."""
        try:
            return cls.decode(data, first_bucket, ratio, max_value, half_life_seconds)
        except (ValueError, TypeError) as exc:
            log.warning("discarding a malformed stored histogram: %s", exc)
            return cls(first_bucket, ratio, max_value, half_life_seconds)


def cpu_histogram(half_life_seconds: float) -> DecayingHistogram:
    """An empty CPU histogram (cores) with the standard layout."""
    return DecayingHistogram(CPU_FIRST_BUCKET, RATIO, CPU_MAX, half_life_seconds)


def memory_histogram(half_life_seconds: float) -> DecayingHistogram:
    """An empty memory histogram (bytes) with the standard layout."""
    return DecayingHistogram(MEMORY_FIRST_BUCKET, RATIO, MEMORY_MAX, half_life_seconds)
