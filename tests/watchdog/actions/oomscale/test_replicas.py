"""Several replicas, one truth: however many controllers race on one database (even two that both
believe they lead, as during a Lease hand-over), each attempt of a lineage is decided, submitted,
announced and counted once; a follower does nothing; a retry after the Job was created but before the
decision was recorded finds the Job (409) and records it once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import client_for, wait_for
from tests.watchdog.actions.oomscale.test_end_to_end import events, first, jobs, phase
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.simulator.store import WatchEvent
from volcano_monitor.watchdog.actions.oomscale import plan, store
from volcano_monitor.watchdog.actions.oomscale.controller import OomScaleUpController
from volcano_monitor.watchdog.actions.oomscale.settings import OomScaleUpSettings
from volcano_monitor.watchdog.state.db.models import OomResubmission

SPEED = 8.0


class Follower:
    """A replica that never holds the Lease."""

    identity = "follower"

    def start(self) -> Follower:
        return self

    def stop(self, release: bool = True) -> None:
        pass

    def is_leader(self) -> bool:
        return False

    def on_change(self, callback: Callable[[bool], None]) -> None:
        pass


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    started = SimulatorThread(scenario="oom-scale-up", speed=SPEED, tick_interval=0.1, bookmark_interval=1.0)
    started.start()
    yield started
    started.stop()


def added_jobs(sim: SimulatorThread) -> list[str]:
    seen: list[str] = []

    def listen(rtype: R.ResourceType, event: WatchEvent) -> None:
        if rtype is R.JOBS and event.type == "ADDED":
            seen.append(event.obj["metadata"]["name"])
    sim.call(sim.store.listeners.append, listen)
    return seen


def rows(engine: Engine) -> list[OomResubmission]:
    with Session(engine) as session:
        return list(session.scalars(select(OomResubmission).order_by(OomResubmission.attempt)))


def make(settings: OomScaleUpSettings, engine: Engine, sim: SimulatorThread, path: Path, leader: Any,
         run_loop: bool = True) -> OomScaleUpController:
    return OomScaleUpController(settings, engine, client_for(sim, path), leader,
                                informer_backoff=(0.02, 0.2)).start(run_loop=run_loop)


def test_racing_replicas_submit_each_attempt_once(sim: SimulatorThread, engine: Engine, tmp_path: Path) -> None:
    settings = OomScaleUpSettings(enabled=True, mode="apply", max_attempts=1, reconcile_interval_seconds=0.2)
    added = added_jobs(sim)
    replicas = [make(settings, engine, sim, tmp_path / name, leader)
                for name, leader in (("a", AlwaysLeader("a").start()), ("b", AlwaysLeader("b").start()),
                                     ("c", Follower()))]
    try:
        wait_for(lambda: any(n.startswith("grows-") for n in jobs(sim)), timeout=10)
        grows = first(sim, "grows-")
        wait_for(lambda: [r.outcome for r in rows(engine)] == ["applied", "exhausted"], timeout=40, interval=0.1)
        time.sleep(1.5)  # more racing passes
    finally:
        for replica in replicas:
            replica.stop()
    assert [(r.attempt, r.source_name, r.new_name, r.outcome) for r in rows(engine)] == [
        (1, grows, f"{grows}-oom1", "applied"), (2, f"{grows}-oom1", f"{grows}-oom2", "exhausted")]
    assert added.count(f"{grows}-oom1") == 1 and f"{grows}-oom2" not in jobs(sim)
    assert phase(jobs(sim)[f"{grows}-oom1"]) == "Failed"  # 1.5Gi is not enough, and max_attempts is 1
    total: dict[tuple[str, str], int] = {}
    for replica in replicas:
        for key, count in replica.counts.items():
            total[key] = total.get(key, 0) + count
    assert total == {("default", "applied"): 1, ("default", "exhausted"): 1}
    assert not replicas[2].counts  # the follower decided nothing
    assert [e["involvedObject"]["name"] for e in events(sim, "OOMScaleUp")] == [grows]
    assert [e["involvedObject"]["name"] for e in events(sim, "OOMScaleUpExhausted")] == [f"{grows}-oom1"]


def test_a_retry_after_the_create_records_it_once(sim: SimulatorThread, engine: Engine, tmp_path: Path) -> None:
    """The Job was created, then the database failed before the decision left "pending" (or the leader
    died): the next pass creates again, takes the 409 as done, and records it."""
    settings = OomScaleUpSettings(enabled=True, mode="apply", reconcile_interval_seconds=0.2)
    added = added_jobs(sim)
    oom = make(settings, engine, sim, tmp_path / "a", AlwaysLeader("a").start(), run_loop=False)
    try:
        wait_for(lambda: any(n.startswith("grows-") for n in jobs(sim)), timeout=10)
        grows = first(sim, "grows-")
        wait_for(lambda: phase(jobs(sim)[grows]) == "Failed" and bool(oom._killed), timeout=20, interval=0.05)
        job = jobs(sim)[grows]
        planned = plan.plan(job, {("main", "main"): 0.0}, settings, None)
        sim.call(sim.store.create, R.JOBS, planned.body)  # the earlier try's create
        with Session(engine) as session, session.begin():
            store.insert(session, {"namespace": "default", "lineage": grows, "lineage_uid": job["metadata"]["uid"],
                                   "attempt": 1, "source_name": grows, "source_uid": job["metadata"]["uid"],
                                   "new_name": planned.new_name, "queue": "default", "mode": "apply",
                                   "outcome": "pending", "containers": planned.containers(), "message": "",
                                   "identity": "a"}, datetime.now(UTC))
        wait_for(lambda: oom.wait_synced(0.1) and bool(oom._failed), timeout=10)
        outcomes = oom.reconcile()
        again = oom.reconcile()
    finally:
        oom.stop()
    assert outcomes[f"default/{grows}"] == "applied"
    assert again.get(f"default/{grows}") is None  # decided: not looked at again
    assert [(r.attempt, r.outcome, r.message) for r in rows(engine) if r.lineage == grows] == [
        (1, "applied", "already existed (created by an earlier try)")]
    assert added.count(f"{grows}-oom1") == 1
    assert oom.counts == {("default", "applied"): 1}


def test_a_second_replica_that_read_before_the_first_wrote_does_nothing(
        sim: SimulatorThread, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two interleavings a hand-over allows, made deterministic: B read no row (A had not committed
    its insert yet), or read it still "pending" (A had not settled it yet). B must neither submit a
    second Job nor record, announce, count or report the decision again."""
    settings = OomScaleUpSettings(enabled=True, mode="apply", reconcile_interval_seconds=0.2)
    added = added_jobs(sim)
    notices: list[tuple[str, int]] = []
    a, b = (OomScaleUpController(settings, engine, client_for(sim, tmp_path / name), AlwaysLeader(name).start(),
                                 notify=lambda session, d: notices.append((d.outcome, d.attempt)),
                                 informer_backoff=(0.02, 0.2)).start(run_loop=False) for name in ("a", "b"))
    try:
        wait_for(lambda: any(n.startswith("grows-") for n in jobs(sim)), timeout=10)
        grows = first(sim, "grows-")
        key = f"default/{grows}"
        wait_for(lambda: phase(jobs(sim)[grows]) == "Failed" and all(r._killed and r._failed for r in (a, b)),
                 timeout=20, interval=0.05)
        assert a.reconcile()[key] == "applied"
        stale = rows(engine)[0]
        stale.outcome = "pending"
        with monkeypatch.context() as patched:
            patched.setattr(store, "find", lambda *_: None)  # B looked before A's row existed
            assert b.reconcile()[key] == "recorded"
            b._done.clear()
            patched.setattr(store, "find", lambda *_: stale)  # B looked while A's row was pending
            b.reconcile()
    finally:
        a.stop()
        b.stop()
    assert added.count(f"{grows}-oom1") == 1
    assert [(r.attempt, r.outcome, r.identity) for r in rows(engine)] == [(1, "applied", "a")]
    assert notices == [("applied", 1)]
    assert a.counts == {("default", "applied"): 1} and not b.counts
    assert [e["involvedObject"]["name"] for e in events(sim, "OOMScaleUp")] == [grows]


def test_a_server_error_on_create_is_retried_not_final(tmp_path: Path) -> None:
    """503 from the API server leaves the decision pending (ApiUnavailable: the next pass tries again);
    the retry creates the Job; a third try is the 409 of the same resubmission."""
    from volcano_monitor.core.kube.rest import ApiUnavailable
    from volcano_monitor.watchdog.actions.oomscale import kube

    sim = SimulatorThread(auto_tick=False).start()
    try:
        api = client_for(sim, tmp_path)
        body = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "train-oom1", "namespace": "default"},
                "spec": {"queue": "default", "tasks": []}}
        sim.faults.error_resource, sim.faults.error_code, sim.faults.error_count = "jobs", 503, 1
        with pytest.raises(ApiUnavailable, match="HTTP 503"):
            kube.create_job(api, body)
        assert kube.create_job(api, body) == (True, "created")
        assert kube.create_job(api, body) == (True, "already existed (created by an earlier try)")
        sim.faults.forbidden = ["jobs"]
        done, why = kube.create_job(api, {**body, "metadata": {"name": "other-oom1", "namespace": "default"}})
        assert not done and why.startswith("HTTP 403")
    finally:
        sim.stop()
