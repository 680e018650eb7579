"""`GET /api/v1/reports`: the report `volcano-watchdog report` prints, served by every replica, in any
of its formats. Digest messages link here with the exact period (`since` and `until` as times).

Public like `/api/v1/jobs` (with `auth.mode: kubernetes`, the caller's namespaces only): it names queues,
namespaces and jobs and their hours, nothing of the jobs' data. Mounted by `watchdog.views.api.create_app`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.reviews import Scope, every_namespace
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.views.clusters import Clusters, cluster_filter
from volcano_monitor.watchdog.views.report.compute import GroupBy, compute_report, parse_moment
from volcano_monitor.watchdog.views.report.render import render

MEDIA_TYPES = {"json": "application/json", "csv": "text/csv; charset=utf-8", "html": "text/html; charset=utf-8",
               "md": "text/markdown; charset=utf-8", "table": "text/plain; charset=utf-8",
               "focus": "text/csv; charset=utf-8"}
Moment = Annotated[str, Query(max_length=64, pattern=r"^[0-9A-Za-z:.+-]+$",
                              description="A duration before now (`7d`, `36h`) or an ISO 8601 time.")]


def _session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


def invalid(name: str, value: str | None, reason: str) -> RequestValidationError:
    """A moment that does not parse, answered as FastAPI answers a parameter that fails validation: the
    422 the schema declares (`HTTPValidationError`), naming the parameter. A bare `detail` string broke it."""
    return RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": reason, "input": value}])


def report_router(clock: Callable[[], datetime] = lambda: datetime.now(UTC), costs: Costs | None = None,
                  scope: Callable[..., Scope] = every_namespace) -> APIRouter:
    """The reports endpoint; `costs`: the prices (`costs:` settings) its cost columns are at; `scope`: the
    namespaces the caller may see (auth.mode kubernetes), whose runs and alerts alone are counted."""
    router = APIRouter(tags=["reports"])
    scoped = Depends(scope)

    @router.get("/api/v1/reports", response_class=Response,
                responses={200: {"content": {t: {} for t in MEDIA_TYPES.values()},
                                 "description": "The report in the format asked for."}})
    def report(session: Annotated[Session, Depends(_session)],
               clusters: Annotated[Clusters, Depends(cluster_filter)], allowed: Scope = scoped,
               since: Moment = "7d", until: Moment | None = None, by: GroupBy = "queue",
               format: Literal["json", "csv", "html", "md", "table", "focus"] = "json",
               top: Annotated[int, Query(ge=0, le=100)] = 10) -> Response:
        """Requested vs used core-, GiB- and GPU-hours, their cost (requested, used, idle), waste, top wasters,
        failures, alerts and wait/run time percentiles per queue (a parent includes its children), namespace or
        workload, or per cluster, over [since, until) (until: now); `focus`: the runs' costs as FinOps FOCUS CSV.
        Every cluster's runs unless `cluster` narrows them (a queue, namespace or workload of one name in
        two clusters is one group)."""
        now = clock()
        try:
            end = parse_moment(until, now) if until else now
        except ValueError as exc:
            raise invalid("until", until, str(exc)) from None
        try:
            start = parse_moment(since, end)
        except ValueError as exc:
            raise invalid("since", since, str(exc)) from None
        if start >= end:
            raise invalid("since", since, "since must be before until")
        found = compute_report(session, start, end, by, top, costs, allowed, clusters)
        return Response(render(found, format), media_type=MEDIA_TYPES[format])

    return router
