"""Database reads and writes of the capability controller: the latest plan per queue, the audit trail
of changes, and the per-bucket usage a demand policy plans from.

Only the leader writes (one writer per cluster), so the plan upsert cannot race another replica's
except during a leadership hand-over, which the dialect's INSERT ... ON CONFLICT absorbs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from watchdog.capability.guardrails import QueuePlan
from watchdog.db.models import CapabilityChange as ChangeRow
from watchdog.db.models import CapabilityPlan as PlanRow
from watchdog.db.models import UsageRollup

APPLIED, DRY_RUN = "applied", "dry_run"


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
        index_elements=[PlanRow.queue], set_={k: v for k, v in values.items() if k != "queue"}))


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


def usage_buckets(session: Session, queue: str, since: datetime, until: datetime) -> list[dict[str, float]]:
    """The queue's usage per rollup bucket in [since, until]: CPU = sum of the containers' mean cores,
    memory = sum of their peak bytes (memory must fit peaks), GPUs = sum of utilisation x GPUs requested
    (GPUs requested where no utilisation was measured: a held GPU counts as used).

    A bucket in which other queues have rows but this one has none counts as zero use: the collector was
    running and the queue used nothing. A bucket without any row at all is no evidence and is left out."""
    r = UsageRollup
    window = (r.bucket_start >= since, r.bucket_start <= until)
    seen = [start for (start,) in session.execute(select(r.bucket_start).where(*window).distinct())]
    gpus = case((r.gpu_samples > 0, r.gpu_util_sum / r.gpu_samples / 100.0 * r.gpu_request), else_=r.gpu_request)
    rows = session.execute(
        select(r.bucket_start, func.sum(r.cpu_cores_sum / func.nullif(r.samples, 0)), func.sum(r.memory_bytes_max),
               func.sum(gpus))
        .where(*window, r.queue == queue).group_by(r.bucket_start))
    used = {start: {"cpu": float(cpu or 0.0), "memory": float(memory or 0.0), "gpu": float(gpu or 0.0)}
            for start, cpu, memory, gpu in rows}
    zero = {"cpu": 0.0, "memory": 0.0, "gpu": 0.0}
    return [used.get(start, zero) for start in sorted(seen)]
