"""The watchdog against the simulator's default scenario: each detector fires for the workload built
to trigger it and stays quiet for the healthy ones; the ledger agrees with the simulated usage."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.simtools import wait_for
from tests.watchdog.harness import FAST_DETECTORS, alerts, fast_settings, kinds_by_workload, runs, start_watchdog
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.db.engine import make_engine

# Scenario seconds per real second: hp-search starts waiting at ~21600 s (18 s real).
SPEED = 1200

EXPECTED = {
    "report-gen": {"JobRetrying", "RetryExhausted", "JobFailed"},
    "embed-features": {"PodOOMKilled", "JobFailed"},
    "canary-infer": {"PodRejected", "JobFailed"},
    "llm-70b-sft": {"GangUnschedulable"},
    "ddp-resnet": {"PartialGang"},
    "bert-finetune": {"JobIdle"},
    "queue:research-nlp": {"QueueStarved"},
}
HEALTHY = ("etl-daily", "llama-pretrain", "mnist-ddp")
# batch-score (OverRequested) runs 20 scenario minutes: one real second at SPEED, too short to sample;
# the slower ledger test below checks it.


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    created = make_engine(database_url)
    yield created
    created.dispose()


def test_each_detector_fires_for_its_workload_and_healthy_ones_stay_quiet(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    # hp-search waits for its full queue (QueueStarved) and is scheduled within a tick once GPUs free
    # up; on a loaded machine that tick can come a second late, which a 1 s gang threshold would call
    # GangUnschedulable. 4 s (80 scenario minutes) is still far below how long llm-70b-sft waits.
    settings = fast_settings(database_url, detectors={**FAST_DETECTORS, "gang_unschedulable_seconds": 4})
    with SimulatorThread(scenario="default", speed=SPEED, tick_interval=0.05) as sim:
        watchdog = start_watchdog(sim, engine, tmp_path, settings)
        try:
            def all_fired() -> bool:
                found = kinds_by_workload([a for a in alerts(engine) if a.fired_at is not None])
                return all(kinds <= found.get(workload, set()) for workload, kinds in EXPECTED.items())

            try:
                wait_for(all_fired, timeout=45, interval=0.5)
            except AssertionError:
                found = kinds_by_workload([a for a in alerts(engine) if a.fired_at is not None])
                missing = {w: k - found.get(w, set()) for w, k in EXPECTED.items() if k - found.get(w, set())}
                raise AssertionError(f"not fired: {missing}; fired: {found}") from None
        finally:
            watchdog.stop()
    fired = kinds_by_workload([a for a in alerts(engine) if a.fired_at is not None])
    for workload in HEALTHY:
        assert workload not in fired, f"{workload} is healthy but raised {fired.get(workload)}"
    for workload, kinds in fired.items():  # nothing fires where it was not designed to
        # Waste kinds may also fire on workloads built for something else, rightly (ddp-resnet idles).
        allowed = EXPECTED.get(workload, set()) | {"JobIdle", "OverRequested"}
        assert kinds <= allowed, f"{workload}: unexpected {kinds - allowed}"
    assert watchdog.stats.db_errors == 0


def test_ledger_agrees_with_the_simulated_usage_and_over_requests_are_found(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    """Over a window, core-seconds the ledger adds for running jobs equal what the simulator's
    cAdvisor counters say those pods used (within 5%); batch-score, which uses 1 of its 16 cores,
    is reported OverRequested when it finishes."""
    with SimulatorThread(scenario="default", speed=60, tick_interval=0.1) as sim:
        watchdog = start_watchdog(sim, engine, tmp_path, fast_settings(database_url))
        try:
            wait_for(lambda: any(r.cpu_core_seconds_used > 0 for r in runs(engine)), timeout=30)
            before_ledger = {r.uid: r for r in runs(engine)}
            before_counters, t1, restarts_before = cpu_counters(sim), time.monotonic(), restart_counts(sim)
            time.sleep(10)
            after_ledger = {r.uid: r for r in runs(engine)}
            after_counters, t2, restarts_after = cpu_counters(sim), time.monotonic(), restart_counts(sim)
            requests = pod_cpu_requests(sim)
            wait_for(lambda: "OverRequested" in kinds_by_workload(
                [a for a in alerts(engine) if a.fired_at is not None]).get("batch-score", set()), timeout=40)
        finally:
            watchdog.stop()
    batch = next(r for r in runs(engine) if r.workload == "batch-score" and r.finished_at is not None)
    assert batch.cpu_core_seconds_used / batch.cpu_core_seconds_requested == pytest.approx(1 / 16, rel=0.25)
    compared = 0
    for uid, after in after_ledger.items():
        before = before_ledger.get(uid)
        if before is None or after.phase != "Running" or before.phase != "Running":
            continue
        pods = [k for k in after_counters if k[0] == after.namespace and k[1].startswith(after.name + "-")]
        restarted = {k[:2] for k in pods if restarts_after.get(k[:2], 0) != restarts_before.get(k[:2], -1)}
        if not pods or restarted or any(k not in before_counters for k in pods):
            continue  # a container started or restarted in the window: its counter does not cover it
        used = after.cpu_core_seconds_used - before.cpu_core_seconds_used
        requested = after.cpu_core_seconds_requested - before.cpu_core_seconds_requested
        simulated = sum(after_counters[k] - before_counters[k] for k in pods)
        simulated_requested = sum(requests[k[:2]] for k in pods) * (t2 - t1)
        if requested <= 0 or simulated_requested <= 0:
            continue
        # used/requested over the ledger's own intervals vs the simulator's counters over the test's window
        assert used / requested == pytest.approx(simulated / simulated_requested, rel=0.05), after.name
        compared += 1
    assert compared >= 2


def restart_counts(sim: SimulatorThread) -> dict[tuple[str, str], int]:
    from volcano_monitor.core.model import parse_pod
    from volcano_monitor.simulator import resources as R

    return {(p["metadata"]["namespace"], p["metadata"]["name"]): parse_pod(p).restart_count
            for p in sim.call(sim.store.objects, R.PODS)}


def pod_cpu_requests(sim: SimulatorThread) -> dict[tuple[str, str], float]:
    from volcano_monitor.core.model import parse_pod, res_get
    from volcano_monitor.simulator import resources as R

    return {(p["metadata"]["namespace"], p["metadata"]["name"]): res_get(parse_pod(p).requests, "cpu")
            for p in sim.call(sim.store.objects, R.PODS)}


def cpu_counters(sim: SimulatorThread) -> dict[tuple[str, str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = sim.call(sim.driver.prometheus_metrics).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "container_cpu_usage_seconds_total":
                out[(sample.labels["namespace"], sample.labels["pod"], sample.labels["container"])] = sample.value
    return out
