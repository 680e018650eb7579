"""The capability controller against the simulated cluster (real kubernetes client, real HTTP), storing
on SQLite and PostgreSQL: share policies following nodes, demand stepping down under the guardrails,
dry-run, two replicas behind one Lease, and concurrent edits of the Queue."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from kubernetes import client
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import FakeClock, client_for, wait_for
from tests.watchdog.actions.capability.conftest import (
    capability,
    delete,
    events,
    node,
    put,
    queue,
    set_allocated,
    stored,
)
from volcano_monitor.core.kube.leaderelection import AlwaysLeader, LeaderElector
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.actions.capability import store
from volcano_monitor.watchdog.actions.capability.api import capability_router
from volcano_monitor.watchdog.actions.capability.controller import CapabilityController
from volcano_monitor.watchdog.actions.capability.metrics import render_capability_metrics
from volcano_monitor.watchdog.actions.capability.settings import CapabilitySettings
from volcano_monitor.watchdog.actions.capability.store import CapabilityChange
from volcano_monitor.watchdog.runtime.settings import LeaderElection
from volcano_monitor.watchdog.state.db.models import CapabilityChange as ChangeRow
from volcano_monitor.watchdog.state.db.models import UsageRollup

GPU = "nvidia.com/gpu"
GPU_SHARE = {"share": {"fraction": 0.5, "node_selector": {"pool": "gpu"}, "resources": [GPU]}}
FAST = {"enabled": True, "mode": "apply", "reconcile_interval_seconds": 2, "debounce_seconds": 0.05,
        "max_step_fraction": 1.0, "cooldown_seconds": 0, "tolerance_fraction": 0}


class Harness:
    """Controllers made for a test, stopped at its end."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.made: list[CapabilityController] = []

    def controller(self, api: client.ApiClient, settings: dict[str, Any], leader: Any = None,
                   clock: Any = time.time, announce: Any = None) -> CapabilityController:
        made = CapabilityController(CapabilitySettings(**settings), self.engine, api,
                                    leader or AlwaysLeader("wd-0").start(), clock, announce,
                                    informer_backoff=(0.02, 0.2))
        self.made.append(made)
        return made


@pytest.fixture
def harness(engine: Engine) -> Iterator[Harness]:
    made = Harness(engine)
    yield made
    for controller in made.made:
        controller.stop()


def changes(engine: Engine, queue_name: str) -> list[ChangeRow]:
    with Session(engine) as session:
        return list(session.scalars(select(ChangeRow).where(ChangeRow.queue == queue_name).order_by(ChangeRow.id)))


def settle(controller: CapabilityController, sim: SimulatorThread, name: str) -> None:
    """Wait until the controller's queue informer has the Queue's latest version."""
    rv = stored(sim, R.QUEUES, name)["metadata"]["resourceVersion"]
    wait_for(lambda: (e := controller.queue_informer.cache.get(name)) is not None and e.resource_version == rv)


