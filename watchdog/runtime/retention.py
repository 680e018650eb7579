"""Retention at scale: expired rows deleted, and old 5-minute usage rollups merged into hourly rows,
in chunks of `retention.chunk_rows`, each chunk its own short transaction, on a thread of its own.

Why not in the writer's transaction: at 100k containers the 5-minute rollups reach ~29M rows a day;
one retention statement then deletes a million rows and holds the writer (SQLite: the database's only
write lock) for as long as that takes. Here each chunk holds it for a few milliseconds, and between
chunks the thread pauses at least as long as the chunk took (and on SQLite at least `SQLITE_PAUSE`,
longer than SQLite's busy-wait poll of 100 ms, so a writer waiting for the lock gets it rather than
this thread taking it back at once). The writer's batches are delayed by one chunk at most.

Why downsample: the readers of old rollups need few numbers per hour. Sums and sample counts add and
maxima take the greater, so JobIdle's and the API's sample-weighted figures (core-sums, samples,
request x samples) stay exact; requests become sample-weighted means (request x samples exact). The
demand policy plans from each 5-minute bucket's usage (sum over containers of mean cores, peak bytes,
GPUs in use), which an hour's sums cannot give back; the hourly row keeps each container's highest
bucket figure (`cpu_cores_mean_max`, `gpus_used_max`; memory's peak is `memory_bytes_max`), and the
demand policy counts an hour as its 5-minute buckets each at that upper bound (watchdog.actions.capability.store).
Recommendations keep what they need in their histograms and never read rollups.

How a chunk moves: it takes the oldest `chunk_rows` 5-minute rows before the cutoff (an hour
boundary, so whole hours move), inserts them grouped per container and hour into
`usage_rollups_hourly`, merging into a row already there (ON CONFLICT: sums add, maxima take the
greater), and deletes them, in one transaction. A chunk may end inside an hour: the next chunk merges
the rest into the same hourly row, and so does a late 5-minute row written after its hour moved (a
flush held back by a database outage), so nothing is counted twice or lost. PostgreSQL does it in
one statement (DELETE ... RETURNING feeding the INSERT, rows picked by ctid); SQLite in two that pick
the same rows (the same ordered subquery inside the transaction that holds the write lock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Engine, Table, bindparam, delete, select, text
from sqlalchemy.sql.elements import ColumnElement

from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.state.db.models import UsageRollup, UsageRollupHourly, UTCDateTime
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.ledger import JOB_RUNS, expired
from volcano_monitor.watchdog.state.prices import delete_runs

log = logging.getLogger(__name__)

HOUR = 3600
SQLITE_PAUSE = 0.15  # seconds between chunks on SQLite: more than its busy handler's longest sleep (100 ms)
ROLLUPS = cast(Table, UsageRollup.__table__)
HOURLY = cast(Table, UsageRollupHourly.__table__)
_KEY = ("cluster", "bucket_start", "namespace", "pod", "container")
_ATTRIBUTION = ("job_uid", "workload", "task", "queue")
_ADDED = ("samples", "cpu_cores_sum", "memory_bytes_sum", "gpu_samples", "gpu_util_sum", "buckets")
_MAXED = ("cpu_cores_max", "memory_bytes_max", "gpu_util_max", "gpu_request", "cpu_cores_mean_max", "gpus_used_max")
_WEIGHTED = ("cpu_request_cores", "memory_request_bytes")  # sample-weighted means
_COLUMNS = (*_KEY[:2], "bucket_seconds", *_KEY[2:], *_ATTRIBUTION, *_ADDED, *_MAXED, *_WEIGHTED)


def _aggregates(hour: str, postgres: bool) -> dict[str, str]:
    """SELECT expressions of one hourly row from the 5-minute rows grouped by container and hour."""
    gpus_used = "CASE WHEN gpu_samples > 0 THEN gpu_util_sum / gpu_samples / 100.0 * gpu_request ELSE gpu_request END"
    out = {"cluster": "cluster", "bucket_start": hour, "bucket_seconds": str(HOUR), "namespace": "namespace",
           "pod": "pod", "container": "container", "buckets": "count(*)",
           "cpu_cores_mean_max": "coalesce(max(cpu_cores_sum / nullif(samples, 0)), 0.0)",
           "gpus_used_max": f"max({gpus_used})"}
    out.update({c: f"max({c})" for c in _ATTRIBUTION})
    out.update({c: f"sum({c})" for c in _ADDED if c != "buckets"})
    out.update({c: f"max({c})" for c in _MAXED if c not in out})
    out.update({c: f"coalesce(sum({c} * samples) / nullif(sum(samples), 0), max({c}))" for c in _WEIGHTED})
    if postgres:  # integer sums are bigint (numeric for sum(bigint)): the columns are integer
        out.update({c: f"{out[c]}::int" for c in ("samples", "gpu_samples", "buckets")})
    return out


def _merge(postgres: bool) -> str:
    """ON CONFLICT ... DO UPDATE: an hourly row already there absorbs the new part of its hour."""
    t, greatest = HOURLY.name, "GREATEST" if postgres else "max"
    sets = [f"{c} = excluded.{c}" for c in _ATTRIBUTION]
    sets += [f"{c} = {t}.{c} + excluded.{c}" for c in _ADDED]
    sets += [f"{c} = {greatest}({t}.{c}, excluded.{c})" for c in _MAXED]
    sets += [f"{c} = CASE WHEN {t}.samples + excluded.samples > 0 THEN ({t}.{c} * {t}.samples + excluded.{c} * "
             f"excluded.samples) / ({t}.samples + excluded.samples) ELSE {greatest}({t}.{c}, excluded.{c}) END"
             for c in _WEIGHTED]
    return f"ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET {', '.join(sets)}"


def _downsample_statements(postgres: bool) -> list[str]:
    """The statements of one downsampling chunk; the last one's result tells how many rows moved."""
    src, dst = ROLLUPS.name, HOURLY.name
    pick = (f"SELECT {{id}} FROM {src} WHERE cluster = :cluster AND bucket_start < :cutoff "
            f"ORDER BY {', '.join(_KEY)} LIMIT :n")
    columns = ", ".join(_COLUMNS)
    if postgres:
        hour = f"to_timestamp(floor(extract(epoch FROM bucket_start) / {HOUR}) * {HOUR})"
        agg = _aggregates(hour, True)
        select_ = ", ".join(agg[c] for c in _COLUMNS)
        return [f"WITH moved AS (DELETE FROM {src} WHERE ctid = ANY(ARRAY({pick.format(id='ctid')})) RETURNING *), "
                f"merged AS (INSERT INTO {dst} ({columns}) SELECT {select_} FROM moved "
                f"GROUP BY cluster, 2, namespace, pod, container {_merge(True)} RETURNING 1) "
                "SELECT count(*) FROM moved"]
    # SQLAlchemy stores an aware datetime on SQLite as 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC): cut to the hour.
    hour = "substr(bucket_start, 1, 13) || ':00:00.000000'"
    agg = _aggregates(hour, False)
    select_ = ", ".join(agg[c] for c in _COLUMNS)
    chunk = f"id IN ({pick.format(id='id')})"
    return [f"INSERT INTO {dst} ({columns}) SELECT {select_} FROM {src} WHERE {chunk} "
            f"GROUP BY cluster, 2, namespace, pod, container {_merge(False)}",
            f"DELETE FROM {src} WHERE {chunk}"]


