"""Retention at scale (watchdog.runtime.retention): chunked deletes equal `enforce_retention`'s, downsampling keeps
every total the readers compute, the demand policy stays conservative, migration 0008 on a database with
data, and the readers' indexes. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, func, inspect, select, text
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.capability.policy import percentile
from volcano_monitor.watchdog.actions.capability.store import usage_buckets
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.detectors.waste import WasteDetector
from volcano_monitor.watchdog.runtime import retention
from volcano_monitor.watchdog.runtime.retention import downsample_cutoff, run_retention
from volcano_monitor.watchdog.runtime.settings import Retention
from volcano_monitor.watchdog.state.db.engine import alembic_config, make_engine, migrate
from volcano_monitor.watchdog.state.db.models import Alert, JobRun, UsageRollup, UsageRollupHourly
from volcano_monitor.watchdog.state.ledger import enforce_retention

NOW = datetime(2024, 5, 20, 12, 7, tzinfo=UTC)
BUCKET = 300


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "SQLITE_PAUSE", 0.0)


def settings(**retention_: Any) -> Settings:
    return Settings(retention=Retention(**{"chunk_rows": 100, **retention_}))


def usage(i: int, c: int) -> dict[str, float]:
    """Deterministic, uneven usage of container `c` in bucket `i` (so hours are not flat)."""
    wobble = ((i * 7 + c * 13) % 11) / 10
    return {"cpu": 0.5 + wobble * (1 + c), "memory": 1e9 * (1 + wobble), "gpu_util": 10.0 * wobble}


def add_rollups(session: Session, hours: float, containers: int = 4, end: datetime = NOW,
                skip: frozenset[int] = frozenset()) -> None:
    """`containers` containers of two jobs in two queues, one 5-minute row each per bucket for `hours`,
    bucket indexes in `skip` missing (the collector was down)."""
    last = int(end.timestamp()) // BUCKET * BUCKET
    for i in range(int(hours * 3600 / BUCKET)):
        if i in skip:
            continue
        start = datetime.fromtimestamp(last - i * BUCKET, UTC)
        for c in range(containers):
            u, samples = usage(i, c), 10 - (i + c) % 3
            gpus = 1.0 if c % 2 else 0.0
            session.add(UsageRollup(
                bucket_start=start, bucket_seconds=BUCKET, namespace="ml", pod=f"p{c}", container="main",
                job_uid=f"job{c % 2}", workload=f"w{c % 2}", task="worker", queue=f"q{c % 2}", samples=samples,
                cpu_cores_sum=u["cpu"] * samples, cpu_cores_max=u["cpu"] * 1.5, memory_bytes_sum=u["memory"] * samples,
                memory_bytes_max=u["memory"] * 1.2, gpu_samples=samples if gpus else 0,
                gpu_util_sum=u["gpu_util"] * samples if gpus else 0.0, gpu_util_max=u["gpu_util"] if gpus else 0.0,
                cpu_request_cores=2.0 + (i % 2), memory_request_bytes=4e9, gpu_request=gpus))


def totals(session: Session) -> dict[str, dict[str, float]]:
    """Per job, over both resolutions: the sums and maxima JobIdle, OverRequested-style efficiency and the
    API compute (used core-seconds = sum of cores over samples x the sample interval)."""
    out: dict[str, dict[str, float]] = {}
    for model in (UsageRollup, UsageRollupHourly):
        m: Any = model
        for row in session.execute(select(
                m.job_uid, func.sum(m.samples), func.sum(m.cpu_cores_sum), func.sum(m.cpu_request_cores * m.samples),
                func.sum(m.memory_bytes_sum), func.sum(m.memory_request_bytes * m.samples), func.sum(m.gpu_samples),
                func.sum(m.gpu_util_sum), func.max(m.cpu_cores_max), func.max(m.memory_bytes_max),
                func.max(m.gpu_util_max), func.max(m.gpu_request)).group_by(m.job_uid)):
            have = out.setdefault(row[0], {})
            for name, value, how in zip(("samples", "cpu", "cpu_req", "mem", "mem_req", "gpu_samples", "gpu",
                                         "cpu_max", "mem_max", "gpu_max", "gpu_request"), row[1:],
                                        "+++++++mmmm", strict=True):
                value = float(value or 0)
                have[name] = have.get(name, 0.0) + value if how == "+" else max(have.get(name, 0.0), value)
    return out


def count(session: Session, model: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_downsampling_keeps_every_total_and_moves_whole_hours(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        add_rollups(session, hours=40, skip=frozenset({300, 301, 302}))
    with Session(engine) as session:
        before, rows_before = totals(session), count(session, UsageRollup)
    counts = run_retention(engine, settings(downsample_after_hours=24), NOW)
    cutoff = downsample_cutoff(settings(downsample_after_hours=24), NOW)
    assert cutoff is not None and cutoff.minute == 0 and cutoff <= NOW - timedelta(hours=24)
    with Session(engine) as session:
        after = totals(session)
        assert session.scalar(select(func.min(UsageRollup.bucket_start))) == cutoff  # whole hours moved
        newest_hour = session.scalar(select(func.max(UsageRollupHourly.bucket_start)))
        assert newest_hour is not None and newest_hour < cutoff
        assert count(session, UsageRollup) + counts["usage_rollups_downsampled"] == rows_before
        hourly = count(session, UsageRollupHourly)
        assert hourly * 10 < counts["usage_rollups_downsampled"]
        assert set(session.scalars(select(UsageRollupHourly.bucket_seconds))) == {3600}
        assert sum(session.scalars(select(UsageRollupHourly.buckets))) == counts["usage_rollups_downsampled"]
    assert counts["chunks"] > 5  # chunks of 100 rows, so many hours were split between chunks
    assert after.keys() == before.keys()
    for uid in before:
        assert after[uid] == pytest.approx(before[uid], rel=1e-9), uid
    # A second pass has nothing to move; a late 5-minute row of a moved hour merges into its hourly row.
    assert run_retention(engine, settings(downsample_after_hours=24), NOW)["usage_rollups_downsampled"] == 0
    late = NOW - timedelta(hours=30)
    with Session(engine) as session, session.begin():
        session.add(UsageRollup(bucket_start=late.replace(minute=35, second=0), bucket_seconds=BUCKET, namespace="ml",
                                pod="p0", container="main", job_uid="job0", queue="q0", samples=10,
                                cpu_cores_sum=1000.0, cpu_cores_max=100.0, memory_bytes_sum=0.0, memory_bytes_max=0.0,
                                cpu_request_cores=2.0, memory_request_bytes=4e9))
    assert run_retention(engine, settings(downsample_after_hours=24), NOW)["usage_rollups_downsampled"] == 1
    with Session(engine) as session:
        assert count(session, UsageRollupHourly) == hourly
        final = totals(session)
    assert final["job0"]["cpu"] == pytest.approx(after["job0"]["cpu"] + 1000.0)
    assert final["job0"]["samples"] == after["job0"]["samples"] + 10
    assert final["job0"]["cpu_max"] == 100.0


def test_downsampling_keeps_the_job_idle_window_at_full_resolution(engine: Engine) -> None:
    """However small downsample_after_hours is, JobIdle's window (and an hour) stays at 5 minutes."""
    configured = Settings(retention=Retention(downsample_after_hours=0.1))
    configured.detectors.idle_window_seconds = 7200
    cutoff = downsample_cutoff(configured, NOW)
    assert cutoff is not None and cutoff <= NOW - timedelta(hours=3)
    assert downsample_cutoff(settings(downsample_after_hours=0), NOW) is None
    with Session(engine) as session, session.begin():
        add_rollups(session, hours=2)
    with Session(engine) as session:
        before = {(s.details["job_uid"], s.details["resource"]) for s in WasteDetector(configured.detectors).check(
            session, NOW)}
    run_retention(engine, configured, NOW)
    with Session(engine) as session:
        assert count(session, UsageRollupHourly) == 0
        assert {(s.details["job_uid"], s.details["resource"]) for s in WasteDetector(configured.detectors).check(
            session, NOW)} == before


