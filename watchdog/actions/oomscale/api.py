"""`GET /api/v1/oom-resubmissions`: OOM auto scale-up's lineage and audit trail, from the database (the
same on every replica), and the chat notice and /metrics family of its decisions.

Many clusters, one database (docs/fleet.md): each decision names its cluster; the list holds every cluster's
(those with a heartbeat, and this watchdog's) unless `?cluster=` narrows it, each cluster's page read through
an engine scoped to it and merged newest first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from volcano_monitor.core.exposition import COUNTER, Family
from volcano_monitor.core.kube.reviews import Scope, every_namespace
from volcano_monitor.watchdog.actions.notify.api import InClusters
from volcano_monitor.watchdog.actions.notify.message import AlertItem, rfc3339
from volcano_monitor.watchdog.actions.notify.outbox import NOTICE_LABEL, Outbox
from volcano_monitor.watchdog.actions.oomscale import store
from volcano_monitor.watchdog.actions.oomscale.controller import Decision, Notify, describe
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.db.scope import scoped as scoped_engine
from volcano_monitor.watchdog.state.fleet import heartbeats
from volcano_monitor.watchdog.state.signals import fingerprint

OOM_RESUBMISSIONS = Family("volcano_watchdog_oom_resubmissions_total",
                           "OOM auto scale-up decisions by outcome: applied (Job created), dry_run (recorded only), "
                           "capped (no room to grow), exhausted (max_attempts reached), failed (create refused).",
                           ("namespace", "outcome"), COUNTER)


NOTICE_KIND = "OOMScaleUp"


class ResubmissionOut(BaseModel):
    id: int
    cluster: str
    namespace: str
    lineage: str
    lineage_uid: str
    attempt: int
    source_name: str
    source_uid: str
    new_name: str
    queue: str
    mode: str
    outcome: str
    containers: dict[str, Any]
    message: str
    identity: str
    created_at: datetime
    updated_at: datetime


class ResubmissionPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ResubmissionOut]


Name = Annotated[str | None, Query(max_length=253, pattern=r"^[^\x00/]+$")]


def oom_router(engine: Engine, scope: Callable[..., Scope] = every_namespace) -> APIRouter:
    """`scope`: the namespaces the caller may see (auth.mode kubernetes): only their decisions."""
    router = APIRouter(tags=["oom-scale-up"])
    scoped = Depends(scope)

    @router.get("/api/v1/oom-resubmissions", response_model=ResubmissionPage)
    def oom_resubmissions(clusters: InClusters, allowed: Scope = scoped,
                          namespace: Name = None, lineage: Name = None,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 50,
                          offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> ResubmissionPage:
        """OOM auto scale-up decisions, newest first: per attempt of a lineage (`lineage`: the first
        run's Job name) the Job OOM-killed, the one submitted (or that would be, in dry-run), the memory
        before and after per container, and the outcome."""
        with Session(engine) as session:
            names = clusters if clusters is not None else sorted(
                {h.cluster for h in heartbeats(session)} | {cluster_of(engine)})
        total, found = 0, []
        for name in names:
            with Session(scoped_engine(engine, name)) as session:
                count, rows = store.history(session, namespace, lineage, limit + offset, 0, allowed)
                total += count
                found += [ResubmissionOut.model_validate(row, from_attributes=True) for row in rows]
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return ResubmissionPage(total=total, limit=limit, offset=offset, items=found[offset:offset + limit])

    return router


def outbox_notice(outbox: Outbox) -> Notify:
    """The chat notice of a decision, queued in the transaction that records it: one per decision."""

    def notify(session: Session, decision: Decision) -> None:
        if not outbox.enabled:
            return
        fine = decision.outcome in ("applied", "dry_run")
        reasons = tuple(f"{name}: {c.get('why', '')}" for name, c in sorted(decision.containers.items()))
        item = AlertItem(kind=NOTICE_KIND, severity="info" if fine else "warning",
                         status="firing", summary=describe(decision), namespace=decision.namespace,
                         queue=decision.queue, job_name=decision.job, subject=decision.new_name, reasons=reasons,
                         started_at=rfc3339(decision.at),
                         fingerprint=fingerprint(NOTICE_KIND, decision.namespace, decision.lineage,
                                                 str(decision.attempt)),
                         labels={NOTICE_LABEL: "true", "mode": decision.mode, "outcome": decision.outcome})
        outbox.enqueue(session, item, decision.at)

    return notify


def render_oom_metrics(counts: Callable[[], Counter[tuple[str, str]]]) -> str:
    lines = [OOM_RESUBMISSIONS.line(key, value) for key, value in sorted(counts().items())]
    return OOM_RESUBMISSIONS.header + "".join(lines)
