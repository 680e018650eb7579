"""The abort action's bookkeeping on a real database (SQLite and PostgreSQL), without a cluster:
eligibility (firing for the grace period, a queue whose policy aborts), dry-run records and announces
once and creates nothing, a follower does nothing, a rolled-back pass leaves nothing behind and its
retry records the run once, and an unreachable API server leaves the row pending, then failed. And
`GET /api/v1/gpu-idle` over a tracker and that trail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.gpu_idle.abort import (
    DRY_RUN,
    FAILED,
    PENDING,
    GpuIdleAborter,
    command_body,
    command_name,
)
from volcano_monitor.watchdog.actions.gpu_idle.api import gpu_idle_router
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.findings.detectors.gpuidle import GPU_IDLE, GpuIdleDetector
from volcano_monitor.watchdog.state.db.models import Alert, GpuIdleAbortRow, NotificationEntry
from volcano_monitor.watchdog.state.gpu_idle import GpuIdleTracker
from volcano_monitor.watchdog.state.samples import PodInfo, UsageSample

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


class Leading:
    def __init__(self, leading: bool) -> None:
        self.leading = leading

    def is_leader(self) -> bool:
        return self.leading


def _settings(mode: str) -> GpuIdleSettings:
    return GpuIdleSettings.model_validate({
        "queues": {"research": {"gpu_idle_limit_seconds": 600, "abort": True},
                   "prod": {"gpu_idle_limit_seconds": 600}},
        "abort": {"enabled": True, "mode": mode, "grace_seconds": 300}})


def _outbox() -> Outbox:
    return Outbox(load(None, environ={}, notifications={
        "receivers": [{"name": "chat", "webhook": {"url": "http://127.0.0.1:1/x"}}],
        "route": {"receiver": "chat"}}).notifications)


def _alert(session: Session, uid: str, queue: str, fired_ago: float, state: str = "firing") -> None:
    fired = NOW - timedelta(seconds=fired_ago)
    session.add(Alert(fingerprint=f"fp-{uid}", kind=GPU_IDLE, severity="warning", state=state, namespace="ml",
                      queue=queue, job_name=f"train-{uid}", subject=f"train-{uid}", summary="idle GPUs",
                      details={"job_uid": uid, "idle_seconds": 900.0}, started_at=fired, fired_at=fired,
                      resolved_at=None, last_seen_at=NOW, updated_at=NOW))


def _rows(engine: Engine) -> list[tuple[str, str, str]]:
    with Session(engine) as session:
        return sorted((r.job_uid, r.state, r.mode) for r in session.scalars(select(GpuIdleAbortRow)))


def _notices(engine: Engine) -> list[dict[str, Any]]:
    with Session(engine) as session:
        return [e.alert for e in session.scalars(select(NotificationEntry))]


def test_dry_run_records_and_announces_eligible_runs_once_and_creates_nothing(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        _alert(session, "u1", "research", fired_ago=400)  # past the grace: eligible
        _alert(session, "u2", "research", fired_ago=100)  # within the grace
        _alert(session, "u3", "prod", fired_ago=4000)  # prod's policy only alerts
        _alert(session, "u4", "research", fired_ago=4000, state="pending")  # not firing
    follower = GpuIdleAborter(_settings("dry-run"), engine, None, Leading(False), clock=NOW.timestamp,
                              outbox=_outbox())
    assert follower.run_once() == 0 and _rows(engine) == []
    aborter = GpuIdleAborter(_settings("dry-run"), engine, None, Leading(True), clock=NOW.timestamp,
                             outbox=_outbox(), identity="replica-a")
    for _ in range(3):
        assert aborter.run_once() == 0  # no Command in dry-run (no API client is even given)
    assert _rows(engine) == [("u1", DRY_RUN, "dry-run")]
    notices = _notices(engine)
    assert [(n["kind"], n["job_name"]) for n in notices] == [("GpuIdleAbort", "train-u1")]
    assert "would be aborted (dry-run)" in notices[0]["summary"]
    assert aborter.counts() == {("research", DRY_RUN): 1}


def test_a_rolled_back_pass_records_nothing_and_its_retry_records_once(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        _alert(session, "u1", "research", fired_ago=400)
    aborter = GpuIdleAborter(_settings("dry-run"), engine, None, Leading(True), clock=NOW.timestamp,
                             outbox=_outbox())
    with Session(engine) as session:
        session.begin()
        assert aborter._record_eligible(session, NOW) == ["research"]
        session.rollback()  # the database failed before the commit
    assert _rows(engine) == [] and _notices(engine) == []
    aborter.run_once()
    aborter.run_once()
    assert _rows(engine) == [("u1", DRY_RUN, "dry-run")] and len(_notices(engine)) == 1


def test_apply_without_a_reachable_api_server_stays_pending_then_fails(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        _alert(session, "u1", "research", fired_ago=400)
    aborter = GpuIdleAborter(_settings("apply"), engine, None, Leading(True), clock=NOW.timestamp)
    aborter.run_once()
    assert _rows(engine) == [("u1", PENDING, "apply")]
    for _ in range(4):
        aborter.run_once()
    assert _rows(engine) == [("u1", FAILED, "apply")]
    with Session(engine) as session:
        row = session.scalars(select(GpuIdleAbortRow)).one()
        assert row.attempts == 5 and "no Kubernetes API client" in row.last_error
        assert row.command_name == command_name("train-u1", "u1")


def test_command_names_are_dns_names_fixed_by_the_uid() -> None:
    long_name = "a" * 250 + "-"
    assert command_name("train", "u1") == command_name("train", "u1") != command_name("train", "u2")
    assert len(command_name(long_name, "u1")) <= 253
    body = command_body("ml", "train", "u1", "idle")
    assert body["action"] == "AbortJob" and body["target"] == {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train", "uid": "u1"}
    assert body["metadata"]["ownerReferences"][0]["controller"] is True


def test_api_lists_job_states_with_no_gpu_data_never_idle_and_the_audit_trail(engine: Engine) -> None:
    settings = _settings("dry-run")
    tracker = GpuIdleTracker(settings)
    infos = {f"{uid}-0": PodInfo(uid, f"train-{uid}", "ml", "train", "w", "research", "Running", 1, 1, 1)
             for uid in ("u1", "u2", "u3")}
    for ts in (1000.0, 1060.0):
        tracker.observe([UsageSample(ts, "ml", "u1-0", "main", 1, 1, 1.0, 1),
                         UsageSample(ts, "ml", "u2-0", "main", 1, 1, 90.0, 1),
                         UsageSample(ts, "ml", "u3-0", "main", 1, 1, None, 0)], lambda _ns, pod: infos.get(pod))
    with Session(engine) as session, session.begin():
        _alert(session, "u1", "research", fired_ago=400)
    GpuIdleAborter(settings, engine, None, Leading(True), clock=NOW.timestamp).run_once()
    app = FastAPI()
    app.include_router(gpu_idle_router(engine, settings, tracker.snapshot, lambda: True))
    body = TestClient(app).get("/api/v1/gpu-idle").json()
    jobs = {j["job_name"]: j for j in body["jobs"]}
    assert {name: (j["state"], j["idle_seconds"]) for name, j in jobs.items()} == {
        "train-u1": ("idle", 60.0), "train-u2": ("busy", 0.0), "train-u3": ("no_gpu_data", None)}
    assert jobs["train-u1"]["limit_seconds"] == 600 and jobs["train-u1"]["abort"] is True
    assert body["leader"] is True and body["aborts_total"] == 1
    assert [(a["job_uid"], a["state"], a["mode"]) for a in body["aborts"]] == [("u1", "dry_run", "dry-run")]


def test_detector_carries_open_alerts_it_cannot_judge_and_drops_those_it_can(engine: Engine) -> None:
    settings = _settings("dry-run")
    tracker = GpuIdleTracker(settings)
    with Session(engine) as session, session.begin():
        for uid in ("u1", "u2", "u3"):
            _alert(session, uid, "research", fired_ago=60)
    info = PodInfo("u2", "train-u2", "ml", "train", "w", "research", "Running", 1, 1, 1)
    tracker.observe([UsageSample(1000.0, "ml", "u2-0", "main", 1, 1, 95.0, 1)],
                    lambda _ns, pod: info if pod == "u2-0" else None)  # u2 is busy now
    synced = [False]
    detector = GpuIdleDetector(settings, tracker, live=lambda: {"u1", "u2"}, synced=lambda: synced[0])
    with Session(engine) as session:
        before_sync = {s.details["job_uid"] for s in detector.check(session, NOW)}
        synced[0] = True
        after_sync = {s.details["job_uid"] for s in detector.check(session, NOW)}
    assert before_sync == {"u1", "u3"}  # unknown jobs kept before the informers' lists; busy u2 never
    assert after_sync == {"u1"}  # u3 is not live: its alert resolves