def test_demand_percentiles_after_downsampling_are_conservative(engine: Engine) -> None:
    """Exact percentiles from 5-minute rows; after downsampling the same percentiles are never below them
    and equal those of the documented bound (each bucket at its hour's per-container peak)."""
    with Session(engine) as session, session.begin():
        add_rollups(session, hours=72, end=NOW.replace(minute=55) - timedelta(hours=1))  # whole hours
    since, until = NOW - timedelta(days=7), NOW
    with Session(engine) as session:
        exact = {q: usage_buckets(session, q, since, until) for q in ("q0", "q1")}
        rows = session.execute(select(UsageRollup)).scalars().all()
        bound: dict[str, dict[datetime, dict[str, dict[str, float]]]] = {}  # queue -> hour -> pod -> peak
        cutoff = downsample_cutoff(settings(), NOW)
        assert cutoff is not None
        for r in rows:
            if r.bucket_start >= cutoff:
                continue
            hour = r.bucket_start.replace(minute=0)
            pods = bound.setdefault(r.queue, {}).setdefault(hour, {})
            peak = pods.setdefault(r.pod, {"cpu": 0.0, "memory": 0.0, "gpu": 0.0})
            gpus = r.gpu_util_sum / r.gpu_samples / 100 * r.gpu_request if r.gpu_samples else r.gpu_request
            peak["cpu"] = max(peak["cpu"], r.cpu_cores_sum / r.samples)
            peak["memory"] = max(peak["memory"], r.memory_bytes_max)
            peak["gpu"] = max(peak["gpu"], gpus)
    run_retention(engine, settings(), NOW)
    with Session(engine) as session:
        assert count(session, UsageRollupHourly) > 0
        coarse = {q: usage_buckets(session, q, since, until) for q in ("q0", "q1")}
    for q in ("q0", "q1"):
        assert len(coarse[q]) == len(exact[q])  # an hour counts as its twelve buckets
        fine_part = exact[q][len(exact[q]) - len(coarse[q]) + 12 * len(bound[q]):]
        model = [{k: sum(p[k] for p in pods.values()) for k in ("cpu", "memory", "gpu")}
                 for _, pods in sorted(bound[q].items()) for _ in range(12)] + fine_part
        for kind in ("cpu", "memory", "gpu"):
            for p in (0.5, 0.9, 0.95, 1.0):
                got = percentile([b[kind] for b in coarse[q]], p)
                assert got >= percentile([b[kind] for b in exact[q]], p) - 1e-6, (q, kind, p)
                assert got == pytest.approx(percentile([b[kind] for b in model], p)), (q, kind, p)


