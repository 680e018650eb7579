"""The watchdog's HTTP API (FastAPI): alerts, the job ledger, recommendations, queue usage, /metrics,
/healthz and /readyz. OpenAPI at /docs and /openapi.json.

Reads only, except writes that change state (today: resolving an alert by hand). Every non-GET route
sits on the `writes` router, whose dependency demands `Authorization: Bearer <api_token>`;
`check_writes_guarded` refuses to build an app where a non-GET route escaped it, so routes added later
(silences, the Alertmanager receiver) cannot be left open by accident. The token is never logged or
echoed: errors name no value.

Each request opens its own Session from the engine; the API holds no state beyond a cache of the
recommendations it puts on /metrics (they cost seconds on a big history, scrapes come every few).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import fastapi.routing
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, BeforeValidator, ConfigDict
from sqlalchemy import ColumnElement, Engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.notify.api import add_notification_routes
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.recommendations import book as recommend
from volcano_monitor.watchdog.state.db.models import Alert, AlertRequest, JobRun, UsageRollup
from volcano_monitor.watchdog.views.metrics import CONTENT_TYPE, RecommendationCache, render_metrics
from volcano_monitor.watchdog.views.report.api import report_router

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class CollectorHealth:
    enabled: bool
    last_success: float | None  # epoch seconds of the last successful round
    errors: int
    samples: int
    interval_seconds: float | None = None  # when given, "up" also means "succeeded within 3 intervals"


@dataclass
class Health:
    ready: Callable[[], bool]
    collectors: Callable[[], dict[str, CollectorHealth]]
    leader: Callable[[], bool] = lambda: True
    # (receiver, outcome) -> deliveries since start; every configured receiver appears (zeros included)
    notifications: Callable[[], dict[tuple[str, str], int]] = dict
    extra_metrics: Callable[[], str] = str  # more families, already rendered (queue capability)


@dataclass
class QueueView:
    """A Queue as the app's informer knows it; amounts in base units keyed by resource name."""

    name: str
    parent: str
    capability: dict[str, float]
    allocated: dict[str, float]
    state: str
    deserved: dict[str, float] = field(default_factory=dict)  # for the UI's queue page


# ---- response models (they document the API in OpenAPI) -------------------------------------------

class Page(BaseModel):
    total: int
    limit: int
    offset: int


class AlertOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
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


class JobOut(BaseModel):
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
    name: str
    parent: str
    state: str
    capability: dict[str, float]
    allocated: dict[str, float]
    usage: QueueUsage
    cpu_used_of_capability: float | None
    memory_used_of_capability: float | None


class Status(BaseModel):
    status: str


class ErrorOut(BaseModel):
    detail: str


# ---- authentication -------------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="The api_token setting, required by every non-GET endpoint.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "Missing or wrong bearer token."},
    403: {"model": ErrorOut, "description": "No api_token is configured: writes are refused."},
}


def token_guard(settings: Settings, *, reading: bool = False) -> Callable[[HTTPAuthorizationCredentials | None], None]:
    """The dependency every non-GET route carries (`api_token`), or with `reading` the GETs that show
    people's data (`api_read_token` or `api_token`). Compares bytes in constant time (hmac.compare_digest
    on str rejects non-ASCII, and a header is whatever the client sends)."""
    tokens = [settings.api_token, settings.api_read_token] if reading else [settings.api_token]
    expected = [token.get_secret_value().encode() for token in tokens if token and token.get_secret_value()]

    def require_token(credentials: Credentials) -> None:
        if not expected:
            raise HTTPException(403, "no api_read_token or api_token configured" if reading
                                else "no api_token configured")
        given = credentials.credentials.encode("utf-8", "surrogateescape") if credentials else b""
        matches = [hmac.compare_digest(given, secret) for secret in expected]  # every one: constant time
        if not given or not any(matches):
            raise HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})

    return require_token


@dataclass(frozen=True)
class RouteInfo:
    path: str
    methods: frozenset[str]
    dependencies: tuple[Callable[..., Any], ...]  # what the route's dependencies call, router-level ones included


