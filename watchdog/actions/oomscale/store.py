"""Database reads and writes of OOM auto scale-up: the lineage rows (one per attempt, unique) and the
peak memory the usage collector saw of a run's container."""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.models import OomResubmission, UsageRollup

PENDING, APPLIED, DRY_RUN, CAPPED, EXHAUSTED, FAILED = "pending", "applied", "dry_run", "capped", "exhausted", "failed"
OUTCOMES = (APPLIED, DRY_RUN, CAPPED, EXHAUSTED, FAILED)


def find(session: Session, namespace: str, lineage_uid: str, attempt: int) -> OomResubmission | None:
    return session.scalars(select(OomResubmission).where(
        OomResubmission.namespace == namespace, OomResubmission.lineage_uid == lineage_uid,
        OomResubmission.attempt == attempt)).first()


def insert(session: Session, values: dict[str, Any], at: datetime) -> OomResubmission:
    """Flushes at once: a second writer of the same (namespace, lineage_uid, attempt) fails here."""
    row = OomResubmission(**values, created_at=at, updated_at=at)
    session.add(row)
    session.flush()
    return row


def peak_memory(session: Session, job_uid: str, task: str, container: str) -> float:
    """The highest working set recorded of the run's container (0: none recorded)."""
    found = session.execute(select(func.max(UsageRollup.memory_bytes_max)).where(
        UsageRollup.job_uid == job_uid, UsageRollup.task == task, UsageRollup.container == container)).scalar()
    return float(found or 0.0)


def history(session: Session, namespace: str | None, lineage: str | None, limit: int,
            offset: int, namespaces: Set[str] | None = None) -> tuple[int, list[OomResubmission]]:
    """Rows newest first (a lineage's: by attempt), and how many match; `namespaces`: only theirs (None: all)."""
    where: list[ColumnElement[bool]] = [OomResubmission.namespace.in_(namespaces)] if namespaces is not None else []
    if namespace:
        where.append(OomResubmission.namespace == namespace)
    if lineage:
        where.append(OomResubmission.lineage == lineage)
    total = session.execute(select(func.count()).select_from(OomResubmission).where(*where)).scalar_one()
    rows = session.scalars(select(OomResubmission).where(*where)
                           .order_by(OomResubmission.created_at.desc(), OomResubmission.id.desc())
                           .limit(limit).offset(offset))
    return total, list(rows)
