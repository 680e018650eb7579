from __future__ import annotations

import json
import logging
import math
import random
from typing import Any

import pytest

from volcano_monitor.watchdog.state.histogram import (
    CPU_FIRST_BUCKET,
    CPU_MAX,
    MAX_EXPONENT,
    RATIO,
    DecayingHistogram,
    cpu_histogram,
    memory_histogram,
)

DAY = 86400.0
T0 = 1_714_521_600.0  # 2024-05-01T00:00:00Z


def test_bucket_layout_is_exponential_like_vpa() -> None:
    h = cpu_histogram(DAY)
    assert h.bucket_start(0) == 0 and h.bucket_start(1) == pytest.approx(0.01)
    assert h.bucket_start(2) - h.bucket_start(1) == pytest.approx(0.01 * 1.05)
    assert h.bucket_start(h.num_buckets - 2) < CPU_MAX <= h.bucket_start(h.num_buckets - 1)  # the last one is open
    for i in range(h.num_buckets):  # every start falls in its own bucket, a hair below in the previous one
        assert h.bucket_index(h.bucket_start(i)) == i
        if i:
            assert h.bucket_index(h.bucket_start(i) * (1 - 1e-12)) == i - 1
    m = memory_histogram(DAY)
    assert m.bucket_start(1) == 10 * 2**20


def test_empty_and_single_value() -> None:
    h = cpu_histogram(DAY)
    assert h.is_empty() and h.percentile(0.9) == 0 and h.total_weight() == 0
    h.add(0.25, 1.0, T0)
    assert not h.is_empty()
    for p in (0.0, 0.5, 0.9, 1.0):
        assert 0.25 < h.percentile(p) <= 0.25 * RATIO + CPU_FIRST_BUCKET  # the end of its bucket


def test_uniform_distribution_percentiles_within_bucket_resolution() -> None:
    rng = random.Random(7)
    h = cpu_histogram(DAY)
    values = [rng.uniform(0.5, 1.5) for _ in range(3 * 1440)]
    for i, v in enumerate(values):
        h.add(v, 1.0, T0 + 60 * i)
    # Decay favours recent samples, but the distribution does not change over time.
    for p, exact in ((0.5, 1.0), (0.9, 1.4), (0.95, 1.45)):
        got = h.percentile(p)
        assert exact * 0.98 <= got <= exact * 1.02 * RATIO, (p, got)
    assert h.percentiles((0.95, 0.5, 0.9)) == [h.percentile(0.95), h.percentile(0.5), h.percentile(0.9)]


def test_newer_samples_weigh_more() -> None:
    h = cpu_histogram(DAY)
    h.add(1.0, 1.0, T0)
    h.add(2.0, 1.0, T0 + DAY)  # one half-life later: twice the weight
    assert h.percentile(0.45) > 2.0  # 2/3 of the weight is at 2.0
    assert h.percentile(0.3) < 1.1
    undecayed = DecayingHistogram(CPU_FIRST_BUCKET, RATIO, CPU_MAX, 1e12)
    undecayed.add(1.0, 1.0, T0)
    undecayed.add(2.0, 1.0, T0 + DAY)
    assert undecayed.percentile(0.45) < 1.1


def test_reference_moves_and_old_buckets_fade() -> None:
    h = cpu_histogram(3600.0)
    h.add(50.0, 1.0, T0)
    for hour in range(1, 200):  # 200 half-lives: far past MAX_EXPONENT
        h.add(1.0, 1.0, T0 + hour * 3600)
    assert h.ref is not None and h.ref > T0 + (200 - MAX_EXPONENT - 2) * 3600
    assert h.to_dict()["i"] == [h.bucket_index(1.0)]  # the 50-core sample is gone
    assert math.isfinite(h.total_weight()) and h.percentile(1.0) < 1.1


def test_subtracting_a_sample_removes_it_exactly() -> None:
    h = memory_histogram(DAY)
    h.add(2**30, 1.0, T0)
    h.add(2**29, 1.0, T0 + 10)
    h.add(2**30, -1.0, T0)
    assert h.percentile(1.0) <= 2**29 * RATIO + 10 * 2**20 and h.total_weight() == pytest.approx(2 ** (10 / DAY))
    h.add(2**29, -1.0, T0 + 10)
    assert h.is_empty() and h.percentile(0.5) == 0
    h.add(5.0, -1.0, T0)  # subtracting from nothing is a no-op
    assert h.is_empty()


