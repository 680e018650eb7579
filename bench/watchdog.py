"""Watchdog benchmarks, one JSON object (targets from DESIGN §7):

- samples_per_second_sqlite / samples_per_second_postgres (>= 50,000 / >= 20,000): usage samples
  ingested and stored (rollups, ledger integrals, histograms), flushed every poll — bench/watchdog_usage.py;
- recommend_seconds_10k_containers_8d (<= 5): recommendations for 10k containers with 8 days of
  history, read from SQLite — bench/watchdog_recommend.py.

    .venv/bin/python bench/watchdog.py
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

_HERE = Path(__file__).resolve().parent


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, _HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


watchdog_usage = _load("watchdog_usage")
watchdog_recommend = _load("watchdog_recommend")

TARGETS = {"samples_per_second_sqlite": (">=", 50_000), "samples_per_second_postgres": (">=", 20_000),
           "recommend_seconds_10k_containers_8d": ("<=", 5.0)}


def main() -> None:
    result: dict[str, object] = {**watchdog_usage.measure(), **watchdog_recommend.measure()}
    result["targets"] = {k: f"{op} {v:g}" for k, (op, v) in TARGETS.items()}
    result["meets_targets"] = {
        k: (float(result[k]) >= v if op == ">=" else float(result[k]) <= v)  # type: ignore[arg-type]
        for k, (op, v) in TARGETS.items() if k in result
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
