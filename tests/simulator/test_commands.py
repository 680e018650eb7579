"""Volcano's bus Commands in the simulator: a Command `AbortJob` is consumed (deleted) by the job
controller, which records CommandIssued and moves the Job Running -> Aborting -> Aborted, as real
Volcano's job controller does. Played on a fake clock through the `gpu-idle` scenario."""

from __future__ import annotations

from typing import Any

from tests.simtools import FakeClock
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.resources import COMMANDS, EVENTS, JOBS, PODS
from volcano_monitor.simulator.store import Store, WatchEvent
from volcano_monitor.simulator.usage import render_prometheus

T0 = 1_700_000_000.0


def _play(driver: Driver, clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    end = clock.t + seconds
    while clock.t < end:
        clock.t += step
        driver.tick()


def _job(store: Store, prefix: str) -> dict[str, Any]:
    found = [j for j in store.objects(JOBS, "default") if j["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, [j["metadata"]["name"] for j in store.objects(JOBS)]
    return found[0]


def _command(job: dict[str, Any], name: str, action: str = "AbortJob", uid: str | None = None) -> dict[str, Any]:
    meta = job["metadata"]
    return {"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
            "metadata": {"name": name, "namespace": meta["namespace"]}, "action": action,
            "reason": "GpuIdle", "message": "idle",
            "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": meta["name"],
                       "uid": uid or meta["uid"]}}


def test_abort_command_is_consumed_and_the_job_ends_aborted() -> None:
    clock = FakeClock(T0)
    store = Store()
    phases: list[str] = []

    def listen(rtype: Any, event: WatchEvent) -> None:
        if rtype is JOBS and event.obj["metadata"]["name"].startswith("idle-gpu"):
            phase = (event.obj.get("status") or {}).get("state", {}).get("phase", "")
            if not phases or phases[-1] != phase:
                phases.append(phase)

    store.listeners.append(listen)
    driver = Driver(store, "gpu-idle", speed=10, clock=clock)
    driver.setup()
    _play(driver, clock, 5)
    idle, busy = _job(store, "idle-gpu"), _job(store, "busy-gpu")
    assert idle["status"]["state"]["phase"] == "Running"
    assert busy["status"]["state"]["phase"] == "Running"

    store.create(COMMANDS, _command(idle, "abort-idle"), namespace="default")
    # A Command for a run that no longer exists (another UID) is consumed and does nothing.
    store.create(COMMANDS, _command(busy, "abort-stale", uid="00000000-0000-0000-0000-000000000000"),
                 namespace="default")
    _play(driver, clock, 3)

    assert store.objects(COMMANDS) == []  # consumed: executed at most once
    assert _job(store, "idle-gpu")["status"]["state"]["phase"] == "Aborted"
    assert phases[-3:] == ["Running", "Aborting", "Aborted"]
    assert _job(store, "busy-gpu")["status"]["state"]["phase"] == "Running"
    assert not [p for p in store.objects(PODS, "default") if p["metadata"]["name"].startswith("idle-gpu")
                and p.get("status", {}).get("phase") == "Running"]
    reasons = [e["reason"] for e in store.objects(EVENTS, "default")
               if e["involvedObject"]["name"] == idle["metadata"]["name"]]
    assert "CommandIssued" in reasons


def test_gpu_idle_scenario_reports_dcgm_only_where_an_exporter_runs() -> None:
    clock = FakeClock(T0)
    driver = Driver(Store(), "gpu-idle", speed=10, clock=clock)
    driver.setup()
    _play(driver, clock, 5)
    text = render_prometheus((p.usage for p in driver.pods.values() if p.usage is not None), driver.now).decode()
    dcgm = {line.split('pod="')[1].split("-")[0] for line in text.splitlines() if line.startswith("DCGM_FI_DEV")}
    cpu = {line.split('pod="')[1].split("-")[0] for line in text.splitlines()
           if line.startswith("container_cpu_usage_seconds_total")}
    assert dcgm == {"idle", "busy"}
    assert cpu == {"idle", "busy", "no"}
