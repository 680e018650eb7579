"""One database, many clusters (watchdog.state.db.scope and migration 0015): rows older than the cluster
column take the migrating watchdog's name and none is lost; each engine writes and reads as its cluster;
unique keys are per cluster; `fleet()` reads across them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import column, func, insert, select, table, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import Alert, CapabilityPlan, CostRetired, JobRun, NotificationGroup
from volcano_monitor.watchdog.state.db.scope import cluster_of, fleet
from volcano_monitor.watchdog.state.fleet import ClusterNameRequired, beat, check_cluster_name, heartbeats

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


def _old_rows(url: str) -> None:
    """Rows as a watchdog before 0015 wrote them (no cluster column)."""
    engine = make_engine(url)
    migrate(engine, "0014")
    runs = table("job_runs", *(column(n) for n in (
        "uid", "kind", "namespace", "name", "workload", "queue", "phase", "reason", "message", "retry_count",
        "requested_cpu_cores", "requested_memory_bytes", "requested_gpus", "cpu_core_seconds_requested",
        "cpu_core_seconds_used", "memory_byte_seconds_requested", "memory_byte_seconds_used", "gpu_seconds_requested",
        "gpu_seconds_used", "object_deleted", "updated_at")))
    zeros = dict.fromkeys(("requested_cpu_cores", "requested_memory_bytes", "requested_gpus",
                           "cpu_core_seconds_requested", "cpu_core_seconds_used", "memory_byte_seconds_requested",
                           "memory_byte_seconds_used", "gpu_seconds_requested", "gpu_seconds_used"), 1.0)
    with engine.begin() as connection:
        for i in range(3):
            connection.execute(runs.insert().values(
                uid=f"u{i}", kind="Job", namespace="a", name=f"j{i}", workload="j", queue="q", phase="Running",
                reason="", message="", retry_count=0, object_deleted=False, updated_at=NOW, **zeros))
        connection.execute(table("cost_retired", column("queue"), column("requested"), column("used"),
                                 column("idle")).insert().values(queue="q", requested=5.0, used=2.0, idle=3.0))
        connection.execute(table("capability_plans", *(column(n) for n in (
            "queue", "policy", "mode", "outcome", "resources", "inputs", "identity", "planned_at"))).insert().values(
            queue="q", policy="share", mode="dry-run", outcome="dry_run", resources="{}", inputs="{}", identity="",
            planned_at=NOW))
    engine.dispose()


def test_old_rows_take_the_migrating_clusters_name(database_url: str) -> None:
    _old_rows(database_url)
    east = make_engine(database_url, cluster="east")
    try:
        migrate(east)
        with Session(east) as session:
            assert session.execute(select(JobRun.uid, JobRun.cluster).order_by(JobRun.uid)).all() == [
                ("u0", "east"), ("u1", "east"), ("u2", "east")]
            assert session.execute(select(CostRetired.cluster, CostRetired.queue, CostRetired.requested)).all() == [
                ("east", "q", 5.0)]
            assert session.scalars(select(CapabilityPlan.cluster)).all() == ["east"]
    finally:
        east.dispose()


def test_each_engine_writes_and_reads_as_its_cluster(engine: object, database_url: str) -> None:
    a, b = make_engine(database_url, cluster="a"), make_engine(database_url, cluster="b")
    try:
        for eng in (a, b):
            with Session(eng) as session, session.begin():  # the same UID in both: a simulator seeded alike
                session.add(JobRun(uid="same", namespace="n", name="j", workload="j", updated_at=NOW))
                session.execute(insert(NotificationGroup).values(
                    group_key="g", receiver="r", route="0", labels={}, created_at=NOW, updated_at=NOW))
        with Session(b) as session, session.begin():
            session.execute(update(JobRun).values(phase="Failed"))
        with Session(a) as session:
            assert session.execute(select(JobRun.cluster, JobRun.phase)).all() == [("a", "")]
            assert session.scalar(select(func.count()).select_from(NotificationGroup)) == 1
            rows = session.execute(fleet(select(JobRun.cluster, JobRun.phase).order_by(JobRun.cluster))).all()
            assert rows == [("a", ""), ("b", "Failed")]
            assert session.execute(fleet(select(JobRun.cluster), ["b"])).scalars().all() == ["b"]
        assert (cluster_of(a), cluster_of(b)) == ("a", "b")
        with pytest.raises(IntegrityError), Session(a) as session, session.begin():
            session.add(JobRun(uid="same", namespace="n", name="j2", workload="j", updated_at=NOW))
    finally:
        a.dispose()
        b.dispose()


def test_one_unresolved_alert_per_fingerprint_and_cluster(database_url: str, engine: object) -> None:
    a, b = make_engine(database_url, cluster="a"), make_engine(database_url, cluster="b")
    row = {"fingerprint": "f", "kind": "JobFailed", "severity": "critical", "state": "firing", "details": {},
           "started_at": NOW, "last_seen_at": NOW, "updated_at": NOW}
    try:
        for eng in (a, b):
            with Session(eng) as session, session.begin():
                session.add(Alert(**row))
        with pytest.raises(IntegrityError), Session(a) as session, session.begin():
            session.add(Alert(**row))
    finally:
        a.dispose()
        b.dispose()


def test_a_defaulted_name_is_refused_in_a_database_other_clusters_share(engine: object, database_url: str) -> None:
    shared = make_engine(database_url, cluster="west")
    try:
        with Session(shared) as session, session.begin():
            beat(session, "east", "pod-1", NOW)
            beat(session, "east", "pod-2", NOW.replace(minute=1))
        with Session(shared) as session:
            assert [(h.cluster, h.identity, h.started_at, h.seen_at) for h in heartbeats(session)] == [
                ("east", "pod-2", NOW, NOW.replace(minute=1))]
            check_cluster_name(session, "west", explicit=True)
            check_cluster_name(session, "east", explicit=False)  # its own heartbeat: the same cluster again
            with pytest.raises(ClusterNameRequired, match=r"holds clusters east; set cluster\.name"):
                check_cluster_name(session, "west", explicit=False)
    finally:
        shared.dispose()
