"""bench/fleet.py --quick (the CI smoke of the fleet benchmark): several clusters' watchdog writers on one
PostgreSQL and the API on their ledger give one JSON object with the figures issue 32 asks for, the writers
really stored (transactions, usage samples attributed to their pods, no database error), and `?cluster=`
narrows the API's lists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.watchdog.conftest import POSTGRES_ADMIN

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow(45)
def test_the_quick_fleet_bench_prints_its_figures() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fleet.py"), "--quick"], capture_output=True,
                          text=True, timeout=240, env={**os.environ, "VOLCANO_BENCH_POSTGRES": POSTGRES_ADMIN})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert set(result["writers"]) == {"c00", "c01", "c02"}
    for cluster, figures in result["writers"].items():
        assert figures["transactions"] > 5, cluster  # a request pass a second at least, over 15 s
        assert figures["db_errors"] == figures["skipped"] == 0, cluster
        assert figures["live_pods"] > 1000 and figures["samples_accepted"] > 1000, cluster
        assert 0 < figures["p99_s"] <= result["writer_p99_seconds_max"]
    assert result["cluster_filter_applied"] is True
    assert result["api_p95_ms"] > 0 and set(result["meets_targets"]) == {"writer_p99_seconds_max", "api_p95_ms"}
