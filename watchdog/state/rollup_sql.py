"""How the usage recorder's deltas reach the database: the rollup upsert and the ledger increment as
driver-level SQL, built once per dialect (sums add, maxima take the greater, attribution takes the latest).

Why its own module: the recorder (watchdog.state.rollups) decides *what* a flush writes and keeps it safe
across rollbacks; this module is only *how* a batch becomes one statement per table, which is what the
benchmarks (bench/watchdog_usage.py) tune.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Dialect, Table, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.models import JobRun, UsageRollup
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.samples import PodInfo

ROLLUPS = cast(Table, UsageRollup.__table__)
JOB_RUNS = cast(Table, JobRun.__table__)

_CHUNK = 500

# Rollup delta: [samples, cpu_sum, cpu_max, mem_sum, mem_max, gpu_samples, gpu_sum, gpu_max, PodInfo]
Rollup = list[Any]
RollupKey = tuple[int, str, str, str]  # bucket start (epoch s), namespace, pod, container
# Job delta: [cpu used, cpu requested, memory used, memory requested, gpu used, gpu requested, the same six
# priced (watchdog.state.prices), first seen]
JOB_COLUMNS = ("cpu_core_seconds_used", "cpu_core_seconds_requested", "memory_byte_seconds_used",
               "memory_byte_seconds_requested", "gpu_seconds_used", "gpu_seconds_requested",
               "cost_cpu_used", "cost_cpu_requested", "cost_memory_used", "cost_memory_requested",
               "cost_gpu_used", "cost_gpu_requested")


def as_array(column: Iterable[Any]) -> list[Any]:
    """A column as one PostgreSQL array parameter: psycopg cannot send a list mixing int and float
    (0 and 0.5 in one column), so a numeric column holding any float is sent as floats."""
    values = list(column)
    if any(type(v) is float for v in values) and all(type(v) in (int, float) for v in values):
        return [float(v) for v in values]
    return values


def _text(value: str, limit: int) -> str:
    """Fit a column: PostgreSQL refuses NUL characters in text."""
    return value.replace("\x00", "")[:limit]


@dataclass(frozen=True, slots=True)
class _Statements:
    """Driver-level SQL for one dialect. Why not SQLAlchemy Core executemany: it spends ~30 us per
    row building parameters, more than the database takes to upsert the row."""

    columnar: bool  # parameters as one tuple of arrays (PostgreSQL) rather than a list of row tuples
    upsert_rollups: str
    update_jobs: str
    time: Callable[[datetime], Any]  # a datetime as the driver should receive it (the column type's binding)


_STATEMENTS: dict[str, _Statements] = {}
_ROLLUP_KEY = ("cluster", "bucket_start", "namespace", "pod", "container")
_ROLLUP_COLUMNS = ("cluster", "bucket_start", "bucket_seconds", "namespace", "pod", "container", "job_uid", "workload",
                   "task", "queue", "samples", "cpu_cores_sum", "cpu_cores_max", "memory_bytes_sum", "memory_bytes_max",
                   "gpu_samples", "gpu_util_sum", "gpu_util_max", "cpu_request_cores", "memory_request_bytes",
                   "gpu_request")
_ADDED = ("samples", "cpu_cores_sum", "memory_bytes_sum", "gpu_samples", "gpu_util_sum")
_MAXED = ("cpu_cores_max", "memory_bytes_max", "gpu_util_max")
_PG_ARRAY_TYPES = {"bucket_start": "timestamptz", "bucket_seconds": "int4", "samples": "int4", "gpu_samples": "int4",
                   **dict.fromkeys(("cluster", "namespace", "pod", "container", "job_uid", "workload", "task", "queue"),
                                   "text")}
_PG_ARRAY_TYPES.update({c: "float8" for c in _ROLLUP_COLUMNS if c not in _PG_ARRAY_TYPES})
_LATEST = ("job_uid", "workload", "task", "queue", "cpu_request_cores", "memory_request_bytes", "gpu_request")


def statements(dialect: Dialect) -> _Statements:
    """The upsert (merge on the unique key: sums add, maxima take the greater, attribution takes the
    latest) and the ledger increment, built once per dialect. SQLite: one row per executemany item.
    PostgreSQL: the whole batch as one statement over unnest()ed arrays (one round trip; psycopg's
    executemany costs a server round trip per row)."""
    cached = _STATEMENTS.get(dialect.name)
    if cached is not None:
        return cached
    table, jobs = ROLLUPS.name, JOB_RUNS.name
    postgres = dialect.name == "postgresql"
    assignments = ", ".join([f"{c} = {table}.{c} + excluded.{c}" for c in _ADDED]
                            + [f"{c} = {'GREATEST' if postgres else 'max'}({table}.{c}, excluded.{c})" for c in _MAXED]
                            + [f"{c} = excluded.{c}" for c in _LATEST])
    conflict = f"ON CONFLICT ({', '.join(_ROLLUP_KEY)}) DO UPDATE SET {assignments}"
    columns = ", ".join(_ROLLUP_COLUMNS)
    if postgres:
        arrays = ", ".join(f"%s::{_PG_ARRAY_TYPES[c]}[]" for c in _ROLLUP_COLUMNS)
        upsert = f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays}) {conflict}"
        increments = ", ".join(f"{c} = {jobs}.{c} + d.{c}" for c in JOB_COLUMNS)
        update_jobs = (f"UPDATE {jobs} SET {increments}, updated_at = %s FROM unnest(%s::text[], "
                       f"{', '.join(['%s::float8[]'] * len(JOB_COLUMNS))}) AS d(uid, {', '.join(JOB_COLUMNS)}) "
                       f"WHERE {jobs}.cluster = %s AND {jobs}.uid = d.uid RETURNING {jobs}.uid")
    else:
        upsert = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['?'] * len(_ROLLUP_COLUMNS))}) {conflict}"
        increments = ", ".join(f"{c} = {c} + ?" for c in JOB_COLUMNS)
        update_jobs = f"UPDATE {jobs} SET {increments}, updated_at = ? WHERE cluster = ? AND uid = ?"
    bind = ROLLUPS.c.bucket_start.type.dialect_impl(dialect).bind_processor(dialect)
    built = _Statements(postgres, upsert, update_jobs, bind if bind is not None else (lambda value: value))
    _STATEMENTS[dialect.name] = built
    return built


def write_rollups(session: Session, rollups: dict[RollupKey, Rollup], bucket_seconds: int) -> int:
    """Merge rollup deltas into usage_rollups (in the caller's transaction); the rows written."""
    if not rollups:
        return 0
    connection = session.connection()
    sql = statements(connection.dialect)
    to_db = sql.time
    cluster = cluster_of(connection)
    starts: dict[int, Any] = {}
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    for (bucket, namespace, pod, container), r in rollups.items():
        start = starts.get(bucket)
        if start is None:
            start = starts[bucket] = to_db(datetime.fromtimestamp(bucket, UTC))
        info: PodInfo = r[8]
        append((cluster, start, bucket_seconds, namespace, pod, container, _text(info.job_uid, 64),
                _text(info.workload, 253), _text(info.task, 253), _text(info.queue, 253), r[0], r[1], r[2],
                r[3], r[4], r[5], r[6], r[7], info.cpu_request_cores, info.memory_request_bytes, info.gpus))
    if sql.columnar:
        connection.exec_driver_sql(sql.upsert_rollups, tuple(as_array(column) for column in zip(*rows, strict=True)))
    else:
        connection.exec_driver_sql(sql.upsert_rollups, rows)
    return len(rows)


def add_to_job_runs(session: Session, jobs: dict[str, list[float]], now: datetime) -> set[str]:
    """Add job deltas to their ledger rows (in the caller's transaction); the uids that have a row.
    PostgreSQL: one UPDATE over arrays, RETURNING the uids it found. SQLite: an executemany UPDATE; only
    when it updated fewer rows than it had deltas, a SELECT tells which uids have no row yet."""
    connection = session.connection()
    sql = statements(connection.dialect)
    when = sql.time(now)
    cluster = cluster_of(connection)
    uids = list(jobs)
    existing: set[str] = set()
    if sql.columnar:
        deltas = list(jobs.values())
        columns = (as_array([d[i] for d in deltas]) for i in range(len(JOB_COLUMNS)))
        existing.update(connection.exec_driver_sql(sql.update_jobs, (when, uids, *columns, cluster)).scalars())
    else:
        rows = [(*d[:len(JOB_COLUMNS)], when, cluster, uid) for uid, d in jobs.items()]
        updated = connection.exec_driver_sql(sql.update_jobs, rows).rowcount  # summed over the rows
        if updated == len(uids):
            existing.update(uids)  # the usual case: every run has its row
        else:
            for i in range(0, len(uids), _CHUNK):
                chunk = uids[i:i + _CHUNK]
                existing.update(session.scalars(select(JOB_RUNS.c.uid).where(
                    JOB_RUNS.c.cluster == cluster, JOB_RUNS.c.uid.in_(chunk))))
    return existing
