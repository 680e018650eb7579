"""The job ledger on both databases: fields from Job and PodGroup events, replay idempotency, rows
that outlive the object, accumulators never reset, retention."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, column, func, select, table, update
from sqlalchemy.orm import Session

from volcano_monitor.core.model import Job, PodGroup, Queue, parse_job, parse_podgroup, parse_queue
from volcano_monitor.watchdog.runtime.settings import Retention
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.models import Alert, JobRun, UsageRollup
from volcano_monitor.watchdog.state.db.scope import fleet
from volcano_monitor.watchdog.state.ledger import Ledger, efficiency, enforce_retention

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def job(phase: str = "Running", uid: str = "uid-1", name: str = "train-7k2p", **extra: Any) -> Job:
    conditions = [{"status": "Pending", "lastTransitionTime": "2024-05-01T10:00:00Z"},
                  {"status": "Running", "lastTransitionTime": "2024-05-01T10:01:00Z"}]
    if phase in ("Completed", "Failed"):
        conditions.append({"status": phase, "lastTransitionTime": "2024-05-01T11:00:00Z"})
    return parse_job({
        "metadata": {"name": name, "namespace": "team-a", "uid": uid, "resourceVersion": "7",
                     "creationTimestamp": "2024-05-01T09:59:00Z"},
        "spec": {"queue": "research", "tasks": [
            {"name": "worker", "replicas": 4, "template": {"spec": {"containers": [
                {"name": "main", "resources": {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}}},
            ]}}},
        ]},
        "status": {"state": {"phase": phase, "reason": extra.get("reason", ""), "message": extra.get("message", "")},
                   "retryCount": extra.get("retries", 0), "conditions": conditions},
    })


def podgroup(phase: str, owner_kind: str = "PyTorchJob", uid: str = "pg-uid") -> PodGroup:
    owner = [{"kind": owner_kind, "name": "bert-42", "uid": "owner-uid", "controller": True}] if owner_kind else []
    return parse_podgroup({
        "metadata": {"name": "bert-42", "namespace": "team-b", "uid": uid, "resourceVersion": "3",
                     "creationTimestamp": "2024-05-01T09:00:00Z", "ownerReferences": owner},
        "spec": {"queue": "nlp", "minMember": 2, "minResources": {"cpu": "8", "memory": "32Gi", "amd.com/gpu": "2"}},
        "status": {"phase": phase, "conditions": [
            {"type": "Scheduled", "status": "True", "lastTransitionTime": "2024-05-01T09:05:00Z"},
        ] if phase != "Pending" else []},
    })


def rows(engine: Engine) -> list[JobRun]:
    with Session(engine) as session:
        return list(session.scalars(select(JobRun).order_by(JobRun.uid)))


def test_job_events_fill_the_run(engine: Engine) -> None:
    ledger = Ledger()
    with Session(engine) as session:
        ledger.on_job("ADDED", job("Pending"), session, NOW)
        ledger.on_job("MODIFIED", job("Running"), session, NOW + timedelta(minutes=1))
        ledger.on_job("MODIFIED", job("Failed", reason="PodFailed", message="worker-1 OOMKilled", retries=2),
                      session, NOW + timedelta(minutes=2))
        session.commit()
    [run] = rows(engine)
    assert (run.uid, run.kind, run.namespace, run.name, run.workload, run.queue) == (
        "uid-1", "Job", "team-a", "train-7k2p", "train", "research")
    assert run.created_at == datetime(2024, 5, 1, 9, 59, tzinfo=UTC)
    assert run.started_at == datetime(2024, 5, 1, 10, 1, tzinfo=UTC)
    assert run.finished_at == datetime(2024, 5, 1, 11, 0, tzinfo=UTC)
    assert (run.phase, run.reason, run.message, run.retry_count) == ("Failed", "PodFailed", "worker-1 OOMKilled", 2)
    assert (run.requested_cpu_cores, run.requested_memory_bytes, run.requested_gpus) == (8.0, 16 * 2**30, 4.0)
    assert run.updated_at == NOW + timedelta(minutes=2)
    assert not run.object_deleted


def test_a_cronjob_run_is_filed_under_the_cronjob(engine: Engine) -> None:
    cron_run = parse_job({**_raw_job("etl-2024-29000000"), "metadata": {
        **_raw_job("etl-2024-29000000")["metadata"],
        "ownerReferences": [{"kind": "CronJob", "name": "etl-2024", "uid": "cron-uid", "controller": True}]}})
    with Session(engine) as session:
        Ledger().on_job("ADDED", cron_run, session, NOW)
        session.commit()
    [run] = rows(engine)
    assert (run.name, run.workload) == ("etl-2024-29000000", "etl-2024")


def _raw_job(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": "uid-9", "resourceVersion": "1",
                         "creationTimestamp": "2024-05-01T09:59:00Z"},
            "spec": {"queue": "default", "tasks": []}, "status": {"state": {"phase": "Pending"}}}


def test_replay_after_restart_neither_duplicates_nor_resets(engine: Engine) -> None:
    events = [("ADDED", job("Running")), ("ADDED", job("Completed", uid="uid-2", name="etl-20240501")),
              ("MODIFIED", job("Completed"))]
    with Session(engine) as session:
        for event_type, obj in events:
            Ledger().on_job(event_type, obj, session, NOW)
        session.execute(update(JobRun).values(cpu_core_seconds_used=123.0, cpu_core_seconds_requested=456.0,
                                              gpu_seconds_used=7.0))
        session.commit()
    before = [(r.uid, r.phase, r.started_at, r.finished_at, r.cpu_core_seconds_used) for r in rows(engine)]
    restarted = Ledger()
    for _ in range(2):  # the informers relist everything: ADDED again, twice for good measure
        with Session(engine) as session:
            restarted.on_job("ADDED", job("Completed"), session, NOW + timedelta(hours=1))
            restarted.on_job("ADDED", job("Completed", uid="uid-2", name="etl-20240501"), session, NOW)
            session.commit()
    after = rows(engine)
    assert len(after) == 2
    assert [(r.uid, r.phase, r.started_at, r.finished_at, r.cpu_core_seconds_used) for r in after] == before
    assert (after[0].cpu_core_seconds_requested, after[0].gpu_seconds_used) == (456.0, 7.0)
    assert after[1].workload == "etl"


def test_deleted_job_keeps_its_row(engine: Engine) -> None:
    ledger = Ledger()
    with Session(engine) as session:
        ledger.on_job("ADDED", job("Completed"), session, NOW)
        ledger.on_job("DELETED", job("Completed"), session, NOW + timedelta(hours=2))
        ledger.on_job("ADDED", job("Running", uid="uid-3"), session, NOW)
        ledger.on_job("DELETED", job("Running", uid="uid-3"), session, NOW + timedelta(hours=3))  # killed running
        session.commit()
    done, killed = rows(engine)
    assert done.object_deleted and done.finished_at == datetime(2024, 5, 1, 11, 0, tzinfo=UTC)
    assert done.phase == "Completed" and done.deleted_at == NOW + timedelta(hours=2)
    # Deleted while Running (real Volcano: one DELETED event still showing Running): not a finish.
    assert killed.object_deleted and killed.finished_at is None and killed.phase == "Running"
    assert killed.deleted_at == NOW + timedelta(hours=3)


def test_kubeflow_run_from_its_podgroup(engine: Engine) -> None:
    ledger = Ledger()
    with Session(engine) as session:
        ledger.on_podgroup("ADDED", podgroup("Pending"), session, NOW)
        ledger.on_podgroup("MODIFIED", podgroup("Running"), session, NOW + timedelta(minutes=5))
        ledger.on_podgroup("ADDED", podgroup("Running"), session, NOW + timedelta(hours=1))  # replay
        ledger.on_podgroup("ADDED", podgroup("Running", owner_kind="Job", uid="vc"), session, NOW)  # Volcano's
        session.commit()
    [run] = rows(engine)
    assert (run.uid, run.kind, run.name, run.namespace, run.queue, run.workload) == (
        "pg-uid", "PyTorchJob", "bert-42", "team-b", "nlp", "bert")
    assert run.started_at == datetime(2024, 5, 1, 9, 5, tzinfo=UTC)
    assert run.finished_at is None and run.phase == "Running"
    assert (run.requested_cpu_cores, run.requested_gpus) == (8.0, 2.0)
    with Session(engine) as session:
        ledger.on_podgroup("DELETED", podgroup("Running"), session, NOW + timedelta(hours=2))
        ledger.on_podgroup("DELETED", podgroup("Running"), session, NOW + timedelta(hours=3))
        session.commit()
    [run] = rows(engine)
    assert run.object_deleted and run.finished_at is None and run.deleted_at == NOW + timedelta(hours=2)


def test_hostile_strings_fit_the_columns(engine: Engine) -> None:
    name = "ü" + "x" * 300
    with Session(engine) as session:
        Ledger().on_job("ADDED", job("Failed", name=name, reason="R" * 400, message="m\x00\n\x01" * 2000), session,
                        NOW)
        session.commit()
    [run] = rows(engine)
    assert run.name == name[:253] and len(run.reason) == 256 and run.message == "m\n\x01" * 2000


def test_mark_gone_and_efficiency(engine: Engine) -> None:
    ledger = Ledger()
    with Session(engine) as session:
        ledger.on_job("ADDED", job("Running"), session, NOW)
        ledger.on_job("ADDED", job("Running", uid="uid-2"), session, NOW)
        assert ledger.mark_gone(session, {"uid-2"}, NOW + timedelta(hours=1)) == 1
        session.execute(update(JobRun).where(JobRun.uid == "uid-2").values(
            cpu_core_seconds_used=30.0, cpu_core_seconds_requested=120.0, memory_byte_seconds_used=5.0,
            memory_byte_seconds_requested=10.0))
        session.commit()
    gone, live = rows(engine)
    assert gone.object_deleted and gone.finished_at is None and gone.deleted_at == NOW + timedelta(hours=1)
    assert not live.object_deleted and live.finished_at is None
    assert efficiency(live) == {"cpu": 0.25, "memory": 0.5, "gpu": None}


def test_retention(engine: Engine) -> None:
    ledger = Ledger()
    old, recent = NOW - timedelta(days=200), NOW - timedelta(days=1)
    with Session(engine) as session:
        for uid, finished in (("old", old), ("recent", recent), ("running", None)):
            session.add(JobRun(uid=uid, namespace="a", name=uid, workload=uid, finished_at=finished, updated_at=old))
        ledger.on_job("ADDED", job("Running", uid="deleted-unfinished"), session, old)
        session.flush()
        ledger.mark_gone(session, {"old", "recent", "running"}, old)  # deleted (unfinished) at `old`
        for days in (20, 13, 0):
            session.add(UsageRollup(bucket_start=NOW - timedelta(days=days), bucket_seconds=300, namespace="a",
                                    pod="p", container="c"))
        for state, resolved in (("resolved", NOW - timedelta(days=91)), ("resolved", recent), ("firing", None)):
            session.add(Alert(fingerprint=f"{state}{resolved}", kind="JobFailed", severity="warning", state=state,
                              details={}, started_at=old, resolved_at=resolved, last_seen_at=old, updated_at=old))
        session.commit()
        counts = enforce_retention(session, Retention(), NOW)
        session.commit()
        assert counts == {"usage_rollups": 1, "usage_rollups_hourly": 0, "job_runs": 2, "alerts": 1}
        assert sorted(session.scalars(select(JobRun.uid))) == ["recent", "running"]
        assert session.scalar(select(func.count()).select_from(UsageRollup)) == 2
        assert session.scalar(select(func.count()).select_from(Alert)) == 2
        assert not any(enforce_retention(session, Retention(), NOW).values())


def test_objects_without_uid_are_skipped(engine: Engine) -> None:
    bad_uid = ""
    ledger = Ledger()
    with Session(engine) as session:
        ledger.on_job("ADDED", job(uid=bad_uid), session, NOW)
        ledger.on_podgroup("ADDED", podgroup("Running", uid=bad_uid), session, NOW)
        session.commit()
    assert ledger.skipped == 2 and rows(engine) == []


def counted(phase: str, uid: str = "uid-1", **counts: int) -> Job:
    raw_job = job(phase, uid=uid)
    return replace(raw_job, **counts)


def test_pod_counts_survive_a_final_status_without_them(engine: Engine) -> None:
    """Real Volcano's last status of a finished Job drops succeeded/failed/taskStatusCount, and a
    Completing/Restarting status carries only `terminating`: the finished-pod counts stay."""
    ledger = Ledger()
    with Session(engine) as session:
        ledger.on_job("ADDED", counted("Running", running=3), session, NOW)
        ledger.on_job("MODIFIED", counted("Running", running=1, succeeded=2), session, NOW)
        ledger.on_job("MODIFIED", counted("Completing", terminating=1), session, NOW)
        ledger.on_job("MODIFIED", counted("Completed", succeeded=2, failed=1), session, NOW)
        ledger.on_job("MODIFIED", counted("Completed"), session, NOW)  # version bump, counts wiped
        ledger.on_job("DELETED", counted("Completed"), session, NOW)
        session.commit()
    [run] = rows(engine)
    assert (run.pods_pending, run.pods_running, run.pods_succeeded, run.pods_failed) == (0, 0, 2, 1)


def test_migration_0005_moves_deletion_times_out_of_finished_at(database_url: str) -> None:
    """Rows the old ledger finished at their deletion get deleted_at instead; real finishes stay."""
    from volcano_monitor.watchdog.state.db.engine import make_engine, migrate

    names = ("uid", "kind", "namespace", "name", "workload", "queue", "phase", "reason", "message", "retry_count",
             "requested_cpu_cores", "requested_memory_bytes", "requested_gpus", "cpu_core_seconds_requested",
             "cpu_core_seconds_used", "memory_byte_seconds_requested", "memory_byte_seconds_used",
             "gpu_seconds_requested", "gpu_seconds_used", "object_deleted", "updated_at", "finished_at")
    columns = JobRun.__table__.c  # type: ignore[attr-defined]
    old_job_runs = table("job_runs", *(column(name, columns[name].type) for name in names))  # as of 0004
    engine = make_engine(database_url)
    try:
        migrate(engine, "0004")
        old, killed = NOW - timedelta(hours=1), NOW
        with engine.begin() as connection:
            for uid, phase, finished in (("done", "Completed", old), ("killed", "Running", killed),
                                         ("live", "Running", None)):
                connection.execute(old_job_runs.insert().values(
                    uid=uid, kind="Job", namespace="a", name=uid, workload=uid, queue="", phase=phase, reason="",
                    message="", retry_count=0, requested_cpu_cores=0, requested_memory_bytes=0, requested_gpus=0,
                    cpu_core_seconds_requested=0, cpu_core_seconds_used=0, memory_byte_seconds_requested=0,
                    memory_byte_seconds_used=0, gpu_seconds_requested=0, gpu_seconds_used=0,
                    object_deleted=uid != "live", updated_at=NOW, finished_at=finished))
        migrate(engine, "0005")
        with Session(engine) as session:  # the columns of 0005 (later revisions add more)
            found = {r.uid: r for r in session.execute(fleet(select(  # fleet(): no cluster column yet
                JobRun.uid, JobRun.finished_at, JobRun.deleted_at, JobRun.pods_failed)))}
        assert (found["done"].finished_at, found["done"].deleted_at) == (old, NOW)
        assert (found["killed"].finished_at, found["killed"].deleted_at) == (None, killed)
        assert (found["live"].finished_at, found["live"].deleted_at, found["live"].pods_failed) == (None, None, 0)
    finally:
        engine.dispose()


def test_migration_0014_keeps_every_run_and_prices_them_from_zero(database_url: str) -> None:
    """Existing runs keep every column through 0014; their cost starts at 0 and their queue path empty, and
    the recorder's next flush adds to both seconds and cost."""
    from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
    from volcano_monitor.watchdog.state.rollup_sql import add_to_job_runs

    old_names = ("uid", "kind", "namespace", "name", "workload", "queue", "phase", "reason", "message",
                 "retry_count", "requested_cpu_cores", "requested_memory_bytes", "requested_gpus",
                 "cpu_core_seconds_requested", "cpu_core_seconds_used", "memory_byte_seconds_requested",
                 "memory_byte_seconds_used", "gpu_seconds_requested", "gpu_seconds_used", "object_deleted",
                 "updated_at", "started_at", "finished_at", "pods_succeeded")
    columns = JobRun.__table__.c  # type: ignore[attr-defined]
    old_job_runs = table("job_runs", *(column(name, columns[name].type) for name in old_names))  # as of 0013
    engine = make_engine(database_url)
    try:
        migrate(engine, "0013")
        with engine.begin() as connection:
            for i in range(3):
                connection.execute(old_job_runs.insert().values(
                    uid=f"u{i}", kind="Job", namespace="a", name=f"j{i}", workload="j", queue="q", phase="Completed",
                    reason="", message="m", retry_count=i, requested_cpu_cores=2, requested_memory_bytes=2**30,
                    requested_gpus=1, cpu_core_seconds_requested=100.0 + i, cpu_core_seconds_used=50,
                    memory_byte_seconds_requested=7, memory_byte_seconds_used=6, gpu_seconds_requested=9,
                    gpu_seconds_used=3, object_deleted=False, updated_at=NOW, started_at=NOW - timedelta(hours=1),
                    finished_at=NOW, pods_succeeded=4))
        migrate(engine)
        found = {r.uid: r for r in rows(engine)}
        assert sorted(found) == ["u0", "u1", "u2"]
        for i in range(3):
            run = found[f"u{i}"]
            assert (run.cpu_core_seconds_requested, run.gpu_seconds_used, run.retry_count, run.pods_succeeded,
                    run.message, run.finished_at) == (100.0 + i, 3, i, 4, "m", NOW)
            assert (run.cost_cpu_used, run.cost_cpu_requested, run.cost_gpu_requested, run.queue_path) == (0, 0, 0, "")
        with Session(engine) as session, session.begin():
            assert add_to_job_runs(session, {"u1": [1.0] * 6 + [0.5] * 6 + [0.0]}, NOW) == {"u1"}
        run = {r.uid: r for r in rows(engine)}["u1"]
        assert (run.cpu_core_seconds_requested, run.cost_cpu_requested, run.cost_gpu_used) == (102.0, 0.5, 0.5)
    finally:
        engine.dispose()


