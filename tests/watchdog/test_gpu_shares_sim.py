"""The counting of issue 31 end to end: the whole watchdog against the simulator's `vgpu-hami` and `vgpu-volcano`
clusters (4 nodes of 8 A100 cards split 10 ways; shared-infer = four pods at a quarter of one card, train-whole =
one pod of four whole cards), on SQLite and PostgreSQL. From the informers alone (no Prometheus): the ledger's
requested GPUs and GPU-seconds are physical (shared-infer holds one card, a quarter of train-whole's four, where
counting vGPUs would say as much as train-whole), GPU cost is per card-hour, and the nodes count 8 cards each,
not 80 vGPU slots, with nothing stranded (no CPU-only pod holds their CPU)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.watchdog.harness import fast_settings, runs, start_watchdog
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.state.prices import run_cost

BUDGET = 60.0


@pytest.fixture(params=["vgpu-hami", "vgpu-volcano"])
def sim(request: pytest.FixtureRequest) -> Iterator[SimulatorThread]:
    with SimulatorThread(scenario=request.param, speed=10, tick_interval=0.2) as running:
        yield running


def _job(name: str) -> str:
    return re.sub(r"-[0-9a-z]{4,}$", "", name)


def test_shared_and_whole_cards_in_the_ledger_and_on_the_nodes(sim: SimulatorThread, engine: Engine,
                                                              database_url: str, tmp_path: Path) -> None:
    settings = fast_settings(database_url, costs={"prices": {"nvidia.com/gpu": 3.0}},
                             detectors={"gpu_stranded": {"enabled": True}})
    watchdog = start_watchdog(sim, engine, tmp_path, settings)
    deadline = time.monotonic() + BUDGET
    try:
        while True:
            by_job = {_job(r.name): r for r in runs(engine)}
            shared, whole = by_job.get("shared-infer"), by_job.get("train-whole")
            if shared is not None and whole is not None and shared.gpu_seconds_requested > 2.0 \
                    and whole.gpu_seconds_requested > 8.0 and watchdog.stranded is not None \
                    and len(watchdog.stranded.stranded) == 4:
                break
            assert time.monotonic() < deadline, {k: (r.requested_gpus, r.gpu_seconds_requested)
                                                 for k, r in by_job.items()}
            time.sleep(0.2)
        # the Jobs' own requests: four quarters are one card; four whole cards are four
        assert shared.requested_gpus == pytest.approx(1.0)
        assert whole.requested_gpus == pytest.approx(4.0)
        # integrated while both run: one card-second per second against four (vGPUs would say 4 against 4);
        # the two jobs' first samples may be a poll apart, hence the tolerance
        ratio = shared.gpu_seconds_requested / whole.gpu_seconds_requested
        assert ratio == pytest.approx(0.25, rel=0.15), (shared.gpu_seconds_requested, whole.gpu_seconds_requested)
        # priced per card-hour: shared-infer's GPU cost is its card-seconds at 3.0 an hour
        cost = run_cost(shared, settings.costs).requested["gpu"]
        assert cost == pytest.approx(shared.gpu_seconds_requested / 3600 * 3.0, rel=1e-6)
        # 8 cards per node, not 80 vGPU slots; nothing stranded
        gpus = {node.name: watchdog.nodes.gpus(node.name) for node in watchdog.nodes.nodes()}
        assert {name: g.cards for name, g in gpus.items() if g is not None} == {
            "gpu-11": 8, "gpu-12": 8, "gpu-21": 8, "gpu-22": 8}
        assert watchdog.stranded.stranded == {"gpu-11": 0, "gpu-12": 0, "gpu-21": 0, "gpu-22": 0}
    finally:
        watchdog.stop()
