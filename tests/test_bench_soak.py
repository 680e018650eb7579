"""bench/soak.py's growth fit (bench/soak_stats.py): time's share of RSS growth with the live population held
equal."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_soak_stats", ROOT / "bench" / "soak_stats.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def samples(per_minute: float, per_pod: float, pods: list[int]) -> list[tuple[float, float, float]]:
    return [(minute, n, 50e6 + per_minute * minute + per_pod * n) for minute, n in enumerate(pods, start=5)]


PODS = [10550, 10321, 10502, 10678, 10423, 10092, 10562, 10854, 10671, 10548, 10460, 10748, 10812, 10427, 10923, 10848]


def test_growth_that_follows_the_population_is_not_put_on_time(soak: ModuleType) -> None:
    assert soak.growth_at_equal_population(samples(0.0, 5000.0, PODS), 15, 100e6) == pytest.approx(1.0, abs=1e-4)


def test_growth_with_time_is_found_whatever_the_population_does(soak: ModuleType) -> None:
    # 200 kB a minute over 15 minutes on a base of 100 MB: 3 %.
    assert soak.growth_at_equal_population(samples(200e3, 5000.0, PODS), 15, 100e6) == pytest.approx(1.03, abs=1e-4)
    shrinking = soak.growth_at_equal_population(samples(-100e3, 1000.0, PODS), 15, 100e6)
    assert shrinking == pytest.approx(0.985, abs=1e-4)


def test_no_answer_when_time_and_population_cannot_be_told_apart(soak: ModuleType) -> None:
    assert soak.growth_at_equal_population(samples(1e5, 1e3, [10000 + 10 * i for i in range(16)]), 15, 1e8) is None
    assert soak.growth_at_equal_population(samples(1e5, 1e3, [10000] * 16), 15, 1e8) is None
    assert soak.growth_at_equal_population(samples(1e5, 1e3, PODS[:3]), 15, 1e8) is None
    assert soak.growth_at_equal_population(samples(1e5, 1e3, PODS), 15, 0) is None