def _queue(name: str, parent: str | None) -> Queue:
    spec = {"weight": 1, **({"parent": parent} if parent else {})}
    return parse_queue({"metadata": {"name": name, "uid": f"q-{name}", "resourceVersion": "1"}, "spec": spec,
                        "status": {"state": "Open"}})


def test_runs_stored_before_their_queue_was_known_take_its_path_when_it_is(engine: Engine) -> None:
    """A Job listed before its Queue is stored under its bare queue name; once the queue (and a parent that
    comes later still) is known, open runs and such bare runs take the whole path, so a parent's budget and
    report count them. A finished run keeps the tree it finished in."""
    ledger, index = Ledger(), ClusterIndex()
    with Session(engine) as session, session.begin():
        ledger.on_job("ADDED", job("Running", uid="open"), session, NOW, index.queue_path("research"))
        ledger.on_job("ADDED", job("Completed", uid="bare"), session, NOW, index.queue_path("research"))
        ledger.on_job("ADDED", job("Completed", uid="kept"), session, NOW, "root/old/research")
    index.on_queue("ADDED", _queue("research", "ml"))  # its parent is not known yet
    with Session(engine) as session, session.begin():
        assert ledger.retag_queues(session, index.queue_paths_under("research")) == 2
    assert {r.uid: r.queue_path for r in rows(engine)} == {"open": "ml/research", "bare": "ml/research",
                                                           "kept": "root/old/research"}
    index.on_queue("ADDED", _queue("root", None))
    index.on_queue("ADDED", _queue("ml", "root"))
    assert index.queue_paths_under("ml") == {"ml": "root/ml", "research": "root/ml/research"}
    with Session(engine) as session, session.begin():
        assert ledger.retag_queues(session, index.queue_paths_under("ml")) == 1  # the finished run moved once
    assert {r.uid: r.queue_path for r in rows(engine)} == {"open": "root/ml/research", "bare": "ml/research",
                                                           "kept": "root/old/research"}
