"""What the API answers and accepts: response models (they document the API in OpenAPI), query parameter
types, and the conversions from stored rows that the API and the UI share.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Path, Query
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, BeforeValidator, ConfigDict
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.recommendations.policy import Recommendation
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import JobRun, UsageRollup
from volcano_monitor.watchdog.state.prices import is_priced, run_cost
from volcano_monitor.watchdog.views.clusters import OWN, Own, across


class Page(BaseModel):
    total: int
    limit: int
    offset: int


class AlertOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    cluster: str
    fingerprint: str
    kind: str
    severity: str
    state: str
    namespace: str
    queue: str
    job_name: str
    subject: str
    summary: str
    details: dict[str, Any]
    started_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    last_seen_at: datetime
    updated_at: datetime


class AlertPage(Page):
    items: list[AlertOut]


class Efficiency(BaseModel):
    """Used / requested resource-seconds; null when nothing of that resource was requested."""

    cpu: float | None
    memory: float | None
    gpu: float | None


class JobCost(BaseModel):
    """The run's cost so far (docs/cost.md): requested = what it held, used = what it used, idle = requested -
    used, never below 0 per resource; the same numbers as the report's (`watchdog.state.prices.run_cost`)."""

    requested: float
    used: float
    idle: float
    currency: str


class JobOut(BaseModel):
    cluster: str
    uid: str
    kind: str
    namespace: str
    name: str
    workload: str
    queue: str
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    phase: str
    reason: str
    message: str
    retry_count: int
    requested_cpu_cores: float
    requested_memory_bytes: float
    requested_gpus: float
    cpu_core_seconds_requested: float
    cpu_core_seconds_used: float
    memory_byte_seconds_requested: float
    memory_byte_seconds_used: float
    gpu_seconds_requested: float
    gpu_seconds_used: float
    pods_pending: int
    pods_running: int
    pods_succeeded: int  # of the last status that reported finished pods (Volcano's final status drops them)
    pods_failed: int
    object_deleted: bool
    deleted_at: datetime | None  # set without finished_at: deleted before it finished
    updated_at: datetime
    efficiency: Efficiency
    cost: JobCost | None  # null when `costs:` sets no price


class JobPage(Page):
    items: list[JobOut]


class QueueUsage(BaseModel):
    """The queue's containers in the latest complete usage bucket (means over the bucket, summed)."""

    bucket_start: datetime | None
    bucket_seconds: int | None
    containers: int
    cpu_cores: float
    memory_bytes: float
    gpu_util_percent: float | None  # mean over the containers that reported GPU utilisation
    gpus_busy: float  # sum of utilisation x GPUs requested


class QueueOut(BaseModel):
    cluster: str
    name: str
    parent: str
    state: str
    capability: dict[str, float]
    allocated: dict[str, float]
    usage: QueueUsage
    cpu_used_of_capability: float | None
    memory_used_of_capability: float | None


@dataclass(frozen=True)
class RecommendationOut(Recommendation):
    """A recommendation and the cluster whose history it was computed from."""

    cluster: str = ""

    @classmethod
    def of(cls, rec: Recommendation, cluster: str) -> RecommendationOut:
        return cls(**{f.name: getattr(rec, f.name) for f in fields(rec)}, cluster=cluster)


class Status(BaseModel):
    status: str


class ErrorOut(BaseModel):
    detail: str


Text = Annotated[str | None, Query(max_length=253, pattern=r"^[^\x00]*$")]  # PostgreSQL refuses NUL


Limit = Annotated[int, Query(ge=1, le=1000)]


Offset = Annotated[int, Query(ge=0, le=10**9)]


AlertId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _not_a_number(value: Any) -> Any:
    """pydantic reads a bare number as Unix seconds: `finished_after=2024` was 1970-01-01T00:33:44Z, not
    the year. The parameter is an ISO 8601 time, as the schema says."""
    try:
        float(value)
    except (TypeError, ValueError):
        return value
    raise ValueError("an ISO 8601 time (e.g. 2024-05-01T00:00:00Z), not a number")