def _retention_data(session: Session) -> None:
    old = NOW - timedelta(days=200)
    add_rollups(session, hours=16 * 24, containers=2)  # 2 x 4608 rows, about 2 days past usage_days
    for i in range(300):
        finished = NOW - timedelta(days=170 + i % 20)  # about half older than jobs_days
        deleted = i % 3 == 0
        session.add(JobRun(uid=f"run{i}", namespace="a", name=f"r{i}", workload="r", updated_at=old,
                           finished_at=None if deleted else finished, object_deleted=deleted,
                           deleted_at=finished if deleted and i % 2 else None))
    for i in range(300):
        resolved = NOW - timedelta(days=80 + i % 20)
        session.add(Alert(fingerprint=f"f{i}", kind="JobFailed", severity="warning",
                          state="resolved" if i % 4 else "firing", details={}, started_at=old,
                          resolved_at=resolved if i % 4 else None, last_seen_at=old, updated_at=old))


def _ids(session: Session) -> dict[str, set[int]]:
    return {model.__tablename__: set(session.scalars(select(model.id)))
            for model in (UsageRollup, UsageRollupHourly, JobRun, Alert)}


def test_chunked_retention_deletes_exactly_what_enforce_retention_did(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        _retention_data(session)
    with Session(engine) as session:
        before = _ids(session)
        expected = enforce_retention(session, Retention(), NOW)
        kept = _ids(session)
        session.rollback()
        assert _ids(session) == before
    assert expected["usage_rollups"] > 300 and expected["job_runs"] > 100 and expected["alerts"] > 100
    counts = run_retention(engine, settings(downsample_after_hours=0), NOW)
    with Session(engine) as session:
        assert _ids(session) == kept
    assert {k: counts[k] for k in expected} == expected
    assert counts["chunks"] >= 10 and counts["stopped"] == 0


def test_retention_stops_between_chunks_and_resumes(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        _retention_data(session)
    stop = threading.Event()
    stop.set()
    first = run_retention(engine, settings(), NOW, stop)
    assert first["stopped"] == 1 and first["chunks"] == 1 and first["usage_rollups"] == 100
    rest = run_retention(engine, settings(), NOW)
    assert rest["stopped"] == 0 and rest["usage_rollups"] > 0 and rest["usage_rollups_downsampled"] > 0


@pytest.fixture
def old_schema(database_url: str) -> Iterator[Engine]:
    """A database at the revision before 0008, with rollups in it."""
    engine = make_engine(database_url)
    before = ScriptDirectory.from_config(alembic_config(engine)).get_revision("0008").down_revision
    assert isinstance(before, str)
    migrate(engine, before)
    yield engine
    engine.dispose()


def test_migration_0008_upgrades_a_database_with_data(old_schema: Engine) -> None:
    with old_schema.begin() as connection:
        for i in range(50):
            connection.execute(text(
                "INSERT INTO usage_rollups (bucket_start, bucket_seconds, namespace, pod, container, job_uid, "
                "workload, task, queue, samples, cpu_cores_sum, cpu_cores_max, memory_bytes_sum, memory_bytes_max, "
                "gpu_samples, gpu_util_sum, gpu_util_max, cpu_request_cores, memory_request_bytes, gpu_request) "
                "VALUES (:start, 300, 'ml', :pod, 'main', 'job', 'w', 't', 'q', 10, 5.0, 1.0, 1e10, 2e9, 0, 0, 0, "
                "2.0, 4e9, 0)").bindparams(start=NOW - timedelta(days=2, minutes=5 * i), pod=f"p{i % 3}"))
    migrate(old_schema)
    names = {ix["name"] for ix in inspect(old_schema).get_indexes("usage_rollups")}
    assert "ix_usage_rollups_queue_bucket" in names and "ix_usage_rollups_workload" not in names
    assert "ix_usage_rollups_hourly_queue_bucket" in {
        ix["name"] for ix in inspect(old_schema).get_indexes("usage_rollups_hourly")}
    with Session(old_schema) as session:
        assert count(session, UsageRollup) == 50
        assert session.scalar(select(func.sum(UsageRollup.cpu_cores_sum))) == 250.0
    counts = run_retention(old_schema, settings(), NOW)
    assert counts["usage_rollups_downsampled"] == 50
    with Session(old_schema) as session:
        assert session.scalar(select(func.sum(UsageRollupHourly.cpu_cores_sum))) == pytest.approx(250.0)
        assert session.scalar(select(func.sum(UsageRollupHourly.samples))) == 500


def _plan(engine: Engine, sql: str, params: dict[str, Any]) -> str:
    """The query plan as text; PostgreSQL told to avoid sequential scans (tables this small would
    otherwise always be scanned whole: the question is whether the index fits the query)."""
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql("SET enable_seqscan = off")
            lines = [str(line) for line in connection.execute(text(f"EXPLAIN {sql}"), params).scalars()]
        else:
            lines = [str(row[-1]) for row in connection.execute(text(f"EXPLAIN QUERY PLAN {sql}"), params)]
        return "\n".join(lines)


def test_readers_use_the_indexes(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        add_rollups(session, hours=2)
    since = (NOW - timedelta(days=7)).isoformat(sep=" ")
    demand = ("SELECT bucket_start, sum(cpu_cores_sum) FROM usage_rollups WHERE queue = :q AND bucket_start >= :s "
              "GROUP BY bucket_start")
    assert "ix_usage_rollups_queue_bucket" in _plan(engine, demand, {"q": "q0", "s": since})
    hourly = demand.replace("usage_rollups", "usage_rollups_hourly")
    assert "ix_usage_rollups_hourly_queue_bucket" in _plan(engine, hourly, {"q": "q0", "s": since})
    window = ("SELECT job_uid, sum(samples) FROM usage_rollups WHERE cluster = :c AND bucket_start >= :s "
              "GROUP BY bucket_start, job_uid")  # every reader's statement is scoped to its cluster
    plan = _plan(engine, window, {"s": since, "c": "default"})  # JobIdle's window, the API's latest bucket, retention
    unique = "sqlite_autoindex_usage_rollups_1 (cluster=? AND bucket_start>?)" if engine.dialect.name == "sqlite" else (
        "uq_usage_rollups_bucket_container")  # SQLite names a unique constraint's index itself
    assert unique in plan