def _delete_statement(table: Table, where: ColumnElement[bool], cutoff: datetime, cluster: str, postgres: bool
                      ) -> tuple[Any, dict[str, Any]]:
    """Delete at most :n rows matching `where` (and the parameters it needs besides :n). Usage tables
    on PostgreSQL: by ctid (no primary-key lookups), picked in bucket order through the unique index;
    `where` is then their `bucket_start < cutoff`."""
    if postgres and table.name in (ROLLUPS.name, HOURLY.name):
        pick = (f"SELECT ctid FROM {table.name} WHERE cluster = :cluster AND bucket_start < :cutoff "
                "ORDER BY cluster, bucket_start LIMIT :n")
        statement = text(f"DELETE FROM {table.name} WHERE ctid = ANY(ARRAY({pick}))").bindparams(
            bindparam("cutoff", type_=UTCDateTime()))
        return statement, {"cutoff": cutoff, "cluster": cluster}
    ids = select(table.c.id).where(where).limit(bindparam("n")).scalar_subquery()
    return delete(table).where(table.c.id.in_(ids)), {}


def downsample_cutoff(settings: Settings, now: datetime) -> datetime | None:
    """5-minute rows starting before this move to the hourly table (an hour boundary, so whole hours
    move); None when downsampling is off. At least the JobIdle window plus an hour stays at 5 minutes
    whatever is configured: JobIdle (and the API's latest bucket) read only the 5-minute table."""
    hours = settings.retention.downsample_after_hours
    if hours <= 0:
        return None
    age = max(hours * HOUR, settings.detectors.idle_window_seconds + HOUR)
    edge = (now.timestamp() - age) // HOUR * HOUR
    return datetime.fromtimestamp(edge, UTC)