Time = Annotated[datetime | None, Query(), BeforeValidator(_not_a_number)]


def aware_utc(value: datetime | None, name: str) -> datetime | None:
    """Query datetimes without an offset are taken as UTC (the database only holds aware UTC). One whose
    UTC falls outside the years 1..9999 (`9999-12-31T23:59:59-01:00`) is the 422 of a parameter that fails
    validation: it overflowed when bound to the query, a 503 "database unavailable"."""
    if value is None:
        return None
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise RequestValidationError([{"type": "value_error", "loc": ("query", name), "input": value.isoformat(),
                                       "msg": "outside the years 1..9999 in UTC"}]) from None


def ratio_or_none(used: float, requested: float) -> float | None:
    return used / requested if requested > 0 else None


def job_cost(row: JobRun, costs: Costs | None) -> JobCost | None:
    """A ledger row's cost as the report prices it; None without prices (or without `costs`)."""
    if costs is None or not is_priced(costs):
        return None
    priced = run_cost(row, costs)
    return JobCost(requested=priced.total("requested"), used=priced.total("used"), idle=priced.total("idle"),
                   currency=costs.currency)


def job_out(row: JobRun, costs: Costs | None = None) -> JobOut:
    fields = {name: getattr(row, name) for name in JobOut.model_fields if name not in ("efficiency", "cost")}
    efficiency = Efficiency(cpu=ratio_or_none(row.cpu_core_seconds_used, row.cpu_core_seconds_requested),
                            memory=ratio_or_none(row.memory_byte_seconds_used, row.memory_byte_seconds_requested),
                            gpu=ratio_or_none(row.gpu_seconds_used, row.gpu_seconds_requested))
    return JobOut(**fields, efficiency=efficiency, cost=job_cost(row, costs))


def queue_usage(session: Session, now: datetime, namespaces: Set[str] | None = None,
                cluster: str | Own = OWN) -> tuple[datetime | None, int | None, dict[str, QueueUsage]]:
    """Per queue, the latest complete bucket: one bucket for every queue, so the numbers are of the same
    moment, and a queue without rows in it used nothing. Buckets are taken to be aligned (every
    container's bucket starts at the same instants) and of the size the newest row has. `namespaces`: only
    those namespaces' containers (a caller's scope; None: all); `cluster`: that cluster's (default: the
    session's own)."""
    clusters = cluster if cluster is OWN else (cluster,)
    newest = session.execute(across(select(UsageRollup.bucket_seconds).where(UsageRollup.bucket_start <= now)
                                    .order_by(UsageRollup.bucket_start.desc()).limit(1), clusters)).scalar()
    if not newest:
        return None, None, {}
    start = session.execute(across(select(func.max(UsageRollup.bucket_start)).where(
        UsageRollup.bucket_seconds == newest, UsageRollup.bucket_start <= now - timedelta(seconds=newest)),
        clusters)).scalar()
    if start is None:
        return None, None, {}
    r = UsageRollup
    gpu_util = r.gpu_util_sum / func.nullif(r.gpu_samples, 0)
    rows = session.execute(across(
        select(r.queue, func.count(), func.sum(r.cpu_cores_sum / func.nullif(r.samples, 0)),
               func.sum(r.memory_bytes_sum / func.nullif(r.samples, 0)), func.avg(gpu_util),
               func.sum(gpu_util / 100.0 * r.gpu_request))
        .where(r.bucket_start == start, r.bucket_seconds == newest,
               *([r.namespace.in_(namespaces)] if namespaces is not None else [])).group_by(r.queue), clusters))
    return start, newest, {queue: QueueUsage(bucket_start=start, bucket_seconds=newest, containers=count,
                                             cpu_cores=cpu or 0.0, memory_bytes=memory or 0.0,
                                             gpu_util_percent=util, gpus_busy=busy or 0.0)
                           for queue, count, cpu, memory, util, busy in rows}
