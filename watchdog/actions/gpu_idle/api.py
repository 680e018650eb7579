"""`GET /api/v1/gpu-idle`: each GPU job's state as this replica's tracker sees it (the leader's is the one
that counts: only the leader collects usage), and the abort action's audit trail from the database.

A job's `state` is `idle`, `busy` or `no_gpu_data` — the last for a job requesting GPUs that Prometheus
has no DCGM series for: its idle seconds are null, never 0 and never counted as idle.

Many clusters, one database (docs/fleet.md): the live jobs are this watchdog's cluster's (its tracker's);
the aborts are every cluster's unless `?cluster=` narrows them; each item names its cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.reviews import Scope, every_namespace, visible
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.actions.notify.api import InClusters
from volcano_monitor.watchdog.state.db.models import GpuIdleAbortRow
from volcano_monitor.watchdog.state.db.scope import cluster_of, fleet
from volcano_monitor.watchdog.state.gpu_idle import NO_GPU_DATA, JobGpu


class JobGpuOut(BaseModel):
    cluster: str
    uid: str
    namespace: str
    job_name: str
    queue: str
    state: str
    idle_seconds: float | None
    gpu_util_percent: float | None
    gpu_pods: int
    limit_seconds: float | None
    abort: bool
    observed_at: datetime


class AbortOut(BaseModel):
    cluster: str
    job_uid: str
    namespace: str
    job_name: str
    queue: str
    mode: str
    state: str
    command_name: str
    alert_id: int | None
    idle_seconds: float
    limit_seconds: float
    grace_seconds: float
    attempts: int
    last_error: str
    identity: str
    created_at: datetime
    acted_at: datetime | None


class GpuIdleOut(BaseModel):
    leader: bool
    jobs: list[JobGpuOut]
    aborts_total: int
    aborts: list[AbortOut]


def gpu_idle_router(engine: Engine, settings: GpuIdleSettings, jobs: Callable[[], list[JobGpu]],
                    leader: Callable[[], bool], scope: Callable[..., Scope] = every_namespace) -> APIRouter:
    """`scope`: the namespaces the caller may see (auth.mode kubernetes): only their jobs and aborts."""
    router = APIRouter(tags=["gpu idle"])
    scoped = Depends(scope)

    @router.get("/api/v1/gpu-idle", response_model=GpuIdleOut)
    def gpu_idle(clusters: InClusters, allowed: Scope = scoped, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                 offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> GpuIdleOut:  # SQLite: 64-bit
        own = cluster_of(engine)
        out = [JobGpuOut(cluster=own, uid=j.uid, namespace=j.namespace, job_name=j.job_name, queue=j.queue,
                         state=j.state,
                         idle_seconds=None if j.state == NO_GPU_DATA else j.idle_seconds,
                         gpu_util_percent=j.gpu_util_percent, gpu_pods=j.gpu_pods,
                         limit_seconds=settings.policy(j.queue).gpu_idle_limit_seconds,
                         abort=settings.aborts(j.queue), observed_at=datetime.fromtimestamp(j.last_ts, UTC))
               for j in jobs() if visible(allowed, j.namespace) and (clusters is None or own in clusters)]
        with Session(engine) as session:
            only = [GpuIdleAbortRow.namespace.in_(allowed)] if allowed is not None else []
            total = session.execute(fleet(select(func.count()).select_from(GpuIdleAbortRow).where(*only),
                                          clusters)).scalar_one()
            rows = session.scalars(fleet(select(GpuIdleAbortRow).where(*only).order_by(
                GpuIdleAbortRow.created_at.desc(), GpuIdleAbortRow.id.desc()).limit(limit).offset(offset),
                clusters)).all()
            aborts = [AbortOut.model_validate(row, from_attributes=True) for row in rows]
        return GpuIdleOut(leader=leader(), jobs=out, aborts_total=total, aborts=aborts)

    return router
