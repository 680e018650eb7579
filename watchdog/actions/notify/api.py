"""API of notifications: the Alertmanager receiver, silences, the outbox (dead letters included) and
the receivers' names. Added to the watchdog's app by `watchdog.views.api.create_app`; every write is on the
token-guarded router (Alertmanager sends the token with `http_config.authorization`).

Many clusters, one database (docs/fleet.md): silences and messages name their cluster, the lists read every
cluster unless `?cluster=` narrows them, and ids are database-wide: expiring a silence or retrying a dead
letter of another cluster changes that cluster's row, whose watchdog acts on it. A silence is made for this
watchdog's cluster unless its body names another (the UI's form on another cluster's alert does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from itertools import islice
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import CursorResult, Engine, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.reviews import Scope, every_namespace, visible
from volcano_monitor.core.matchers import parse_matcher
from volcano_monitor.watchdog.actions.notify.alertmanager import AlertmanagerPayload, items
from volcano_monitor.watchdog.actions.notify.outbox import DEAD, PENDING, Outbox
from volcano_monitor.watchdog.findings.redact import redact_value
from volcano_monitor.watchdog.state.db.models import NotificationDelivery, Silence
from volcano_monitor.watchdog.state.db.scope import fleet

__all__ = ["add_notification_routes"]

Id = Annotated[int, Path(ge=1, le=2**63 - 1)]
STATES = ("pending", "sending", "sent", "dead", "uncertain")


ClusterFilter = tuple[str, ...] | None  # the clusters a list reads (None: every one): watchdog.views.clusters


ClusterQuery = Annotated[str | None, Query(
    max_length=2000, pattern=r"^[A-Za-z0-9._,-]*$",
    description="Only these clusters: comma-separated, or the parameter repeated. Default: every cluster.")]


def every_cluster(cluster: ClusterQuery = None) -> ClusterFilter:
    """The `?cluster=` of the actions' lists. The watchdog's app replaces it (`dependency_overrides`) with
    `watchdog.views.clusters.cluster_filter` (repeated parameters, names checked); a router served alone
    reads every cluster."""
    return None


InClusters = Annotated[ClusterFilter, Depends(every_cluster)]


class SilenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    matchers: list[str] = Field(min_length=1, max_length=20, description='e.g. ["queue=\\"research\\"", '
                                                                         '"alertname=~\\"Job.*\\""]')
    ends_at: datetime = Field(description="When the silence ends (RFC 3339 with a time zone).")
    starts_at: datetime | None = Field(default=None, description="Default: now.")
    created_by: str = Field(default="", max_length=253)
    comment: str = Field(default="", max_length=4000)
    cluster: str | None = Field(default=None, min_length=1, max_length=63,
                                pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$",
                                description="The cluster whose alerts it mutes (default: the serving watchdog's).")

    @field_validator("matchers")
    @classmethod
    def _parse(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_matcher(text)
        return value

    @field_validator("ends_at", "starts_at", mode="before")
    @classmethod
    def _not_a_number(cls, value: Any) -> Any:
        """pydantic reads a number as Unix seconds (`2100` is 1970-01-01T00:35:00Z); the schema says a time."""
        if isinstance(value, int | float):
            raise ValueError("an RFC 3339 time with a time zone (e.g. 2026-11-24T18:00:00Z), not a number")
        return value

    @field_validator("ends_at", "starts_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        """In UTC, as stored: a time whose UTC is past the calendar (9999-12-31T23:59:59-01:00) is refused
        here; it overflowed when stored, a 503 "database unavailable"."""
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a time zone (e.g. 2026-11-24T18:00:00Z)")
        try:
            return value.astimezone(UTC) if value is not None else None
        except OverflowError:
            raise ValueError("outside the years 1..9999 in UTC") from None


class SilenceOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    cluster: str
    matchers: list[str]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    active: bool = False


class DeliveryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    cluster: str
    receiver: str
    state: str
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    sent_at: datetime | None
    last_error: str
    message: dict[str, Any]


class ReceiverOut(BaseModel):
    name: str
    kind: str
    send_resolved: bool


class ErrorOut(BaseModel):
    detail: str


class Accepted(BaseModel):
    alerts: int
    groups: int


def add_notification_routes(app: FastAPI, read: APIRouter, writes: APIRouter, engine: Engine, outbox: Outbox | None,
                            clock: Callable[[], datetime], wake: Callable[[], None],
                            scope: Callable[..., Scope] = every_namespace,
                            clusters: Callable[..., ClusterFilter] = every_cluster) -> None:
    """`read`: the router for GETs that show people's data (the messages, with owners' mentions; who
    made a silence): it asks for the read token. `writes`: the write token. `scope`: the namespaces the caller
    may see (auth.mode kubernetes): a message only when every alert in it is of one of them, a silence only
    when a matcher pins `namespace` to one of them. `clusters`: the dependency reading `?cluster=`."""
    scoped = Depends(scope)  # a default: an Annotated alias here would not resolve (postponed annotations)
    in_clusters = Depends(clusters)
    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        """FastAPI's 422 everywhere but the Alertmanager receiver, which answers 400 with the first
        reason in one line, as webhook senders log it."""
        if request.url.path != "/api/v1/alertmanager":
            return await request_validation_exception_handler(request, exc)
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return JSONResponse({"detail": "body is not valid JSON"}, status_code=400)
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        reason = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid"))
        return JSONResponse({"detail": reason}, status_code=400)

    @writes.post("/api/v1/alertmanager", response_model=Accepted, tags=["notifications"],
                 responses={400: {"description": "Not an Alertmanager webhook payload (version 4)."}})
    def alertmanager(payload: AlertmanagerPayload) -> Accepted:
        """Receive Alertmanager's webhook (`version: "4"`) and send its alerts through the watchdog's routes."""
        if outbox is None or not outbox.enabled:
            raise HTTPException(503, "notifications are not configured (no receivers)")
        alerts = items(payload)
        for attempt in range(2):  # a group made at the same moment by the watchdog's own writer: once more
            try:
                with Session(engine) as session, session.begin():
                    now = clock()
                    groups = sum(outbox.enqueue(session, item, now) for item in alerts)
                break
            except IntegrityError:
                if attempt:
                    raise
        wake()
        return Accepted(alerts=len(alerts), groups=groups)

    @read.get("/api/v1/silences", response_model=list[SilenceOut], tags=["notifications"])
    def list_silences(allowed: Scope = scoped, only: ClusterFilter = in_clusters,
                      active: bool = Query(False, description="Only silences in effect now.")) -> list[SilenceOut]:
        now = clock()
        with Session(engine) as session:
            query = fleet(select(Silence).order_by(Silence.id.desc()), only)
            if active:
                query = query.where(Silence.starts_at <= now, Silence.ends_at > now)
            rows = (row for row in session.scalars(query.execution_options(yield_per=200))
                    if silence_visible(allowed, row.matchers))
            return [_silence_out(row, now) for row in islice(rows, 1000)]

    @writes.post("/api/v1/silences", response_model=SilenceOut, status_code=201, tags=["notifications"],
                 responses={400: {"model": ErrorOut, "description": "ends_at not after starts_at, or a body that "
                                                                    "cannot be read (not UTF-8)."}})
    def create_silence(body: SilenceIn) -> SilenceOut:
        """Mute notifications of alerts matching every matcher until `ends_at`."""
        now = clock()
        starts = body.starts_at or now
        if body.ends_at <= starts:
            raise HTTPException(400, "ends_at must be after starts_at")
        with Session(engine) as session, session.begin():
            row = Silence(**({"cluster": body.cluster} if body.cluster else {}), matchers=body.matchers,
                          starts_at=starts, ends_at=body.ends_at, created_by=body.created_by,
                          comment=body.comment, created_at=now, updated_at=now)
            session.add(row)
            session.flush()
            return _silence_out(row, now)

    @writes.delete("/api/v1/silences/{silence_id}", response_model=SilenceOut, tags=["notifications"],
                   responses={404: {"model": ErrorOut, "description": "No such silence."}})
    def expire_silence(silence_id: Id) -> SilenceOut:
        """Expire a silence now (it is kept, with its end time set)."""
        now = clock()
        with Session(engine) as session, session.begin():
            row = session.scalars(fleet(select(Silence).where(Silence.id == silence_id))).first()
            if row is None:
                raise HTTPException(404, "no such silence")
            if row.ends_at > now:
                row.ends_at = max(now, row.starts_at)
                row.updated_at = now
            return _silence_out(row, now)

    @read.get("/api/v1/notifications", response_model=list[DeliveryOut], tags=["notifications"])
    def list_deliveries(allowed: Scope = scoped, only: ClusterFilter = in_clusters,
                        state: Annotated[str | None, Query(pattern="^(" + "|".join(STATES) + ")$")] = None,
                        receiver: Annotated[str | None, Query(max_length=64)] = None,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[DeliveryOut]:
        """Messages in the outbox, newest first; `state=dead` lists the dead letters."""
        with Session(engine) as session:
            query = fleet(select(NotificationDelivery).order_by(NotificationDelivery.id.desc()), only)
            if state:
                query = query.where(NotificationDelivery.state == state)
            if receiver:
                query = query.where(NotificationDelivery.receiver == receiver)
            if allowed is None:
                query = query.limit(limit)
            rows = (row for row in session.scalars(query.execution_options(yield_per=200))
                    if message_visible(allowed, row.message))
            return [DeliveryOut.model_validate(row).model_copy(update={"message": redact_value(row.message, allowed)})
                    if allowed is not None else DeliveryOut.model_validate(row) for row in islice(rows, limit)]

    @writes.post("/api/v1/notifications/{delivery_id}/retry", response_model=DeliveryOut, tags=["notifications"],
                 responses={404: {"description": "No such message."}, 409: {"description": "Not a dead letter."}})
    def retry(delivery_id: Id) -> DeliveryOut:
        """Send a dead letter again (after fixing the receiver)."""
        now = clock()
        with Session(engine) as session, session.begin():
            result = cast(CursorResult[Any], session.execute(fleet(
                update(NotificationDelivery).where(NotificationDelivery.id == delivery_id,
                                                   NotificationDelivery.state == DEAD)
                .values(state=PENDING, attempts=0, next_attempt_at=now, updated_at=now))))
            row = session.scalars(fleet(select(NotificationDelivery).where(NotificationDelivery.id == delivery_id))
                                  .execution_options(populate_existing=True)).first()
            if row is None:
                raise HTTPException(404, "no such message")
            if result.rowcount == 0:
                raise HTTPException(409, f"message is {row.state}, not dead")
            out = DeliveryOut.model_validate(row)
        wake()
        return out

    @app.get("/api/v1/receivers", response_model=list[ReceiverOut], tags=["notifications"])
    def receivers(_: Scope = scoped) -> list[ReceiverOut]:
        """Configured receivers (names and kinds; their URLs and secrets are never shown); with auth.mode
        kubernetes to any authenticated caller."""
        found = outbox.receivers.values() if outbox is not None else ()
        return [ReceiverOut(name=r.name, kind=r.kind, send_resolved=r.send_resolved) for r in found]


def message_visible(scope: Scope, message: Any) -> bool:
    """A stored message may be shown when every alert in it is of a namespace in `scope` (a group may mix
    namespaces; one of another team's would show its job)."""
    if scope is None:
        return True
    alerts = message.get("alerts") if isinstance(message, dict) else None
    return isinstance(alerts, list) and bool(alerts) and all(
        isinstance(a, dict) and visible(scope, a.get("namespace")) for a in alerts)


def silence_visible(scope: Scope, matchers: Iterable[str]) -> bool:
    """A silence may be shown when one of its matchers pins `namespace` to a namespace in `scope` (it then
    mutes that namespace's alerts only); one over every namespace only to a cluster-wide caller."""
    if scope is None:
        return True
    for text in matchers:
        try:
            matcher = parse_matcher(text)
        except ValueError:
            continue
        if matcher.name == "namespace" and matcher.op == "=" and visible(scope, matcher.value):
            return True
    return False


def _silence_out(row: Silence, now: datetime) -> SilenceOut:
    out = SilenceOut.model_validate(row)
    out.active = row.starts_at <= now < row.ends_at
    return out
