"""`GET /api/v1/queues/{name}/capability`: a queue's current capability plan and its change history.

The plan is this replica's latest (every replica plans), else the one the leader stored (a replica that
has not reconciled yet); the history is the audit trail in the database, newest first.

Many clusters, one database (docs/fleet.md): a queue is addressed by name, so `?cluster=` says whose (default:
this watchdog's own); another cluster's plan is the one its leader stored.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.capability import store
from volcano_monitor.watchdog.state.db.scope import cluster_of, scoped


class CapabilitySource(Protocol):
    """What the router needs of the controller."""

    def status(self, queue: str) -> dict[str, Any]: ...

    def knows(self, queue: str) -> bool: ...


class ResourcePlanOut(BaseModel):
    """Amounts in base units (cores, bytes, devices); null current: no capability set (unlimited)."""

    current: float | None
    target: float | None
    planned: float | None
    allocated: float
    why: str
    held: bool = False


class PlanOut(BaseModel):
    policy: str
    mode: str
    outcome: str
    identity: str
    planned_at: datetime
    source: Literal["replica", "database"]
    resources: dict[str, ResourcePlanOut]
    inputs: dict[str, Any]


class ChangeOut(BaseModel):
    id: int
    policy: str
    mode: str
    outcome: str
    before: dict[str, float | None]
    after: dict[str, float]
    why: dict[str, str]
    inputs: dict[str, Any]
    resource_version: str
    identity: str
    created_at: datetime


class HistoryPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ChangeOut]


class CapabilityOut(BaseModel):
    cluster: str
    queue: str
    plan: PlanOut | None
    history: HistoryPage


class ErrorOut(BaseModel):
    detail: str


QueueName = Annotated[str, Path(min_length=1, max_length=253, pattern=r"^[^\x00/]+$")]
ClusterName = Annotated[str | None, Query(min_length=1, max_length=63,
                                          pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$",
                                          description="The queue's cluster (default: the serving watchdog's).")]


def capability_router(engine: Engine, controller: CapabilitySource,
                      cluster_wide: Callable[..., None] = lambda: None) -> APIRouter:
    """`cluster_wide`: the gate of reads that cannot be split by namespace (auth.mode kubernetes: the
    caller must be allowed to list jobs in every namespace); a queue's plan is the platform team's."""
    router = APIRouter(tags=["capability"], dependencies=[Depends(cluster_wide)])

    @router.get("/api/v1/queues/{name}/capability", response_model=CapabilityOut,
                responses={404: {"model": ErrorOut, "description": "No such queue."}})
    def queue_capability(name: QueueName, limit: Annotated[int, Query(ge=1, le=1000)] = 20,
                         offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
                         cluster: ClusterName = None) -> CapabilityOut:
        """The queue's capability plan (per resource: current, target, planned, allocated, why) and the
        changes applied or planned in dry-run mode, newest first."""
        own = cluster_of(engine)
        theirs = cluster or own
        live = controller.status(name) if theirs == own else {}
        with Session(scoped(engine, theirs)) as session:
            stored = store.get_plan(session, name) if "planned_at" not in live else None
            total, rows = store.history(session, name, limit, offset)
            if "planned_at" in live:
                plan: PlanOut | None = PlanOut(source="replica", **{k: live[k] for k in (
                    "policy", "mode", "outcome", "identity", "planned_at", "resources", "inputs")})
            elif stored is not None:
                plan = PlanOut(source="database", policy=stored.policy, mode=stored.mode, outcome=stored.outcome,
                               identity=stored.identity, planned_at=stored.planned_at, resources=stored.resources,
                               inputs=stored.inputs)
            else:
                plan = None
            if plan is None and total == 0 and (theirs != own or not controller.knows(name)):
                raise HTTPException(404, "no such queue")
            items = [ChangeOut(id=r.id, policy=r.policy, mode=r.mode, outcome=r.outcome, before=r.before,
                               after=r.after, why=r.why, inputs=r.inputs, resource_version=r.resource_version,
                               identity=r.identity, created_at=r.created_at) for r in rows]
        return CapabilityOut(cluster=theirs, queue=name, plan=plan,
                             history=HistoryPage(total=total, limit=limit, offset=offset, items=items))

    return router