def route_table(app: FastAPI) -> list[RouteInfo]:
    """Every route as it is served. Recent FastAPI keeps included routers as lazy entries and exposes the
    effective routes through `iter_route_contexts`; older FastAPI copied them into `app.routes`."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    out = []
    for route in iterate(app.routes) if iterate is not None else app.routes:
        dependant = getattr(route, "dependant", None)
        calls = tuple(d.call for d in dependant.dependencies if d.call is not None) if dependant is not None else ()
        out.append(RouteInfo(str(getattr(route, "path", "")), frozenset(getattr(route, "methods", None) or ()), calls))
    return out


def check_writes_guarded(app: FastAPI, guard: Callable[..., Any]) -> None:
    """Refuse an app in which some non-GET route does not depend on the token guard."""
    for route in route_table(app):
        if route.methods - {"GET", "HEAD"} and guard not in route.dependencies:
            raise RuntimeError(f"{sorted(route.methods)} {route.path} must be on the token-guarded router")


# ---- query parameters -----------------------------------------------------------------------------

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


def open_session(request: Request) -> Iterator[Session]:
    """One Session per request, from the engine the app was built with; closed when the response is done."""
    with Session(request.app.state.engine) as session:
        yield session


Db = Annotated[Session, Depends(open_session)]


def _aware(value: datetime | None, name: str) -> datetime | None:
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


def _ratio(used: float, requested: float) -> float | None:
    return used / requested if requested > 0 else None


def job_out(row: JobRun) -> JobOut:
    fields = {name: getattr(row, name) for name in JobOut.model_fields if name != "efficiency"}
    efficiency = Efficiency(cpu=_ratio(row.cpu_core_seconds_used, row.cpu_core_seconds_requested),
                            memory=_ratio(row.memory_byte_seconds_used, row.memory_byte_seconds_requested),
                            gpu=_ratio(row.gpu_seconds_used, row.gpu_seconds_requested))
    return JobOut(**fields, efficiency=efficiency)


def queue_usage(session: Session, now: datetime) -> tuple[datetime | None, int | None, dict[str, QueueUsage]]:
    """Per queue, the latest complete bucket: one bucket for every queue, so the numbers are of the same
    moment, and a queue without rows in it used nothing. Buckets are taken to be aligned (every
    container's bucket starts at the same instants) and of the size the newest row has."""
    newest = session.execute(select(UsageRollup.bucket_seconds).where(UsageRollup.bucket_start <= now)
                             .order_by(UsageRollup.bucket_start.desc()).limit(1)).scalar()
    if not newest:
        return None, None, {}
    start = session.execute(select(func.max(UsageRollup.bucket_start)).where(
        UsageRollup.bucket_seconds == newest, UsageRollup.bucket_start <= now - timedelta(seconds=newest))).scalar()
    if start is None:
        return None, None, {}
    r = UsageRollup
    gpu_util = r.gpu_util_sum / func.nullif(r.gpu_samples, 0)
    rows = session.execute(
        select(r.queue, func.count(), func.sum(r.cpu_cores_sum / func.nullif(r.samples, 0)),
               func.sum(r.memory_bytes_sum / func.nullif(r.samples, 0)), func.avg(gpu_util),
               func.sum(gpu_util / 100.0 * r.gpu_request))
        .where(r.bucket_start == start, r.bucket_seconds == newest).group_by(r.queue))
    return start, newest, {queue: QueueUsage(bucket_start=start, bucket_seconds=newest, containers=count,
                                             cpu_cores=cpu or 0.0, memory_bytes=memory or 0.0,
                                             gpu_util_percent=util, gpus_busy=busy or 0.0)
                           for queue, count, cpu, memory, util, busy in rows}


def store_resolve_request(engine: Engine, alert_id: int, clock: Callable[[], datetime]) -> int:
    """Store a manual resolve for the leader's worker (the only writer of alert state); its id.
    404 / 409 at once when the alert is unknown or already resolved."""
    with Session(engine) as session, session.begin():
        row = session.get(Alert, alert_id)
        if row is None:
            raise HTTPException(404, "no such alert")
        if row.state == "resolved":
            raise HTTPException(409, "alert is already resolved")
        request = AlertRequest(alert_id=alert_id, action="resolve", requested_at=clock(), outcome="")
        session.add(request)
        session.flush()
        return request.id


def wait_for_request(engine: Engine, request_id: int, seconds: float) -> str | None:
    """The outcome of a stored request once a worker carried it out, or None after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        with Session(engine) as session:
            done = session.get(AlertRequest, request_id)
            if done is not None and done.done_at is not None:
                return done.outcome
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


class JsonBodies:
    """Every body the /api/ routes take is JSON: read it as JSON whatever the client declared. `curl -d` sends
    `application/x-www-form-urlencoded` unless told otherwise, and FastAPI answered such a silence
    with a 422 that named no header."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH") \
                and scope["path"].startswith("/api/"):  # the UI's forms are forms
            declared = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
            if not declared.startswith(b"application/json"):
                headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
                scope = dict(scope, headers=[*headers, (b"content-type", b"application/json")])
        await self.app(scope, receive, send)


