"""Database reads and writes of the capability controller: the latest plan per queue, the audit trail
of changes, and the per-bucket usage a demand policy plans from.

Only the leader writes (one writer per cluster), so the plan upsert cannot race another replica's
except during a leadership hand-over, which the dialect's INSERT ... ON CONFLICT absorbs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, case, func, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.capability.guardrails import QueuePlan
from volcano_monitor.watchdog.state.db.models import CapabilityChange as ChangeRow
from volcano_monitor.watchdog.state.db.models import CapabilityPlan as PlanRow
from volcano_monitor.watchdog.state.db.models import UsageRollup, UsageRollupHourly, UTCDateTime
from volcano_monitor.watchdog.state.db.scope import cluster_of

APPLIED, DRY_RUN = "applied", "dry_run"
HOURLY_SECONDS = 3600  # the downsampled rows' bucket (watchdog.runtime.retention.HOUR)
DEFAULT_BUCKET_SECONDS = 300  # the recorder's bucket, when no 5-minute row tells


@dataclass(frozen=True)
class CapabilityChange:
    """One change of a Queue's capability, applied (`outcome` "applied") or planned in dry-run mode
    ("dry_run"): what the audit trail stores and what `announce` receives."""

    queue: str
    policy: str
    mode: str
    outcome: str
    before: dict[str, float | None]  # resource -> amount before (None: unset); only the resources changed
    after: dict[str, float]
    why: dict[str, str]
    at: datetime
    inputs: dict[str, Any] = field(default_factory=dict)
    resource_version: str = ""
    identity: str = ""
    id: int | None = None


def plan_document(plan: QueuePlan) -> dict[str, Any]:
    return {resource: p.as_dict() for resource, p in sorted(plan.resources.items())}


def save_plan(session: Session, plan: QueuePlan, mode: str, outcome: str, identity: str, at: datetime) -> None:
    values = {"queue": plan.queue, "policy": plan.policy, "mode": mode, "outcome": outcome,
              "resources": plan_document(plan), "inputs": plan.inputs, "identity": identity, "planned_at": at}
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    statement = insert(PlanRow).values(**values)
    session.execute(statement.on_conflict_do_update(
        index_elements=[PlanRow.cluster, PlanRow.queue], set_={k: v for k, v in values.items() if k != "queue"}))


def record_change(session: Session, change: CapabilityChange) -> int:
    row = ChangeRow(queue=change.queue, policy=change.policy, mode=change.mode, outcome=change.outcome,
                    before=change.before, after=change.after, why=change.why, inputs=change.inputs,
                    resource_version=change.resource_version, identity=change.identity, created_at=change.at)
    session.add(row)
    session.flush()
    return row.id


def change_of(row: ChangeRow) -> CapabilityChange:
    return CapabilityChange(queue=row.queue, policy=row.policy, mode=row.mode, outcome=row.outcome,
                            before=dict(row.before), after=dict(row.after), why=dict(row.why), at=row.created_at,
                            inputs=dict(row.inputs), resource_version=row.resource_version, identity=row.identity,
                            id=row.id)


def last_change(session: Session, queue: str, outcome: str) -> ChangeRow | None:
    return session.scalars(select(ChangeRow).where(ChangeRow.queue == queue, ChangeRow.outcome == outcome)
                           .order_by(ChangeRow.created_at.desc(), ChangeRow.id.desc()).limit(1)).first()


def last_applied_at(session: Session, queue: str) -> datetime | None:
    """When the queue's capability was last changed by any replica: the cooldown survives restarts and
    leadership hand-overs."""
    return session.execute(select(func.max(ChangeRow.created_at))
                           .where(ChangeRow.queue == queue, ChangeRow.outcome == APPLIED)).scalar()


def get_plan(session: Session, queue: str) -> PlanRow | None:
    return session.scalars(select(PlanRow).where(PlanRow.queue == queue)).first()


def history(session: Session, queue: str, limit: int, offset: int) -> tuple[int, list[ChangeRow]]:
    """The queue's changes, newest first, and how many there are."""
    total = session.execute(select(func.count()).select_from(ChangeRow).where(ChangeRow.queue == queue)).scalar_one()
    rows = session.scalars(select(ChangeRow).where(ChangeRow.queue == queue)
                           .order_by(ChangeRow.created_at.desc(), ChangeRow.id.desc()).limit(limit).offset(offset))
    return total, list(rows)