def test_bad_values_are_ignored_and_huge_ones_land_in_the_last_bucket() -> None:
    h = cpu_histogram(DAY)
    for value, weight, ts in ((math.nan, 1, T0), (1.0, math.inf, T0), (1.0, 1.0, math.nan), (1.0, 0.0, T0)):
        h.add(value, weight, ts)
    assert h.is_empty()
    h.add(1e300, 1.0, T0)
    assert h.percentile(0.9) == h.bucket_start(h.num_buckets - 1)
    h.add(1.0, 1.0, 1e300)  # an absurd timestamp shifts the reference; nothing overflows
    assert math.isfinite(h.total_weight()) and h.percentile(0.5) < 1.1


def test_to_dict_round_trip_is_json_safe_and_sparse() -> None:
    rng = random.Random(3)
    h = memory_histogram(DAY)
    for i in range(2000):
        h.add(rng.lognormvariate(30, 0.3), 1.0, T0 + 300 * i)
    data = h.to_dict()
    text = json.dumps(data, allow_nan=False)
    assert len(data["i"]) < 60 and len(text) < 3000
    back = DecayingHistogram.from_dict(json.loads(text), h.first_bucket, h.ratio, h.max_value, DAY)
    assert back.to_dict() == data
    assert back.percentiles((0.5, 0.9, 0.95)) == h.percentiles((0.5, 0.9, 0.95))
    assert back.total_weight() == pytest.approx(h.total_weight())
    # the same histogram keeps working after the round trip (decay continues from the stored reference)
    h.add(2**34, 100.0, T0 + 700_000)
    back.add(2**34, 100.0, T0 + 700_000)
    assert back.percentile(0.99) == h.percentile(0.99)
    empty = DecayingHistogram.from_dict(cpu_histogram(DAY).to_dict())
    assert empty.is_empty()


GOOD = {"v": 1, "first": 0.01, "ratio": 1.05, "ref": T0, "i": [3, 10], "w": [1.0, 2.0]}


@pytest.mark.parametrize("garbage", [
    None, "text", 42, [], {}, {"v": 2}, {**GOOD, "v": "1"}, {**GOOD, "first": 10 * 2**20},
    {**GOOD, "ratio": 1.1}, {**GOOD, "i": [3]}, {**GOOD, "i": [3, 9999]}, {**GOOD, "i": [-1, 3]},
    {**GOOD, "i": ["3", 4]}, {**GOOD, "i": [True, 4]}, {**GOOD, "w": [1.0, "x"]}, {**GOOD, "w": [1.0, -2.0]},
    {**GOOD, "w": [1.0, math.nan]}, {**GOOD, "w": [1e308, 1e308]}, {**GOOD, "ref": None}, {**GOOD, "ref": "now"},
    {**GOOD, "i": "0,1"}, {**GOOD, "first": None},
])
def test_garbage_gives_an_empty_histogram_and_a_log_line(garbage: Any, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError):
        DecayingHistogram.decode(garbage, CPU_FIRST_BUCKET, RATIO, CPU_MAX, DAY)
    with caplog.at_level(logging.WARNING, logger="volcano_monitor.watchdog.state.histogram"):
        h = DecayingHistogram.from_dict(garbage, CPU_FIRST_BUCKET, RATIO, CPU_MAX, DAY)
    assert h.is_empty() and h.percentile(0.9) == 0
    assert "malformed" in caplog.text


def test_good_dict_decodes() -> None:
    h = DecayingHistogram.from_dict(GOOD)
    assert h.total_weight() == 3.0 and h.percentile(0.5) == h.bucket_start(11)


def test_constructor_rejects_nonsense_layouts() -> None:
    for args in ((0, 1.05, 10, 1), (0.01, 1.0, 10, 1), (0.01, 1.05, 0.001, 1), (0.01, 1.05, 10, 0)):
        with pytest.raises(ValueError):
            DecayingHistogram(*args)