def test_share_follows_gpu_nodes_joining_cordoned_and_leaving(sim: SimulatorThread, api: client.ApiClient,
                                                               harness: Harness) -> None:
    put(sim, R.NODES, node("cpu-1", {"pool": "cpu"}))
    put(sim, R.QUEUES, queue("gpu", capability={"cpu": "16", GPU: "0"}))
    announced: list[CapabilityChange] = []
    controller = harness.controller(api, {**FAST, "policies": {"gpu": GPU_SHARE}}, announce=announced.append)
    controller.start()
    wait_for(lambda: controller.status("gpu").get("outcome") == "unchanged", timeout=5)  # no GPU node: 0 is right

    interval = FAST["reconcile_interval_seconds"]
    put(sim, R.NODES, node("gpu-1", {"pool": "gpu"}, gpus=8))
    put(sim, R.NODES, node("gpu-2", {"pool": "gpu"}, gpus=8))
    wait_for(lambda: capability(sim, "gpu").get(GPU) == "8", timeout=interval)  # half of 16 GPUs
    assert capability(sim, "gpu")["cpu"] == "16"  # the merge patch leaves other resources alone

    cordoned = node("gpu-2", {"pool": "gpu"}, gpus=8, unschedulable=True)
    put(sim, R.NODES, cordoned)
    wait_for(lambda: capability(sim, "gpu").get(GPU) == "4", timeout=interval)

    set_allocated(sim, "gpu", {"cpu": "4", "memory": "8Gi", GPU: "2"})
    delete(sim, R.NODES, "gpu-1")
    delete(sim, R.NODES, "gpu-2")
    wait_for(lambda: capability(sim, "gpu").get(GPU) == "2", timeout=interval)  # not 0: two GPUs are allocated
    time.sleep(interval + 0.5)  # a periodic reconcile later it still holds
    assert capability(sim, "gpu").get(GPU) == "2"
    assert controller.status("gpu")["outcome"] == "held"

    rows = changes(harness.engine, "gpu")
    assert [(r.outcome, r.before, r.after) for r in rows] == [
        ("applied", {GPU: 0.0}, {GPU: 8.0}), ("applied", {GPU: 8.0}, {GPU: 4.0}), ("applied", {GPU: 4.0}, {GPU: 2.0})]
    assert "2 Ready schedulable node(s) matching pool=gpu" in rows[0].why[GPU]
    assert rows[0].inputs["nodes"] == ["gpu-1", "gpu-2"] and rows[1].inputs["nodes"] == ["gpu-1"]
    assert "kept at allocated 2" in rows[2].why[GPU]
    assert [(c.before, c.after, c.outcome) for c in announced] == [(r.before, r.after, r.outcome) for r in rows]

    uid = stored(sim, R.QUEUES, "gpu")["metadata"]["uid"]
    updates = [e for e in events(sim) if e["reason"] == "CapabilityUpdated"]
    assert len(updates) == 3
    assert {(e["involvedObject"]["kind"], e["involvedObject"]["apiVersion"], e["involvedObject"]["name"],
             e["involvedObject"]["uid"]) for e in updates} == {("Queue", "scheduling.volcano.sh/v1beta1", "gpu", uid)}
    assert any("nvidia.com/gpu 8 -> 4" in e["message"] for e in updates)

    text = render_capability_metrics(controller)
    assert 'volcano_watchdog_queue_capability_target{queue="gpu",resource="nvidia_com_gpu",unit="integer"} 2\n' in text
    assert 'volcano_watchdog_queue_capability_updates_total{queue="gpu",outcome="applied"} 3\n' in text
    assert 'volcano_watchdog_queue_capability_updates_total{queue="gpu",outcome="failed"} 0\n' in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def usage_rows(now: datetime, queue_name: str, buckets: int = 12) -> list[UsageRollup]:
    """Two containers per 5-minute bucket, each averaging 1 core with a 2Gi peak."""
    rows = []
    for b in range(buckets):
        start = now - timedelta(seconds=300 * (b + 1))
        for pod in ("p0", "p1"):
            rows.append(UsageRollup(bucket_start=start, bucket_seconds=300, namespace="ns", pod=pod, container="main",
                                    queue=queue_name, samples=10, cpu_cores_sum=10.0, cpu_cores_max=1.5,
                                    memory_bytes_sum=10 * 2.0 * 2**30, memory_bytes_max=2.0 * 2**30))
    return rows