def _seen(session: Session, table: Table, since: datetime, until: datetime) -> list[datetime]:
    """The distinct bucket starts of the session's cluster's rows of `table` in [since, until], by a loose
    index scan (one index seek per bucket through the unique index that leads with cluster, bucket_start):
    a plain SELECT DISTINCT would read every row of the window, millions at scale. Text SQL is not scoped
    by the session (watchdog.state.db.scope), so it names the cluster: another cluster's buckets would
    otherwise count as buckets in which this queue used nothing."""
    t = table.name
    statement = text(
        f"WITH RECURSIVE seen(t) AS (SELECT (SELECT min(bucket_start) FROM {t} WHERE cluster = :cluster "
        f"AND bucket_start >= :since AND bucket_start <= :until) UNION ALL SELECT (SELECT min(bucket_start) "
        f"FROM {t} WHERE cluster = :cluster AND bucket_start > seen.t AND bucket_start <= :until) FROM seen "
        "WHERE seen.t IS NOT NULL) SELECT t FROM seen WHERE t IS NOT NULL"
    ).bindparams(bindparam("since", type_=UTCDateTime()), bindparam("until", type_=UTCDateTime())
                 ).columns(t=UTCDateTime())
    bound = {"since": since, "until": until, "cluster": cluster_of(session)}
    return list(session.execute(statement, bound).scalars())


def _per_bucket(session: Session, columns: Any, queue: str, since: datetime, until: datetime,
                cpu: Any, memory: Any, gpu: Any) -> dict[datetime, dict[str, float]]:
    """One queue's usage per bucket start (through the (queue, bucket_start) index)."""
    rows = session.execute(
        select(columns.bucket_start, func.sum(cpu), func.sum(memory), func.sum(gpu))
        .where(columns.queue == queue, columns.bucket_start >= since, columns.bucket_start <= until)
        .group_by(columns.bucket_start))
    return {start: {"cpu": float(c or 0.0), "memory": float(m or 0.0), "gpu": float(g or 0.0)}
            for start, c, m, g in rows}


def usage_buckets(session: Session, queue: str, since: datetime, until: datetime) -> list[dict[str, float]]:
    """The queue's usage per 5-minute rollup bucket in [since, until], oldest first: CPU = sum of the
    containers' mean cores, memory = sum of their peak bytes (memory must fit peaks), GPUs = sum of
    utilisation x GPUs requested (GPUs requested where no utilisation was measured: a held GPU counts as
    used).

    A bucket in which other queues have rows but this one has none counts as zero use: the collector was
    running and the queue used nothing. A bucket without any row at all is no evidence and is left out.

    Hours already downsampled (watchdog.runtime.retention) count as their 5-minute buckets, each at the hour's
    upper bound: per container its highest bucket mean of cores (GPUs in use) and its peak bytes. So a
    percentile over downsampled history is never below the exact one (when the collector ran the whole
    hour) and above it by at most the spread of the queue's usage within an hour. While a retention
    pass moves an hour, part of it may count twice for a moment."""
    r, h = UsageRollup, UsageRollupHourly
    gpus = case((r.gpu_samples > 0, r.gpu_util_sum / r.gpu_samples / 100.0 * r.gpu_request), else_=r.gpu_request)
    fine = _per_bucket(session, r, queue, since, until, r.cpu_cores_sum / func.nullif(r.samples, 0),
                       r.memory_bytes_max, gpus)
    coarse = _per_bucket(session, h, queue, since, until, h.cpu_cores_mean_max, h.memory_bytes_max, h.gpus_used_max)
    zero = {"cpu": 0.0, "memory": 0.0, "gpu": 0.0}
    out: list[dict[str, float]] = []
    hours = _seen(session, cast(Table, h.__table__), since, until)
    if hours:
        base = session.execute(select(r.bucket_seconds).order_by(r.bucket_start.desc()).limit(1)).scalar()
        per_hour = max(1, round(HOURLY_SECONDS / (base or DEFAULT_BUCKET_SECONDS)))
        for start in hours:
            out.extend([coarse.get(start, zero)] * per_hour)
    out.extend(fine.get(start, zero) for start in _seen(session, cast(Table, r.__table__), since, until))
    return out