class _Chunks:
    """Runs chunks, one transaction each, pausing between them (see the module docstring)."""

    def __init__(self, engine: Engine, rows: int, stop: threading.Event | None, pace: bool) -> None:
        self.engine, self.rows, self.stop, self.pace = engine, rows, stop, pace
        self.postgres = engine.dialect.name == "postgresql"
        self.min_pause = 0.0 if self.postgres else SQLITE_PAUSE
        self.chunks = 0
        self.stopped = False

    def run(self, chunk: Callable[[Any], int]) -> int:
        """Call `chunk(connection)` (returns rows done) until it does fewer than a chunk's rows."""
        total = 0
        while not self.stopped:
            started = time.monotonic()
            with self.engine.begin() as connection:
                done = chunk(connection)
            self.chunks += 1
            total += done
            if done < self.rows:
                break
            pause = max(self.min_pause, time.monotonic() - started) if self.pace else 0.0
            if self.stop is not None and self.stop.wait(pause):
                self.stopped = True
            elif self.stop is None and pause:
                time.sleep(pause)
        return total


def run_retention(engine: Engine, settings: Settings, now: datetime,
                  stop: threading.Event | None = None, *, pace: bool = True) -> dict[str, int]:
    """One retention pass over every time-ordered table the writer does not own in memory: expired
    5-minute rollups deleted, older ones downsampled into hourly rows, expired hourly rows, ledger rows
    and resolved alerts deleted, `settings.retention.chunk_rows` rows per transaction. Returns rows per
    table (`usage_rollups_downsampled`: 5-minute rows merged into hourly ones), `chunks`, and `stopped`
    (1 when `stop` was set: the pass ends after the chunk in flight; the next pass resumes). Deletes the
    same rows as `watchdog.state.ledger.enforce_retention` (both use `watchdog.state.ledger.expired`). Call it on a
    thread of its own, never inside the writer's transaction. `pace=False`: no pause between chunks
    (nothing else writes: a migration, a bench building history)."""
    chunks = _Chunks(engine, settings.retention.chunk_rows, stop, pace)
    params: dict[str, Any] = {"n": settings.retention.chunk_rows}
    usage_cutoff = now - timedelta(days=settings.retention.usage_days)
    cluster = cluster_of(engine)
    conditions = expired(settings.retention, now, cluster)
    counts: dict[str, int] = {}

    def deleting(name: str) -> Callable[[Any], int]:
        table, where = conditions[name]
        statement, extra = _delete_statement(table, where, usage_cutoff, cluster, chunks.postgres)
        bound = {**params, **extra}

        def chunk(connection: Any) -> int:
            return max(cast(CursorResult[Any], connection.execute(statement, bound)).rowcount, 0)

        return chunk

    counts["usage_rollups"] = chunks.run(deleting("usage_rollups"))  # expired before it was downsampled
    cutoff = downsample_cutoff(settings, now)
    counts["usage_rollups_downsampled"] = 0
    if cutoff is not None and not chunks.stopped:
        statements = [text(s).bindparams(bindparam("cutoff", type_=UTCDateTime()))
                      for s in _downsample_statements(chunks.postgres)]
        moving = {**params, "cutoff": cutoff, "cluster": cluster}

        def downsample(connection: Any) -> int:
            result: Any = None
            for statement in statements:
                result = connection.execute(statement, moving)
            return int(result.scalar_one()) if chunks.postgres else max(result.rowcount, 0)

        counts["usage_rollups_downsampled"] = chunks.run(downsample)
    def retiring(connection: Any) -> int:
        """Ledger rows: their cost moves into cost_retired in the chunk that deletes them (the counters on
        /metrics never go down)."""
        ids = list(connection.execute(select(JOB_RUNS.c.id).where(conditions["job_runs"][1])
                                      .limit(settings.retention.chunk_rows)).scalars())
        return delete_runs(connection, ids, settings.costs) if ids else 0

    for name in ("usage_rollups_hourly", "job_runs", "alerts"):
        counts[name] = 0 if chunks.stopped else chunks.run(retiring if name == "job_runs" else deleting(name))
    counts["chunks"], counts["stopped"] = chunks.chunks, int(chunks.stopped)
    if any(counts[name] for name in conditions) or counts["usage_rollups_downsampled"]:
        log.info("retention: %s", ", ".join(f"{n} {name}" for name, n in counts.items()))
    return counts