def test_demand_steps_down_at_most_one_step_per_cooldown_and_stops_at_min(
        sim: SimulatorThread, api: client.ApiClient, harness: Harness) -> None:
    t0 = 1_750_000_000.0
    clock = FakeClock(t0)
    with Session(harness.engine) as session, session.begin():
        session.add_all(usage_rows(datetime.fromtimestamp(t0, UTC), "batch"))
    put(sim, R.QUEUES, queue("batch", capability={"cpu": "100", "memory": "400Gi"}))
    policy = {"demand": {"window_seconds": 86400, "resources": ["cpu", "memory"],
                         "min": {"cpu": "40", "memory": "100Gi"}}}
    controller = harness.controller(api, {"enabled": True, "mode": "apply", "max_step_fraction": 0.25,
                                          "cooldown_seconds": 900, "policies": {"batch": policy}}, clock=clock)
    controller.start(run_loop=False)
    assert controller.wait_synced(5)

    def step(at: float) -> tuple[str, dict[str, Any]]:
        clock.t = t0 + at
        settle(controller, sim, "batch")
        outcome = controller.reconcile()["batch"]
        return outcome, capability(sim, "batch")

    # usage: p95 of 2 cores / 4Gi per bucket, +20% = 2.4 cores / 4.8Gi: far below, so the target is the minimum
    assert step(0) == ("applied", {"cpu": "75", "memory": "300Gi"})
    assert controller.status("batch")["resources"]["cpu"]["target"] == 40.0
    assert step(60) == ("held", {"cpu": "75", "memory": "300Gi"})  # cooldown
    assert step(899) == ("held", {"cpu": "75", "memory": "300Gi"})
    assert step(900) == ("applied", {"cpu": "56250m", "memory": "225Gi"})
    assert step(1800) == ("applied", {"cpu": "42188m", "memory": "172800Mi"})  # 42.1875 rounded towards current
    assert step(2700) == ("applied", {"cpu": "40", "memory": "129600Mi"})  # cpu reaches min (a step allows 31.6)
    assert step(3600) == ("applied", {"cpu": "40", "memory": "100Gi"})
    assert step(4500) == ("unchanged", {"cpu": "40", "memory": "100Gi"})

    rows = changes(harness.engine, "batch")
    assert len(rows) == 5
    for row in rows:
        for resource, after in row.after.items():
            assert row.before[resource] * 0.75 <= after < row.before[resource]
    assert [r.created_at.timestamp() - t0 for r in rows] == [0, 900, 1800, 2700, 3600]
    assert rows[0].inputs["buckets"] == 12 and rows[0].inputs["usage_percentile"]["cpu"] == 2.0
    assert controller.update_counts()[("batch", "conflict")] == 0


def test_dry_run_patches_nothing_yet_stores_and_shows_the_plan(sim: SimulatorThread, api: client.ApiClient,
                                                               harness: Harness) -> None:
    put(sim, R.NODES, node("cpu-1", {"pool": "cpu"}, cpu="32"))
    put(sim, R.NODES, node("cpu-2", {"pool": "cpu"}, cpu="32"))
    put(sim, R.QUEUES, queue("research", capability={"cpu": "10"}))
    announced: list[CapabilityChange] = []
    policy = {"share": {"fraction": 0.5, "node_selector": {"pool": "cpu"}, "resources": ["cpu"]}}
    controller = harness.controller(api, {"enabled": True, "mode": "dry-run", "policies": {"research": policy}},
                                    announce=announced.append)
    controller.start(run_loop=False)
    assert controller.wait_synced(5)
    before = stored(sim, R.QUEUES, "research")["metadata"]["resourceVersion"]
    assert controller.reconcile() == {"research": "dry_run"}
    assert controller.reconcile() == {"research": "dry_run"}
    assert stored(sim, R.QUEUES, "research")["metadata"]["resourceVersion"] == before
    assert capability(sim, "research") == {"cpu": "10"}

    with Session(harness.engine) as session:
        plan = store.get_plan(session, "research")
        assert plan is not None and plan.outcome == "dry_run" and plan.mode == "dry-run"
        assert plan.resources["cpu"]["target"] == 32.0 and plan.resources["cpu"]["planned"] == 12.5
    rows = changes(harness.engine, "research")
    assert [(r.outcome, r.before, r.after) for r in rows] == [("dry_run", {"cpu": 10.0}, {"cpu": 12.5})]  # once
    assert [c.outcome for c in announced] == ["dry_run"]
    assert [e["reason"] for e in events(sim)] == ["CapabilityPlanned"]

    app = FastAPI()
    app.include_router(capability_router(harness.engine, controller))
    body = TestClient(app).get("/api/v1/queues/research/capability").json()
    assert body["plan"]["outcome"] == "dry_run" and body["plan"]["mode"] == "dry-run"
    assert body["plan"]["resources"]["cpu"] | {"why": ""} == {
        "current": 10.0, "target": 32.0, "planned": 12.5, "allocated": 0.0, "why": "", "held": False}
    assert body["history"]["total"] == 1 and body["history"]["items"][0]["after"] == {"cpu": 12.5}
    assert TestClient(app).get("/api/v1/queues/nope/capability").status_code == 404


