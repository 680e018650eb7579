"""HyperNode fragmentation end to end: the simulator's `vgpu-hami` and `vgpu-volcano` scenarios (real API server,
informers, the watchdog's worker and its topology view, which the CLI serves as `/why` and on `/metrics`; the
HTTP side is tests/watchdog/findings/test_topology.py's) against the values simulator/vgpu_scenarios.py
computes by hand.

While bert-sweep holds 5 cards of gpu-21: free rack-1 4, rack-2 7, spine 11; largest gang tier 1 = 7, tier 2 = 11;
allreduce-8 (8 GPUs, hard, tier <= 1) waits with `topology_fragmented`. Deleting bert-sweep frees rack-2 (12),
the gang starts there, and afterwards rack-1 4, rack-2 4, spine 8; tier 1 = 4, tier 2 = 8.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import Engine

from tests.exporter.test_prometheus import parse_text
from tests.simtools import client_for, wait_for
from tests.watchdog.harness import fast_settings, start_watchdog
from volcano_monitor.simulator import vgpu_scenarios as scenario
from volcano_monitor.simulator.runtime import SimulatorThread


def values(text: str) -> tuple[dict[str, float], dict[int, float]]:
    free, gang = {}, {}
    for name, labels, value in parse_text(text):
        if name == "volcano_hypernode_free_gpus":
            free[labels["hypernode"]] = value
        elif name == "volcano_hypernode_largest_gang_gpus":
            gang[int(labels["tier"])] = value
    return free, gang


@pytest.mark.parametrize("name", ["vgpu-hami", "vgpu-volcano"])
def test_fragmented_gang_in_the_simulated_cluster(name: str, engine: Engine, tmp_path: Path) -> None:
    sim = SimulatorThread(scenario=name, speed=60).start()
    watchdog = start_watchdog(sim, engine, tmp_path, fast_settings(str(engine.url)))
    watchdog.topology.ttl_seconds = 0.1
    try:
        view = watchdog.topology  # what the CLI serves as /api/v1/jobs/{uid}/why and on /metrics

        def why() -> dict[str, Any] | None:
            uid = next((uid for (_, job), uid in list(watchdog.index.job_uids.items())
                        if job.startswith(scenario.GANG + "-")), None)  # the run's name: allreduce-8-<suffix>
            if uid is None or not watchdog.index_synced():
                return None
            found = view.why(uid)
            if found is None or found.explanation is None:
                return {"reason": None}
            return {"reason": found.explanation.reason, "message": found.explanation.message}

        def metrics() -> tuple[dict[str, float], dict[int, float]]:
            return values(view.render_metrics())

        before = (dict(scenario.HYPERNODE_FREE_GPUS), dict(scenario.LARGEST_GANG))
        wait_for(lambda: metrics() == before and (why() or {}).get("reason") == "topology_fragmented", timeout=60)
        got = why()
        assert got is not None and got["message"] == (
            "needs 8 GPUs inside one HyperNode of tier <= 1: the most one fits is 7 (HyperNode rack-2), "
            "while the cluster's nodes could take 11")

        blocker = next(job for _, job in list(watchdog.index.job_uids) if job.startswith(scenario.BLOCKER + "-"))
        client.CustomObjectsApi(client_for(sim, tmp_path / "kube")).delete_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "default", "jobs", blocker)
        after = (dict(scenario.HYPERNODE_FREE_GPUS_AFTER), dict(scenario.LARGEST_GANG_AFTER))
        wait_for(lambda: metrics() == after, timeout=60)
        wait_for(lambda: (why() or {}).get("reason") != "topology_fragmented", timeout=30)
        got = why()
        assert got is not None and got["reason"] != "topology_fragmented"
    finally:
        watchdog.stop()
        sim.stop()
