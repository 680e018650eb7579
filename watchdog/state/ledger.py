"""The job ledger: one `job_runs` row per run of a job, kept after the Job object is gone, and the
retention of every time-ordered table.

Why one upsert per event (INSERT ... ON CONFLICT (uid) DO UPDATE): after a restart the informers
relist everything and replay ADDED for every object; the same event applied twice must give the same
row, and two writers racing (replicas sharing PostgreSQL) must not create two. The upsert only ever
sets what the object says (names, queue, times, phase, requests); the resource-seconds that the
usage recorder accumulates are never part of it, so no event can reset them.

Which runs: a Volcano Job is keyed by its UID. Jobs of other operators on Volcano (Kubeflow
PyTorchJob/TFJob/MPIJob, Spark) are only visible through the PodGroup they create, so such a run is
keyed by the PodGroup's UID with kind and name of the group's owner (the same UID the usage
recorder attributes their pods to). A PodGroup owned by a Volcano Job is that Job's run: skipped.

Times: `started_at` is the Job's start as `core.model` reads it (the first Running condition of
the current run), `finished_at` its terminal condition's time. A deletion is not a finish: a Job
deleted while Running (real Volcano sends one DELETED event still showing Running, no Terminated
phase) keeps `finished_at` NULL and gets `object_deleted` and `deleted_at`; so does a run found gone
after a restart (`mark_gone`). Whatever reads "when did the run end" uses `ended_at()`.

Pod counts: `pods_pending`/`pods_running` mirror the latest status (a terminal job runs nothing).
Volcano's final status of a finished Job drops `succeeded`/`failed`/`taskStatusCount` (and
Restarting/Completing statuses carry only `terminating`), so `pods_succeeded`/`pods_failed` change
only on a status that reports finished pods: the last such status of the run stays.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, cast

from sqlalchemy import CursorResult, Table, and_, bindparam, delete, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from volcano_monitor.core.gpushare import group_gpus, physical_gpus
from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.model import Job, PodGroup, res_get
from volcano_monitor.watchdog.runtime.settings import Retention
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import Alert, JobRun, UsageRollup, UsageRollupHourly
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.prices import delete_runs
from volcano_monitor.watchdog.state.workload import workload_name

log = logging.getLogger(__name__)

JOB_RUNS = cast(Table, JobRun.__table__)
ROLLUPS = cast(Table, UsageRollup.__table__)
HOURLY = cast(Table, UsageRollupHourly.__table__)
ALERTS = cast(Table, Alert.__table__)
_CHUNK = 500
VOLCANO_JOB_KIND = "Job"
# Columns the ledger owns; the *_seconds_* integrals belong to the usage recorder.
_METADATA = ("kind", "namespace", "name", "workload", "queue", "created_at", "phase", "reason", "message",
             "retry_count", "requested_cpu_cores", "requested_memory_bytes", "requested_gpus", "pods_pending",
             "pods_running", "updated_at", "queue_path")
_FINISHED_PODS = ("pods_succeeded", "pods_failed")


def ended_at() -> Any:
    """When a run ended, as an SQL expression: its finish, else its deletion (NULL: still on)."""
    return func.coalesce(JobRun.finished_at, JobRun.deleted_at)


def run_seconds(dialect: str) -> Any:
    """How long a run ran (its end minus its start), in seconds, as an SQL expression of `dialect`: NULL
    while it runs or when it never started. SQLite keeps times as text, which julianday() reads."""
    end = ended_at()
    if dialect == "sqlite":
        return (func.julianday(end) - func.julianday(JobRun.started_at)) * 86400.0
    return func.extract("epoch", end - JobRun.started_at)


def _time(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def efficiency(run: JobRun) -> dict[str, float | None]:
    """Used / requested resource-seconds per resource (None when nothing was requested)."""

    def ratio(used: float, requested: float) -> float | None:
        return used / requested if requested > 0 else None

    return {
        "cpu": ratio(run.cpu_core_seconds_used, run.cpu_core_seconds_requested),
        "memory": ratio(run.memory_byte_seconds_used, run.memory_byte_seconds_requested),
        "gpu": ratio(run.gpu_seconds_used, run.gpu_seconds_requested),
    }


@cache
def _upsert_statement(dialect: str, keep_times: bool, deleted: bool, finished_pods: bool) -> Any:
    """INSERT ... ON CONFLICT (uid) DO UPDATE of the ledger's own columns, built once per variant
    (building one costs milliseconds; a relist replays thousands of jobs)."""
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(JOB_RUNS)
    ex, c = insert.excluded, JOB_RUNS.c
    started = bindparam("p_started", type_=c.started_at.type)
    finished = bindparam("p_finished", type_=c.finished_at.type)
    set_: dict[str, Any] = {name: ex[name] for name in _METADATA}
    if finished_pods:
        set_.update({name: ex[name] for name in _FINISHED_PODS})
    if keep_times:
        set_["started_at"] = func.coalesce(c.started_at, started)
        set_["finished_at"] = func.coalesce(c.finished_at, finished)
    else:
        set_["started_at"] = started
        set_["finished_at"] = finished
    if deleted:
        set_["object_deleted"] = True
        set_["deleted_at"] = func.coalesce(c.deleted_at, bindparam("p_now", type_=c.deleted_at.type))
    return insert.on_conflict_do_update(index_elements=[c.cluster, c.uid], set_=set_)


class Ledger:
    def __init__(self) -> None:
        self.skipped = 0  # events of objects without a UID (malformed)
        self.upserts = 0

    def on_job(self, event_type: str, job: Job, session: Session, now: datetime, queue_path: str = "") -> None:
        """Record a Volcano Job's state; on DELETED the row stays, marked object_deleted. `queue_path`: the
        queue and its ancestors as the cluster index knows them (`ClusterIndex.queue_path`)."""
        if not job.uid:
            self.skipped += 1
            log.warning("job %s/%s without a uid: not recorded in the ledger", job.namespace, job.name)
            return
        self._upsert(session, {
            "uid": job.uid, "kind": VOLCANO_JOB_KIND, "namespace": job.namespace, "name": job.name,
            "workload": workload_name(job.name, owner_kind=job.owner_kind, owner_name=job.owner_name),
            "queue": job.queue, "queue_path": queue_path or job.queue,
            "created_at": _time(job.creation_timestamp), "started_at": _time(job.start_time),
            "finished_at": _time(job.finish_time), "phase": job.phase, "reason": job.reason,
            "message": job.message, "retry_count": job.retry_count,
            "requested_cpu_cores": res_get(job.requests, "cpu"),
            "requested_memory_bytes": res_get(job.requests, "memory"),
            "requested_gpus": physical_gpus(job.requests),
            "pods_pending": job.pending, "pods_running": job.running, "pods_succeeded": job.succeeded,
            "pods_failed": job.failed,
        }, now, deleted=event_type == DELETED, keep_times=False)

    def on_podgroup(self, event_type: str, group: PodGroup, session: Session, now: datetime,
                    queue_path: str = "") -> None:
        """Record a run of a non-Volcano job (Kubeflow, Spark, ...) from the PodGroup it created."""
        if group.owner_kind == VOLCANO_JOB_KIND:
            return  # a Volcano Job's group: on_job records that run
        if not group.uid:
            self.skipped += 1
            log.warning("podgroup %s/%s without a uid: not recorded in the ledger", group.namespace, group.name)
            return
        started: datetime | None = None
        if group.phase in ("Running", "Completed"):
            scheduled = [c.last_transition_time for c in group.conditions
                         if c.type == "Scheduled" and c.status == "True" and c.last_transition_time is not None]
            started = _time(max(scheduled)) if scheduled else now
        name = group.owner_name or group.name
        self._upsert(session, {
            "uid": group.uid, "kind": group.owner_kind or "PodGroup", "namespace": group.namespace, "name": name,
            "workload": workload_name(name), "queue": group.queue, "queue_path": queue_path or group.queue,
            "created_at": _time(group.creation_timestamp), "started_at": started,
            "finished_at": now if group.phase == "Completed" else None, "phase": group.phase,
            "reason": "", "message": "", "retry_count": 0,
            "requested_cpu_cores": res_get(group.min_resources, "cpu"),
            "requested_memory_bytes": res_get(group.min_resources, "memory"),
            "requested_gpus": group_gpus(group.min_resources),
            "pods_pending": 0, "pods_running": group.running, "pods_succeeded": group.succeeded,
            "pods_failed": group.failed,
        }, now, deleted=event_type == DELETED, keep_times=True)

    def _upsert(self, session: Session, values: dict[str, Any], now: datetime, *, deleted: bool,
                keep_times: bool) -> None:
        """Insert or update by uid. `keep_times`: a start/finish already recorded wins (a PodGroup
        says only "running now", not since when); else the object's own times are mirrored.
        Deleted: marked deleted at `now` (the first time only); the finish stays what the object says."""
        for key, limit in (("uid", 64), ("kind", 64), ("namespace", 253), ("name", 253), ("workload", 253),
                           ("queue", 253), ("phase", 32), ("reason", 256), ("message", 100_000),
                           ("queue_path", 100_000)):
            values[key] = values[key].replace("\x00", "")[:limit]  # PostgreSQL refuses NUL in text
        values.update(updated_at=now, object_deleted=deleted, deleted_at=now if deleted else None,
                      p_started=values["started_at"], p_finished=values["finished_at"], p_now=now)
        finished_pods = values["pods_succeeded"] > 0 or values["pods_failed"] > 0
        statement = _upsert_statement(session.get_bind().dialect.name, keep_times, deleted, finished_pods)
        session.execute(statement, values)
        self.upserts += 1

    def retag_queues(self, session: Session, paths: Mapping[str, str]) -> int:
        """A queue appeared or moved in the tree: its runs take the path the index knows now, where that is
        the truth to keep. Open runs (billed to the tree they run under) and runs stored before their queue's
        ancestors were known (a Job listed before its Queue: the path is the bare name) are retagged; a
        finished run keeps the tree it finished in. Returns the rows changed."""
        c, changed, cluster = JOB_RUNS.c, 0, cluster_of(session)
        for queue, path in paths.items():
            open_run = and_(c.finished_at.is_(None), c.object_deleted.is_(False))
            result = session.execute(update(JOB_RUNS).where(
                c.cluster == cluster, c.queue == queue, c.queue_path != path, or_(open_run, c.queue_path == queue)
            ).values(queue_path=path))
            changed += cast(CursorResult[Any], result).rowcount
        return changed

    def mark_gone(self, session: Session, live_uids: Collection[str], now: datetime) -> int:
        """After the informers' first full sync: rows of runs whose object no longer exists (deleted
        while the watchdog was down, so no DELETED event came) are marked deleted now; their finish
        stays what the object last said (NULL for a run that never finished)."""
        c, cluster = JOB_RUNS.c, cluster_of(session)
        live = set(live_uids)
        candidates = list(session.scalars(select(c.uid).where(c.cluster == cluster, c.object_deleted.is_(False))))
        gone = [uid for uid in candidates if uid not in live]
        for i in range(0, len(gone), _CHUNK):
            session.execute(
                update(JOB_RUNS).where(c.cluster == cluster, c.uid.in_(gone[i:i + _CHUNK])).values(
                    object_deleted=True, updated_at=now,
                    deleted_at=func.coalesce(c.deleted_at, literal(now, type_=c.deleted_at.type)),
                )
            )
        return len(gone)


def deleted_rows(session: Session, statement: Any) -> int:
    """Run a DELETE and say how many rows it removed."""
    result = cast(CursorResult[Any], session.execute(statement))
    return max(result.rowcount, 0)


def expired(settings: Retention, now: datetime, cluster: str) -> dict[str, tuple[Table, ColumnElement[bool]]]:
    """What retention removes of `cluster`'s rows (never another cluster's), per table: usage rollups
    (both resolutions) by bucket start, ledger rows by finish (a run deleted unfinished counts from its
    deletion, else its last update), resolved alerts by resolution. Shared by `enforce_retention` and the
    chunked `watchdog.runtime.retention`, so the two cannot disagree on what is old."""
    usage_cutoff = now - timedelta(days=settings.usage_days)
    jobs_cutoff = now - timedelta(days=settings.jobs_days)
    alerts_cutoff = now - timedelta(days=settings.alerts_days)
    return {
        "usage_rollups": (ROLLUPS, and_(ROLLUPS.c.cluster == cluster, ROLLUPS.c.bucket_start < usage_cutoff)),
        "usage_rollups_hourly": (HOURLY, and_(HOURLY.c.cluster == cluster, HOURLY.c.bucket_start < usage_cutoff)),
        "job_runs": (JOB_RUNS, and_(JobRun.cluster == cluster, or_(
            JobRun.finished_at < jobs_cutoff,
            and_(JobRun.finished_at.is_(None), JobRun.object_deleted.is_(True),
                 func.coalesce(JobRun.deleted_at, JobRun.updated_at) < jobs_cutoff),
        ))),
        # a held alert (resolved by hand, cause still there) is kept: it is what stops a new episode
        "alerts": (ALERTS, and_(Alert.cluster == cluster, Alert.state == "resolved", Alert.resolved_at < alerts_cutoff,
                                Alert.held.is_(False))),
    }


def enforce_retention(session: Session, settings: Retention, now: datetime,
                      costs: Costs | None = None) -> dict[str, int]:
    """Delete everything `expired` in the caller's transaction, one statement per table (the cost of the
    ledger rows it removes moves into `cost_retired` first, at `costs`' prices). Fine for
    small databases and tests; at scale (millions of rollups a day) use `watchdog.runtime.retention.run_retention`
    on a thread of its own, which removes the same rows in short chunks (and downsamples)."""
    counts = {name: delete_runs(session, where, costs or Costs()) if table is JOB_RUNS
              else deleted_rows(session, delete(table).where(where))
              for name, (table, where) in expired(settings, now, cluster_of(session)).items()}
    if any(counts.values()):
        log.info("retention removed %s", ", ".join(f"{n} {table}" for table, n in counts.items()))
    return counts
