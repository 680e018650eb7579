"""The watchdog's HTTP API (FastAPI): alerts, the job ledger, recommendations, queue usage, /metrics,
/healthz and /readyz. OpenAPI at /docs and /openapi.json.

Reads only, except writes that change state (today: resolving an alert by hand). Every non-GET route
sits on the `writes` router, whose dependency demands `Authorization: Bearer <api_token>`;
`check_writes_guarded` refuses to build an app where a non-GET route escaped it, so routes added later
(silences, the Alertmanager receiver) cannot be left open by accident. The token is never logged or
echoed: errors name no value.

Each request opens its own Session from the engine; the API holds no state beyond a cache of the
recommendations it puts on /metrics (they cost seconds on a big history, scrapes come every few).

Many clusters, one database (docs/fleet.md, "API and UI"; `watchdog.views.clusters`): every item carries its
`cluster`; every list reads the whole fleet unless `?cluster=` (repeated or comma-separated) narrows it, an
unknown cluster giving an empty list and a malformed name a one-line 422; a job run (addressed by uid) and a
queue take one `?cluster=` and default to this watchdog's own cluster; alerts are addressed by a
database-wide id. A resolve of another cluster's alert is stored for that cluster's leader. /metrics is this
watchdog's own cluster only: each cluster's Prometheus scrapes its own watchdog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import ColumnElement, Engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.reviews import Scope, visible
from volcano_monitor.watchdog.actions.notify.api import add_notification_routes, every_cluster
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.recommendations import book as recommend
from volcano_monitor.watchdog.findings.redact import redact_text, redact_value
from volcano_monitor.watchdog.findings.why import Expected, Explain, no_estimate
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.db.scope import cluster_of, fleet
from volcano_monitor.watchdog.state.db.scope import scoped as scoped_engine
from volcano_monitor.watchdog.views.clusters import (
    Clusters,
    OneCluster,
    cluster_filter,
    invalid_cluster,
    known_clusters,
    parse_cluster,
)
from volcano_monitor.watchdog.views.guard import AUTH_RESPONSES, check_writes_guarded, token_guard
from volcano_monitor.watchdog.views.health import Health, QueueView, utcnow
from volcano_monitor.watchdog.views.metrics import (
    CONTENT_TYPE,
    cost_totals_cache,
    recommendation_cache,
    render_metrics,
)
from volcano_monitor.watchdog.views.report.api import report_router
from volcano_monitor.watchdog.views.resolve import any_alert, store_resolve_request, wait_for_request
from volcano_monitor.watchdog.views.schema import (
    AlertId,
    AlertOut,
    AlertPage,
    ErrorOut,
    JobOut,
    JobPage,
    Limit,
    Offset,
    QueueOut,
    QueueUsage,
    RecommendationOut,
    Status,
    Text,
    Time,
    aware_utc,
    job_out,
    queue_usage,
    ratio_or_none,
)
from volcano_monitor.watchdog.views.tenancy import Tenancy, check_reads_scoped

log = logging.getLogger(__name__)


# ---- response models (they document the API in OpenAPI) -------------------------------------------


# ---- authentication -------------------------------------------------------------------------------


# ---- query parameters -----------------------------------------------------------------------------


def open_session(request: Request) -> Iterator[Session]:
    """One Session per request, from the engine the app was built with; closed when the response is done."""
    with Session(request.app.state.engine) as session:
        yield session


Db = Annotated[Session, Depends(open_session)]
InClusters = Annotated[Clusters, Depends(cluster_filter)]


def one_cluster(cluster: OneCluster, session: Session) -> str:
    """An item's cluster: `?cluster=` or this watchdog's own; a malformed name is a one-line 422."""
    try:
        return parse_cluster(cluster, cluster_of(session))
    except ValueError as exc:
        raise invalid_cluster(cluster, str(exc)) from None


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


def alert_out(row: Alert, scope: Scope) -> AlertOut:
    """An alert as `scope`'s reader may see it: a summary or details naming another namespace's job (a
    GangUnschedulable's "when research/llama-pretrain ends") say "when a job of another namespace ends". The
    stored row keeps the name; a cluster-wide reader (scope None) gets it unchanged."""
    out = AlertOut.model_validate(row)
    if scope is None:
        return out
    return out.model_copy(update={"summary": redact_text(out.summary, scope),
                                  "details": redact_value(out.details, scope)})

def create_app(engine: Engine, settings: Settings, health: Health, clock: Callable[[], datetime] = utcnow,
               queues: Callable[[], list[QueueView]] = list, recommendation_ttl_seconds: float = 300.0,
               outbox: Outbox | None = None, wake_notifier: Callable[[], None] = lambda: None,
               routers: Sequence[APIRouter] = (), request_made: Callable[[], None] = lambda: None,
               request_wait_seconds: float = 5.0, why: Explain = lambda uid: None,
               expected: Expected = no_estimate, tenancy: Tenancy | None = None) -> FastAPI:
    """The watchdog's HTTP app. `outbox`: notifications (the Alertmanager receiver, silences, the
    outbox); `wake_notifier` is called when the receiver enqueued something; `routers`: more read-only
    routes (queue capability); `request_made` tells this replica's worker that a request was stored; `why`:
    a live job's explanation and queue place (`ClusterIndex.why`), and `expected` its expected start
    (`ExpectedStarts.get`), for the job page; `tenancy`: who may read what (auth.mode; default token, and
    the `routers` must take its `scope` then too: `check_reads_scoped` refuses an app where a read does not)."""
    app = FastAPI(title="volcano-watchdog", version="1",
                  description="Alerts, the job ledger, request recommendations and queue usage of a Volcano cluster.")
    app.add_middleware(JsonBodies)
    tenancy = tenancy or Tenancy(settings.auth)
    # A default, not an Annotated alias: with postponed annotations FastAPI resolves those in the module's
    # globals, where this app's tenancy is not.
    scoped = Depends(tenancy.scope)
    require_token = token_guard(settings)
    writes = APIRouter(dependencies=[Depends(require_token)], responses=AUTH_RESPONSES)
    cache = recommendation_cache(settings.recommendations, recommendation_ttl_seconds)
    cost_cache = cost_totals_cache(settings.costs, recommendation_ttl_seconds)
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
    def metrics(session: Db) -> Response:  # open in every auth.mode: Prometheus scrapes it (docs/auth.md)
        now = clock()
        return Response(render_metrics(session, health, now, cache.get(session, now), settings.costs,
                                       cost_cache.get(session, now)), media_type=CONTENT_TYPE)

    @app.get("/api/v1/alerts", response_model=AlertPage, tags=["alerts"])
    def list_alerts(session: Db, clusters: InClusters, allowed: Scope = scoped,
                    state: Literal["pending", "firing", "resolved"] | None = None, kind: Text = None,
                    namespace: Text = None, queue: Text = None, severity: Text = None, limit: Limit = 100,
                    offset: Offset = 0) -> AlertPage:
        """Alerts, newest first (by when the episode started)."""
        where: list[ColumnElement[bool]] = [column == value for column, value in (
            (Alert.state, state), (Alert.kind, kind), (Alert.namespace, namespace), (Alert.queue, queue),
            (Alert.severity, severity)) if value is not None]
        if allowed is not None:
            where.append(Alert.namespace.in_(allowed))
        total = session.execute(fleet(select(func.count()).select_from(Alert).where(*where), clusters)).scalar_one()
        rows = session.scalars(fleet(select(Alert).where(*where).order_by(Alert.started_at.desc(), Alert.id.desc())
                                     .limit(limit).offset(offset), clusters))
        return AlertPage(total=total, limit=limit, offset=offset, items=[alert_out(a, allowed) for a in rows])

    @app.get("/api/v1/alerts/{alert_id}", response_model=AlertOut, tags=["alerts"],
             responses={404: {"model": ErrorOut}})
    def get_alert(session: Db, alert_id: AlertId, clusters: InClusters, allowed: Scope = scoped) -> AlertOut:
        """One alert, whichever cluster's (ids are database-wide); `?cluster=` only checks it."""
        row = any_alert(session, alert_id)
        if row is None or not visible(allowed, row.namespace) or (  # another team's: as if it did not exist
                clusters is not None and row.cluster not in clusters):
            raise HTTPException(404, "no such alert")
        return alert_out(row, allowed)

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
            return AlertOut.model_validate(any_alert(session, alert_id))

    @app.get("/api/v1/jobs", response_model=JobPage, tags=["jobs"])
    def list_jobs(session: Db, clusters: InClusters, allowed: Scope = scoped, namespace: Text = None,
                  queue: Text = None, phase: Text = None, name: Text = None,
                  workload: Text = None, finished_after: Time = None,
                  finished_before: Time = None, limit: Limit = 100, offset: Offset = 0) -> JobPage:
        """The job ledger, newest first (by creation). `finished_after` is inclusive, `finished_before` not."""
        where: list[ColumnElement[bool]] = [column == value for column, value in (
            (JobRun.namespace, namespace), (JobRun.queue, queue), (JobRun.phase, phase), (JobRun.name, name),
            (JobRun.workload, workload)) if value is not None]
        if allowed is not None:
            where.append(JobRun.namespace.in_(allowed))
        if (after := aware_utc(finished_after, "finished_after")) is not None:
            where.append(JobRun.finished_at >= after)
        if (before := aware_utc(finished_before, "finished_before")) is not None:
            where.append(JobRun.finished_at < before)
        total = session.execute(fleet(select(func.count()).select_from(JobRun).where(*where), clusters)).scalar_one()
        newest = func.coalesce(JobRun.created_at, JobRun.updated_at)
        rows = session.scalars(fleet(select(JobRun).where(*where).order_by(newest.desc(), JobRun.id.desc())
                                     .limit(limit).offset(offset), clusters))
        return JobPage(total=total, limit=limit, offset=offset, items=[job_out(row, settings.costs) for row in rows])

    @app.get("/api/v1/jobs/{uid}", response_model=JobOut, tags=["jobs"], responses={404: {"model": ErrorOut}})
    def get_job(session: Db, uid: Annotated[str, Path(max_length=64, pattern=r"^[^\x00]*$")],
                cluster: OneCluster = None, allowed: Scope = scoped) -> JobOut:
        """One run, of `?cluster=` (default: this watchdog's own; two clusters may hold the same uid)."""
        row = session.scalars(fleet(select(JobRun).where(JobRun.uid == uid), (one_cluster(cluster, session),))).first()
        if row is None or not visible(allowed, row.namespace):  # another team's: as if it did not exist
            raise HTTPException(404, "no such job run")
        return job_out(row, settings.costs)

    @app.get("/api/v1/recommendations", response_model=list[RecommendationOut], tags=["recommendations"])
    def recommendations(session: Db, clusters: InClusters, allowed: Scope = scoped,
                        namespace: Text = None) -> list[RecommendationOut]:
        """Request recommendations per workload x task x container (base units: cores, bytes), computed from
        the stored history now, per cluster (a workload's history is its cluster's)."""
        if namespace is not None and not visible(allowed, namespace):
            return []
        out = []
        for name in clusters if clusters is not None else known_clusters(session):
            with Session(scoped_engine(engine, name)) as theirs:
                found = recommend.compute_recommendations(theirs, settings.recommendations, clock(), namespace)
            out += [RecommendationOut.of(rec, name) for rec in found if visible(allowed, rec.namespace)]
        return out

    @app.get("/api/v1/queues", response_model=list[QueueOut], tags=["queues"])
    def list_queues(session: Db, clusters: InClusters, allowed: Scope = scoped) -> list[QueueOut]:
        """Each queue's usage in the latest complete bucket next to its capability and allocation (with
        auth.mode kubernetes: the usage of the caller's namespaces only). Capability and allocation are known
        for this watchdog's own cluster (its informer's); another cluster's queues show their usage, state
        "Unknown"."""
        own = cluster_of(session)
        out = []
        for cluster in clusters if clusters is not None else known_clusters(session):
            out += _queues_of(session, cluster, allowed, queues() if cluster == own else [])
        return out

    def _queues_of(session: Session, cluster: str, allowed: Scope, known: list[QueueView]) -> list[QueueOut]:
        start, seconds, usage = queue_usage(session, clock(), allowed, cluster)
        views = {view.name: view for view in known}
        for name in usage.keys() - views.keys() - {""}:  # usage of a queue the informer no longer knows
            views[name] = QueueView(name=name, parent="", capability={}, allocated={}, state="Unknown")
        out = []
        for name, view in sorted(views.items()):
            used = usage.get(name) or QueueUsage(bucket_start=start, bucket_seconds=seconds, containers=0,
                                                 cpu_cores=0.0, memory_bytes=0.0, gpu_util_percent=None, gpus_busy=0.0)
            out.append(QueueOut(cluster=cluster, name=name, parent=view.parent, state=view.state,
                                capability=view.capability, allocated=view.allocated, usage=used,
                                cpu_used_of_capability=ratio_or_none(used.cpu_cores, view.capability.get("cpu", 0.0)),
                                memory_used_of_capability=ratio_or_none(used.memory_bytes,
                                                                 view.capability.get("memory", 0.0))))
        return out

    # People's data: behind api_read_token, or with auth.mode kubernetes behind the caller's own identity.
    private = (APIRouter() if tenancy.on else
               APIRouter(dependencies=[Depends(token_guard(settings, reading=True))], responses=AUTH_RESPONSES))
    add_notification_routes(app, private, writes, engine, outbox, clock, wake_notifier, tenancy.scope, cluster_filter)
    app.include_router(private)
    app.include_router(report_router(clock, settings.costs, tenancy.scope))
    for router in routers:
        app.include_router(router)
    from volcano_monitor.watchdog.views.ui import ui_router  # the pages use this module's views: import when built

    app.include_router(ui_router(engine, settings, clock, queues, require_token, request_made, request_wait_seconds,
                                 why, expected, tenancy))
    app.dependency_overrides[every_cluster] = cluster_filter  # the actions' lists: names checked, repeats read
    app.include_router(writes)
    check_writes_guarded(app, require_token)
    if tenancy.on:  # in token mode every route sees everything anyway
        check_reads_scoped(app, tenancy)
    return app
