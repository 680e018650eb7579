"""Starting exporters against the simulated cluster, for the exporter's tests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.simtools import client_for, wait_for
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator.runtime import SimulatorThread


def start_exporter(sim: SimulatorThread, tmp_path: Path, **options: Any) -> Exporter:
    options.setdefault("backoff_base", 0.02)
    options.setdefault("backoff_cap", 0.2)
    options.setdefault("forbidden_retry_seconds", 0.2)
    exporter = Exporter(client_for(sim, tmp_path), **options).start()
    wait_for(exporter.ready, timeout=20)
    return exporter


def frozen_default_scenario(scenario_minutes: int = 15) -> SimulatorThread:
    """The default scenario played for a while at 600x, then held still (no ticks unless asked)."""
    sim = SimulatorThread(scenario="default", speed=600, auto_tick=False, bookmark_interval=0.2).start()
    deadline = time.monotonic() + scenario_minutes * 60 / 600
    while time.monotonic() < deadline:
        time.sleep(0.1)
        sim.tick()
    return sim