def test_only_the_leader_patches_and_a_follower_takes_over_after_a_crash(
        sim: SimulatorThread, tmp_path: Path, harness: Harness) -> None:
    put(sim, R.NODES, node("gpu-1", {"pool": "gpu"}, gpus=8))
    put(sim, R.QUEUES, queue("gpu", capability={GPU: "0"}))
    duration = 2.0
    pairs = []
    for name in ("wd-a", "wd-b"):
        api = client_for(sim, tmp_path / name)
        elector = LeaderElector(api, LeaderElection(enabled=True, identity=name, lease_duration_seconds=duration,
                                                    renew_interval_seconds=0.2))
        controller = harness.controller(api, {**FAST, "reconcile_interval_seconds": 0.5,
                                              "policies": {"gpu": GPU_SHARE}}, leader=elector)
        pairs.append((elector, controller))
    for elector, controller in pairs:
        controller.start()
        elector.start()
    try:
        wait_for(lambda: capability(sim, "gpu").get(GPU) == "4", timeout=5)
        leader, leading = next((e, c) for e, c in pairs if e.is_leader())
        follower, following = next((e, c) for e, c in pairs if e is not leader)
        time.sleep(1.0)  # a few reconciles of both
        assert {r.identity for r in changes(harness.engine, "gpu")} == {leader.identity}
        assert leading.update_counts()[("gpu", "applied")] == 1
        assert sum(following.update_counts().values()) == 0  # a follower plans but neither acts nor counts
        assert following.status("gpu")["leader"] is False

        leader.stop(release=False)  # the leader crashes: no release
        leading.stop()
        crashed = time.monotonic()
        put(sim, R.NODES, node("gpu-2", {"pool": "gpu"}, gpus=8))
        wait_for(lambda: capability(sim, "gpu").get(GPU) == "8", timeout=duration + 2)
        assert time.monotonic() - crashed >= duration - 0.5  # not before the lease could expire
        wait_for(lambda: len(changes(harness.engine, "gpu")) == 2, timeout=5)  # the audit row follows the patch
        last = changes(harness.engine, "gpu")[-1]
        assert (last.identity, last.before, last.after) == (follower.identity, {GPU: 4.0}, {GPU: 8.0})
    finally:
        for elector, _ in pairs:
            elector.stop()


def edit_queue(api: client.ApiClient, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name,
                                                             {"spec": spec})


def test_a_concurrent_edit_is_kept_and_the_change_replanned_on_top(sim: SimulatorThread, api: client.ApiClient,
                                                                   harness: Harness) -> None:
    put(sim, R.NODES, node("n1", cpu="20"))
    put(sim, R.NODES, node("n2", cpu="20"))
    put(sim, R.QUEUES, queue("q", capability={"cpu": "10"}, weight=1))
    policy = {"share": {"fraction": 1.0, "resources": ["cpu"]}}
    controller = harness.controller(api, {**FAST, "policies": {"q": policy}})
    controller.start(run_loop=False)
    assert controller.wait_synced(5)
    controller.queue_informer.stop()  # the controller's view of the Queue is now frozen (capability 10)
    edit_queue(api, "q", {"weight": 5, "capability": {"cpu": "16"}})  # someone else's edit

    assert controller.reconcile() == {"q": "applied"}
    final = stored(sim, R.QUEUES, "q")
    assert final["spec"]["weight"] == 5  # their change is kept
    assert final["spec"]["capability"] == {"cpu": "32"}  # ours re-planned from their 16: one step of 100% is 32
    counts = controller.update_counts()
    assert (counts[("q", "conflict")], counts[("q", "applied")]) == (1, 1)
    assert [(r.before, r.after) for r in changes(harness.engine, "q")] == [({"cpu": 16.0}, {"cpu": 32.0})]