def create_app(engine: Engine, settings: Settings, health: Health, clock: Callable[[], datetime] = utcnow,
               queues: Callable[[], list[QueueView]] = list, recommendation_ttl_seconds: float = 300.0,
               outbox: Outbox | None = None, wake_notifier: Callable[[], None] = lambda: None,
               routers: Sequence[APIRouter] = (), request_made: Callable[[], None] = lambda: None,
               request_wait_seconds: float = 5.0) -> FastAPI:
    """The watchdog's HTTP app. `outbox`: notifications (the Alertmanager receiver, silences, the
    outbox); `wake_notifier` is called when the receiver enqueued something; `routers`: more read-only
    routes (queue capability); `request_made` tells this replica's worker that a request was stored."""
    app = FastAPI(title="volcano-watchdog", version="1",
                  description="Alerts, the job ledger, request recommendations and queue usage of a Volcano cluster.")
    app.add_middleware(JsonBodies)
    require_token = token_guard(settings)
    writes = APIRouter(dependencies=[Depends(require_token)], responses=AUTH_RESPONSES)
    cache = RecommendationCache(settings.recommendations, recommendation_ttl_seconds)
    app.state.engine = engine

    @app.exception_handler(SQLAlchemyError)
    def database_error(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        log.warning("%s %s: database error %s", request.method, request.url.path, type(exc).__name__)
        return JSONResponse({"detail": "database unavailable"}, status_code=503)

    @app.get("/healthz", response_model=Status, tags=["health"])
    def healthz() -> Status:
        return Status(status="ok")

    @app.get("/readyz", response_model=Status, tags=["health"], responses={503: {"model": Status}})
    def readyz() -> Any:
        try:
            ready = health.ready()
        except Exception as exc:  # the app's callback failing means "not ready", not a 500
            log.warning("readiness check failed (%s): %s", type(exc).__name__, exc)
            ready = False
        return Status(status="ready") if ready else JSONResponse({"status": "not ready"}, status_code=503)

    @app.get("/metrics", response_class=Response, tags=["health"],
             responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format 0.0.4."}})
    def metrics(session: Db) -> Response:
        now = clock()
        return Response(render_metrics(session, health, now, cache.get(session, now)), media_type=CONTENT_TYPE)

    @app.get("/api/v1/alerts", response_model=AlertPage, tags=["alerts"])
    def list_alerts(session: Db, state: Literal["pending", "firing", "resolved"] | None = None, kind: Text = None,
                    namespace: Text = None, queue: Text = None, severity: Text = None, limit: Limit = 100,
                    offset: Offset = 0) -> AlertPage:
        """Alerts, newest first (by when the episode started)."""
        where: list[ColumnElement[bool]] = [column == value for column, value in (
            (Alert.state, state), (Alert.kind, kind), (Alert.namespace, namespace), (Alert.queue, queue),
            (Alert.severity, severity)) if value is not None]
        total = session.execute(select(func.count()).select_from(Alert).where(*where)).scalar_one()
        rows = session.scalars(select(Alert).where(*where).order_by(Alert.started_at.desc(), Alert.id.desc())
                               .limit(limit).offset(offset))
        return AlertPage(total=total, limit=limit, offset=offset, items=[AlertOut.model_validate(a) for a in rows])

    @app.get("/api/v1/alerts/{alert_id}", response_model=AlertOut, tags=["alerts"],
             responses={404: {"model": ErrorOut}})
    def get_alert(session: Db, alert_id: AlertId) -> AlertOut:
        row = session.get(Alert, alert_id)
        if row is None:
            raise HTTPException(404, "no such alert")
        return AlertOut.model_validate(row)

    @writes.post("/api/v1/alerts/{alert_id}/resolve", response_model=AlertOut, tags=["alerts"],
                 responses={202: {"model": ErrorOut, "description": "Stored; the leader has not carried it out yet."},
                            404: {"model": ErrorOut}, 409: {"model": ErrorOut, "description": "Already resolved."}})
    def resolve_alert(alert_id: AlertId) -> Any:
        """Resolve an alert by hand: one "resolved" message goes out. While its cause persists no new
        episode opens; once the cause has gone, a recurrence is a new alert.

        The request is stored and carried out by the leader's worker (the only writer of alert state,
        on whichever replica leads); this call waits up to a few seconds for it, then answers 202."""
        request_id = store_resolve_request(engine, alert_id, clock)
        request_made()
        outcome = wait_for_request(engine, request_id, request_wait_seconds)
        if outcome is None:
            return JSONResponse({"detail": f"request {request_id} stored; the leader carries it out shortly"},
                                status_code=202)
        if outcome == "already_resolved":
            raise HTTPException(409, "alert is already resolved")
        if outcome == "no_such_alert":
            raise HTTPException(404, "no such alert")
        with Session(engine) as session:
            return AlertOut.model_validate(session.get(Alert, alert_id))

    @app.get("/api/v1/jobs", response_model=JobPage, tags=["jobs"])
    def list_jobs(session: Db, namespace: Text = None, queue: Text = None, phase: Text = None, name: Text = None,
                  workload: Text = None, finished_after: Time = None,
                  finished_before: Time = None, limit: Limit = 100, offset: Offset = 0) -> JobPage:
        """The job ledger, newest first (by creation). `finished_after` is inclusive, `finished_before` not."""
        where: list[ColumnElement[bool]] = [column == value for column, value in (
            (JobRun.namespace, namespace), (JobRun.queue, queue), (JobRun.phase, phase), (JobRun.name, name),
            (JobRun.workload, workload)) if value is not None]
        if (after := _aware(finished_after, "finished_after")) is not None:
            where.append(JobRun.finished_at >= after)
        if (before := _aware(finished_before, "finished_before")) is not None:
            where.append(JobRun.finished_at < before)
        total = session.execute(select(func.count()).select_from(JobRun).where(*where)).scalar_one()
        newest = func.coalesce(JobRun.created_at, JobRun.updated_at)
        rows = session.scalars(select(JobRun).where(*where).order_by(newest.desc(), JobRun.id.desc())
                               .limit(limit).offset(offset))
        return JobPage(total=total, limit=limit, offset=offset, items=[job_out(row) for row in rows])

    @app.get("/api/v1/jobs/{uid}", response_model=JobOut, tags=["jobs"], responses={404: {"model": ErrorOut}})
    def get_job(session: Db, uid: Annotated[str, Path(max_length=64, pattern=r"^[^\x00]*$")]) -> JobOut:
        row = session.scalars(select(JobRun).where(JobRun.uid == uid)).first()
        if row is None:
            raise HTTPException(404, "no such job run")
        return job_out(row)

    @app.get("/api/v1/recommendations", response_model=list[recommend.Recommendation], tags=["recommendations"])
    def recommendations(session: Db, namespace: Text = None) -> list[recommend.Recommendation]:
        """Request recommendations per workload x task x container (base units: cores, bytes), computed from
        the stored history now."""
        return recommend.compute_recommendations(session, settings.recommendations, clock(), namespace)

    @app.get("/api/v1/queues", response_model=list[QueueOut], tags=["queues"])
    def list_queues(session: Db) -> list[QueueOut]:
        """Each queue's usage in the latest complete bucket next to its capability and allocation."""
        start, seconds, usage = queue_usage(session, clock())
        views = {view.name: view for view in queues()}
        for name in usage.keys() - views.keys() - {""}:  # usage of a queue the informer no longer knows
            views[name] = QueueView(name=name, parent="", capability={}, allocated={}, state="Unknown")
        out = []
        for name, view in sorted(views.items()):
            used = usage.get(name) or QueueUsage(bucket_start=start, bucket_seconds=seconds, containers=0,
                                                 cpu_cores=0.0, memory_bytes=0.0, gpu_util_percent=None, gpus_busy=0.0)
            out.append(QueueOut(name=name, parent=view.parent, state=view.state, capability=view.capability,
                                allocated=view.allocated, usage=used,
                                cpu_used_of_capability=_ratio(used.cpu_cores, view.capability.get("cpu", 0.0)),
                                memory_used_of_capability=_ratio(used.memory_bytes,
                                                                 view.capability.get("memory", 0.0))))
        return out

    private = APIRouter(dependencies=[Depends(token_guard(settings, reading=True))], responses=AUTH_RESPONSES)
    add_notification_routes(app, private, writes, engine, outbox, clock, wake_notifier)
    app.include_router(private)
    app.include_router(report_router(clock))
    for router in routers:
        app.include_router(router)
    from volcano_monitor.watchdog.views.ui import ui_router  # the pages use this module's views: import when built

    app.include_router(ui_router(engine, settings, clock, queues, require_token, request_made, request_wait_seconds))
    app.include_router(writes)
    check_writes_guarded(app, require_token)
    return app