def test_conflicts_beyond_the_retries_never_overwrite(sim: SimulatorThread, api: client.ApiClient,
                                                      harness: Harness) -> None:
    put(sim, R.NODES, node("n1", cpu="20"))
    put(sim, R.QUEUES, queue("q", capability={"cpu": "10"}))
    controller = harness.controller(api, {**FAST, "conflict_retries": 0,
                                          "policies": {"q": {"share": {"fraction": 1.0, "resources": ["cpu"]}}}})
    controller.start(run_loop=False)
    assert controller.wait_synced(5)
    controller.queue_informer.stop()
    edit_queue(api, "q", {"capability": {"cpu": "12"}})
    assert controller.reconcile() == {"q": "failed"}
    assert capability(sim, "q") == {"cpu": "12"}
    assert changes(harness.engine, "q") == []


def test_usage_buckets_sum_containers_and_count_idle_buckets_as_zero(engine: Engine) -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

    def row(minutes_ago: int, queue_name: str, pod: str, **usage: float) -> UsageRollup:
        return UsageRollup(bucket_start=now - timedelta(minutes=minutes_ago), bucket_seconds=300, namespace="ns",
                           pod=pod, container="c", queue=queue_name, **usage)

    with Session(engine) as session, session.begin():
        session.add_all([
            row(5, "a", "p1", samples=4, cpu_cores_sum=8.0, memory_bytes_max=100.0, gpu_samples=2,
                gpu_util_sum=100.0, gpu_request=2.0),  # 2 cores, GPUs at 50%: 1 GPU busy
            row(5, "a", "p2", samples=2, cpu_cores_sum=1.0, memory_bytes_max=50.0, gpu_request=1.0),  # no DCGM
            row(10, "b", "p3", samples=1, cpu_cores_sum=3.0),  # "a" idle while the collector ran
            row(120, "a", "p1", samples=1, cpu_cores_sum=99.0),  # outside the window
        ])
    with Session(engine) as session:
        buckets = store.usage_buckets(session, "a", now - timedelta(minutes=60), now)
    assert buckets == [{"cpu": 0.0, "memory": 0.0, "gpu": 0.0}, {"cpu": 2.5, "memory": 150.0, "gpu": 2.0}]


def test_nothing_is_planned_before_the_informers_listed(sim: SimulatorThread, api: client.ApiClient,
                                                        harness: Harness) -> None:
    put(sim, R.QUEUES, queue("q", capability={"cpu": "10"}))
    controller = harness.controller(api, {**FAST, "policies": {"q": {"share": {"fraction": 1.0}}}})
    assert controller.reconcile() == {}  # not started: an empty node cache is not an empty cluster
    assert capability(sim, "q") == {"cpu": "10"}


def test_a_child_queue_is_capped_at_its_parents_planned_capability(sim: SimulatorThread, api: client.ApiClient,
                                                                   harness: Harness) -> None:
    put(sim, R.NODES, node("n1", cpu="32"))
    put(sim, R.NODES, node("n2", cpu="32"))
    put(sim, R.QUEUES, queue("eng", capability={"cpu": "8"}))
    put(sim, R.QUEUES, queue("eng-prod", capability={"cpu": "4"}, parent="eng"))
    put(sim, R.QUEUES, queue("ml", capability={"cpu": "48"}))  # no policy: its current capability caps
    put(sim, R.QUEUES, queue("ml-train", capability={"cpu": "4"}, parent="ml"))
    everything = {"share": {"fraction": 1.0, "resources": ["cpu"]}}
    policies = {"eng-prod": everything, "eng": {"share": {"fraction": 0.5, "resources": ["cpu"]}},
                "ml-train": everything}
    controller = harness.controller(api, {**FAST, "max_step_fraction": 100, "policies": policies})
    controller.start(run_loop=False)
    assert controller.wait_synced(5)
    assert controller.reconcile() == {"eng": "applied", "eng-prod": "applied", "ml-train": "applied"}
    assert capability(sim, "eng") == {"cpu": "32"}  # half of 64
    assert capability(sim, "eng-prod") == {"cpu": "32"}  # wants 64, capped at the parent's new 32
    assert capability(sim, "ml-train") == {"cpu": "48"}
    assert "capped at the parent's 32" in controller.status("eng-prod")["resources"]["cpu"]["why"]
