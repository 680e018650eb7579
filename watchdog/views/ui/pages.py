"""The watchdog's web UI: server-rendered pages at `/` and `/ui/...`, readable without JavaScript.

What Goldilocks and krr show for Deployments (current vs recommended requests, the YAML to apply) done
for batch jobs: a run's efficiency over its whole life, its usage against its request over time, the
alerts it raised, and the resources to put in its Volcano Job for the next run. Every list is paginated
and every query uses an index (the ledger, alerts and rollups can hold many thousand rows).

One piece: the routes of the UI, one page each, so the pages' shared rules (tenancy, the read token, clusters)
are read in one place. Many clusters, one database (docs/fleet.md, `watchdog.views.clusters`): the fleet page
(watchdog.views.ui.fleet) comes first, and is `/` once the database holds more than one cluster; the lists
read every cluster unless `?cluster=` narrows them and then show a cluster column; a job run and a queue are
this watchdog's cluster's unless `?cluster=` names another; links carry the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.reviews import Scope, visible
from volcano_monitor.watchdog.actions.capability import store
from volcano_monitor.watchdog.actions.notify.api import STATES, SilenceIn, message_visible, silence_visible
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.recommendations import book as recommend
from volcano_monitor.watchdog.findings.redact import redact_text, redact_value
from volcano_monitor.watchdog.findings.why import Expected, Explain, no_estimate
from volcano_monitor.watchdog.state.db.models import Alert, JobRun, NotificationDelivery, Silence, UsageRollup
from volcano_monitor.watchdog.state.db.scope import cluster_of, fleet
from volcano_monitor.watchdog.state.db.scope import scoped as scoped_engine
from volcano_monitor.watchdog.views.clusters import known_clusters, parse_cluster
from volcano_monitor.watchdog.views.guard import token_guard
from volcano_monitor.watchdog.views.health import QueueView
from volcano_monitor.watchdog.views.resolve import any_alert, store_resolve_request, wait_for_request
from volcano_monitor.watchdog.views.schema import AlertId, queue_usage
from volcano_monitor.watchdog.views.tenancy import Tenancy
from volcano_monitor.watchdog.views.ui.cost import job_cost_line, queue_cost_section
from volcano_monitor.watchdog.views.ui.fleet import WAITING_PHASES, asked_clusters, cluster_link, fleet_body, joined
from volcano_monitor.watchdog.views.ui.forms import FormTokenRoute, error_page, form_of, refused_reader
from volcano_monitor.watchdog.views.ui.html import (
    amount,
    amounts,
    chart,
    cores,
    esc,
    gib,
    link,
    page,
    percent,
    qs,
    table,
    when,
)
from volcano_monitor.watchdog.views.ui.recommendations import section
from volcano_monitor.watchdog.views.ui.waiting import expected_line, place_line

PAGE = 50
Text = Annotated[str, Query(max_length=253, pattern=r"^[^\x00]*$")]
Offset = Annotated[int, Query(ge=0, le=10**9)]
NOTES = {"resolved": "Resolved: one 'resolved' message goes out.", "silenced": "Silence added.",
         "stored": "Stored; the leader carries it out shortly."}


def html(title: str, body: str, note: str = "") -> HTMLResponse:
    return HTMLResponse(page(title, body, NOTES.get(note, "")))


def pager(path: str, total: int, offset: int, **params: object) -> str:
    parts = [f'<nav class="pages">{offset + 1 if total else 0}&ndash;{min(total, offset + PAGE)} of {total} ']
    if offset > 0:
        parts.append(link(qs(path, **params, offset=max(0, offset - PAGE) or None), "« newer"))
    if offset + PAGE < total:
        parts.append(link(qs(path, **params, offset=offset + PAGE), "older »"))
    return "".join(parts) + "</nav>"


def _ratio(used: float, requested: float) -> float | None:
    return used / requested if requested > 0 else None


def alert_rows(rows: list[Alert], scope: Scope = None, clusters: bool = False) -> list[list[str]]:
    """`scope`: the reader's namespaces; a summary naming another namespace's job is redacted. `clusters`:
    a first column naming each alert's cluster."""
    return [[*([cluster_link(a.cluster)] if clusters else []), link(qs(f"/ui/alerts/{a.id}", cluster=a.cluster), a.id),
             f'<span class="{esc(a.state)}">{esc(a.state)}</span>',
             f'<span class="{esc(a.severity)}">{esc(a.severity)}</span>', esc(a.kind),
             link(qs("/ui/jobs", cluster=a.cluster, namespace=a.namespace, name=a.job_name),
                  f"{a.namespace}/{a.job_name}") if a.job_name else esc(a.namespace),
             link(qs("/ui/jobs", cluster=a.cluster, queue=a.queue), a.queue) if a.queue else "",
             esc(redact_text(a.summary, scope)), when(a.fired_at or a.started_at), when(a.resolved_at)] for a in rows]


ALERT_HEADERS = ("#", "state", "severity", "kind", "job", "queue", "summary", "since", "resolved")


def headers(names: tuple[str, ...], clusters: bool) -> tuple[str, ...]:
    return ("cluster", *names) if clusters else names


def ui_router(engine: Engine, settings: Settings, clock: Callable[[], datetime],
              queues: Callable[[], list[QueueView]], require_token: Callable[..., None],
              request_made: Callable[[], None] = lambda: None, wait_seconds: float = 5.0,
              why: Explain = lambda uid: None, expected: Expected = no_estimate,
              tenancy: Tenancy | None = None) -> APIRouter:
    """The UI's routes. `require_token`: the API's write guard (the very function, so the app's check
    finds it on every POST); `request_made`, `wait_seconds`: as for the API's resolve; `why`: a live job's
    place in its queue (`ClusterIndex.why`), on the job page, with `expected`: its expected start; `tenancy`: who
    may read what (auth.mode kubernetes: each page shows the caller's namespaces only, another's job or alert
    is a 404, and the caller's identity replaces the read token)."""
    router = APIRouter(include_in_schema=False)
    writes = APIRouter(include_in_schema=False, route_class=FormTokenRoute, dependencies=[Depends(require_token)])
    tenancy = tenancy or Tenancy(settings.auth)
    reader = token_guard(settings, reading=True) if not tenancy.on else lambda credentials: None
    scoped = Depends(tenancy.scope)  # a default: an Annotated alias here would not resolve (see views.api)

    def only(column: Any, allowed: Scope) -> list[Any]:
        return [column.in_(allowed)] if allowed is not None else []

    def session() -> Session:
        return Session(engine)

    def many(s: Session) -> bool:
        return len(known_clusters(s)) > 1

    @router.get("/", response_class=HTMLResponse)
    def home(request: Request, allowed: Scope = scoped, cluster: Text = "") -> Response:
        """The fleet page when the database holds more than one cluster, else this cluster's queues."""
        with session() as s:
            fleet_wide = many(s)
        return fleet_page(request, allowed) if fleet_wide and not cluster else queue_page(allowed, cluster)

    @router.get("/ui/fleet", response_class=HTMLResponse)
    def fleet_page(request: Request, allowed: Scope = scoped) -> Response:
        """Per cluster: jobs running and waiting, firing alerts, waste, last heartbeat."""
        if not isinstance(clusters := asked_clusters(request), tuple | None):
            return clusters
        with session() as s:
            body = fleet_body(s, clock(), settings.cluster.stale_after_seconds, allowed, clusters)
        return html("Fleet", body)

    @router.get("/ui/queues", response_class=HTMLResponse)
    def queue_page(allowed: Scope = scoped, cluster: Text = "") -> Response:
        """The queue tree (spec.parent) with capability, deserved, allocated, use, and the ledger's live jobs,
        of `cluster` (default: this watchdog's; another's queues are those its rollups and ledger name)."""
        with session() as s:
            try:
                theirs = parse_cluster(cluster, cluster_of(s))
            except ValueError as exc:
                return error_page(422, exc)
            own = (theirs,)
            views = {v.name: v for v in queues()} if theirs == cluster_of(s) else {}
            _, seconds, usage = queue_usage(s, clock(), allowed, theirs)
            firing = dict(s.execute(fleet(select(Alert.queue, func.count()).where(
                Alert.state == "firing", *only(Alert.namespace, allowed)).group_by(Alert.queue), own)).all())
            # Jobs by phase from the ledger: Volcano's Queue status no longer counts them (v1.12 has
            # allocated, reservation and state only).
            live = s.execute(fleet(select(JobRun.queue, JobRun.phase, func.count()).where(
                JobRun.phase.in_(("Pending", "Inqueue", "Running")), JobRun.finished_at.is_(None),
                JobRun.deleted_at.is_(None), *only(JobRun.namespace, allowed))
                .group_by(JobRun.queue, JobRun.phase), own)).all()
            multi = many(s)
        for name in (set(usage) | {q for q, _, _ in live}) - set(views) - {""}:  # known from its rows only
            views[name] = QueueView(name=name, parent="", capability={}, allocated={}, state="Unknown")
        shown = theirs if multi else ""
        waiting: dict[str, int] = {}
        running: dict[str, int] = {}
        for queue_name, phase, count in live:
            counts = running if phase == "Running" else waiting
            counts[queue_name] = counts.get(queue_name, 0) + count
        children: dict[str, list[str]] = {}
        for view in views.values():
            parent = view.parent if view.parent in views and view.parent != view.name else ""
            children.setdefault(parent, []).append(view.name)
        rows: list[list[str]] = []

        def walk(parent: str, depth: int, seen: frozenset[str]) -> None:
            for name in sorted(children.get(parent, ())):
                if name in seen:
                    continue
                v, used = views[name], usage.get(name)
                rows.append(["&nbsp;&nbsp;&nbsp;" * depth + link(qs(f"/ui/queues/{name}", cluster=shown), name),
                             esc(v.state),
                             amounts(v.capability), amounts(v.deserved), amounts(v.allocated),
                             (f"cpu: {cores(used.cpu_cores)}, memory: {gib(used.memory_bytes)}" if used else ""),
                             percent(_ratio(used.cpu_cores, v.capability.get("cpu", 0.0)) if used else None),
                             link(qs("/ui/jobs", cluster=shown, queue=name, phase=WAITING_PHASES),
                                  waiting.get(name, 0)),
                             link(qs("/ui/jobs", cluster=shown, queue=name, phase="Running"), running.get(name, 0)),
                             link(qs("/ui/alerts", cluster=shown, state="firing", queue=name), firing.get(name, 0)),
                             link(qs("/ui/jobs", cluster=shown, queue=name), "jobs")])
                walk(name, depth + 1, seen | {name})

        walk("", 0, frozenset())
        body = table(("queue", "state", "capability", "deserved", "allocated",
                      f"used ({seconds or '&ndash;'} s bucket)", "cpu used of capability", "jobs waiting", "running",
                      "firing alerts", ""), rows, frozenset({7, 8, 9}))
        total_firing = sum(firing.values())
        head = f'<p>{link(qs("/ui/alerts", cluster=shown, state="firing"), f"{total_firing} firing alerts")}</p>'
        return html(f"Queues of {theirs}" if multi else "Queues", head + body)

    @router.get("/ui/queues/{name}", response_class=HTMLResponse)
    def capability_page(request: Request, name: Annotated[str, Path(max_length=253, pattern=r"^[^\x00/]+$")],
                        offset: Offset = 0, allowed: Scope = scoped, cluster: Text = "") -> Response:
        """The queue's cost this week and month, the capability policy's latest plan for it and its change
        history (read token); of `cluster` (default: this watchdog's)."""
        if (refused := refused_reader(request, reader)) is not None:
            return refused
        with session() as mine:
            try:
                theirs = parse_cluster(cluster, cluster_of(mine))
            except ValueError as exc:
                return error_page(422, exc)
            own = theirs == cluster_of(mine)
        with Session(scoped_engine(engine, theirs)) as s:
            # A queue's plan is the platform team's: shown to callers that may list jobs everywhere.
            plan = store.get_plan(s, name) if allowed is None else None
            total, changes = store.history(s, name, PAGE, offset) if allowed is None else (0, [])
            cost = queue_cost_section(s, settings.costs, name, clock(), allowed)
        if plan is None and total == 0 and not (own and name in {v.name for v in queues()}) and not cost:
            return error_page(404, "no such queue")
        body = cost + "<h2>Plan</h2>"
        if plan is None:
            body += '<p class="muted">no capability plan (the capability policy is off or has not run)</p>'
        else:
            body += (f"<p>policy {esc(plan.policy)}, mode {esc(plan.mode)}, outcome {esc(plan.outcome)}, "
                     f"planned {when(plan.planned_at)} by {esc(plan.identity)}</p>")
            body += table(("resource", "current", "target", "planned", "allocated", "why"), [
                [esc(r), *(amount(r, p.get(k)) for k in ("current", "target", "planned", "allocated")),
                 esc(p.get("why"))] for r, p in sorted(plan.resources.items()) if isinstance(p, dict)])
        body += "<h2>History</h2>" + table(("when", "policy", "mode", "outcome", "before", "after", "why"), [
            [when(c.created_at), esc(c.policy), esc(c.mode), esc(c.outcome), _amounts(c.before), _amounts(c.after),
             "<br>".join(f"{esc(k)}: {esc(v)}" for k, v in sorted(c.why.items()))] for c in changes]) + pager(
            f"/ui/queues/{name}", total, offset, cluster=cluster)
        return html(f"Queue {name}" if own else f"Queue {name} of {theirs}", body)

    @router.get("/ui/jobs", response_class=HTMLResponse)
    def jobs_page(request: Request, allowed: Scope = scoped, queue: Text = "", namespace: Text = "", phase: Text = "",
                  name: Text = "", workload: Text = "", offset: Offset = 0) -> Response:
        """The ledger, newest first, with each run's efficiency (used / requested resource-seconds)."""
        if not isinstance(clusters := asked_clusters(request), tuple | None):
            return clusters
        where = [c == v for c, v in ((JobRun.queue, queue), (JobRun.namespace, namespace), (JobRun.name, name),
                                     (JobRun.workload, workload)) if v]
        if phase:  # a comma list: the fleet and queue pages' waiting jobs are Pending and Inqueue
            where.append(JobRun.phase.in_(phase.split(",")))
        where += only(JobRun.namespace, allowed)
        with session() as s:
            total = s.execute(fleet(select(func.count()).select_from(JobRun).where(*where), clusters)).scalar_one()
            newest = func.coalesce(JobRun.created_at, JobRun.updated_at)
            rows = list(s.scalars(fleet(select(JobRun).where(*where).order_by(newest.desc(), JobRun.id.desc())
                                        .limit(PAGE).offset(offset), clusters)))
            multi = many(s)
        fields = (("cluster", joined(clusters)), ("queue", queue), ("namespace", namespace), ("phase", phase),
                  ("name", name), ("workload", workload))
        form = '<form method="get" action="/ui/jobs">' + "".join(
            f'<label>{esc(k)} <input name="{esc(k)}" value="{esc(v)}" size="14"></label>' for k, v in fields
        ) + '<button type="submit">filter</button></form>'
        body = form + table(headers(("job", "namespace", "queue", "phase", "created", "finished", "cpu", "memory",
                                     "gpus", "cpu efficiency", "memory efficiency", "gpu efficiency"), multi), [
            [*([cluster_link(r.cluster)] if multi else []), link(qs(f"/ui/jobs/{r.uid}", cluster=r.cluster), r.name),
             esc(r.namespace), esc(r.queue), esc(r.phase),
             when(r.created_at), when(r.finished_at), cores(r.requested_cpu_cores), gib(r.requested_memory_bytes),
             cores(r.requested_gpus), percent(_ratio(r.cpu_core_seconds_used, r.cpu_core_seconds_requested)),
             percent(_ratio(r.memory_byte_seconds_used, r.memory_byte_seconds_requested)),
             percent(_ratio(r.gpu_seconds_used, r.gpu_seconds_requested))] for r in rows],
            frozenset({7, 8, 9} if multi else {6, 7, 8}))
        return html("Jobs", body + pager("/ui/jobs", total, offset, cluster=joined(clusters), queue=queue,
                                         namespace=namespace, phase=phase, name=name, workload=workload))

    @router.get("/ui/jobs/{uid}", response_class=HTMLResponse)
    def job_page(uid: Annotated[str, Path(max_length=64, pattern=r"^[^\x00/]+$")], allowed: Scope = scoped,
                 cluster: Text = "") -> Response:
        """One run: its numbers, its alerts, usage vs request over time, the resources to use next time; of
        `cluster` (default: this watchdog's; its session reads that cluster's rows only)."""
        try:
            theirs = parse_cluster(cluster, cluster_of(engine))
        except ValueError as exc:
            return error_page(422, exc)
        with Session(scoped_engine(engine, theirs)) as s:
            run = s.scalars(select(JobRun).where(JobRun.uid == uid)).first()
            if run is None or not visible(allowed, run.namespace):  # another team's: as if it did not exist
                return error_page(404, "no such job run")
            alerts = list(s.scalars(select(Alert).where(Alert.namespace == run.namespace,
                                                        Alert.job_name == run.name)
                                    .order_by(Alert.started_at.desc()).limit(PAGE)))
            r = UsageRollup
            points = s.execute(select(r.bucket_start, func.sum(r.cpu_cores_sum / func.nullif(r.samples, 0)),
                                      func.sum(r.cpu_request_cores),
                                      func.sum(r.memory_bytes_sum / func.nullif(r.samples, 0)),
                                      func.sum(r.memory_request_bytes),
                                      func.sum(r.gpu_util_sum) / func.nullif(func.sum(r.gpu_samples), 0))
                               .where(r.job_uid == uid).group_by(r.bucket_start).order_by(r.bucket_start)
                               .limit(2000)).all()
            recs = recommend.compute_recommendations(s, settings.recommendations, clock(), run.namespace,
                                                     workload=run.workload)
        facts = table(("", ""), [
            ["cluster", cluster_link(run.cluster)],
            ["namespace / queue",
             f"{esc(run.namespace)} / {link(qs('/ui/jobs', cluster=theirs, queue=run.queue), run.queue)}"],
            ["workload (its runs)", link(qs("/ui/jobs", cluster=theirs, namespace=run.namespace, workload=run.workload),
                                         run.workload)],
            ["phase", f"{esc(run.phase)} {esc(run.reason)} {esc(run.message)}"],
            ["created / started / finished", f"{when(run.created_at)} / {when(run.started_at)} / "
                                             f"{when(run.finished_at)}"],
            ["requested", f"cpu {cores(run.requested_cpu_cores)}, memory {gib(run.requested_memory_bytes)}, "
                          f"gpus {cores(run.requested_gpus)}"],
            ["efficiency (used / requested)",
             f"cpu {percent(_ratio(run.cpu_core_seconds_used, run.cpu_core_seconds_requested))} · memory "
             f"{percent(_ratio(run.memory_byte_seconds_used, run.memory_byte_seconds_requested))} · gpu "
             f"{percent(_ratio(run.gpu_seconds_used, run.gpu_seconds_requested))}"],
            ["pods pending / running / succeeded / failed",
             esc(f"{run.pods_pending} / {run.pods_running} / {run.pods_succeeded} / {run.pods_failed}")],
            ["retries", esc(run.retry_count)], ["uid", esc(run.uid)]])
        cpu = [(t, u or 0.0, q or 0.0) for t, u, q, _, _, _ in points]
        mem = [(t, (u or 0.0) / 2**30, (q or 0.0) / 2**30) for t, _, _, u, q, _ in points]
        live = why(uid) if theirs == cluster_of(engine) else None  # the live index is this cluster's
        body = place_line(live.place if live is not None else None, allowed) + (
            expected_line(expected(live.namespace, live.job_name), allowed)
            if live is not None and live.explanation is not None else "") + job_cost_line(run, settings.costs) + facts
        body += "<h2>Usage vs request</h2>" + chart(cpu, "cores", "CPU") + chart(mem, "GiB", "Memory")
        if run.requested_gpus > 0:  # DCGM utilisation, mean over the job's GPU containers, against 100 %
            gpu = [(t, float(g), 100.0) for t, *_, g in points if g is not None]
            body += chart(gpu, "% of the requested GPUs' time", "GPU utilisation")
        body += "<h2>Recommendation</h2>" + section(run.name, run.namespace, run.workload, recs)
        body += "<h2>Alerts</h2>" + table(ALERT_HEADERS, alert_rows(alerts, allowed))
        return html(f"Job {run.namespace}/{run.name}", body)

    @router.get("/ui/alerts", response_class=HTMLResponse)
    def alerts_page(request: Request, allowed: Scope = scoped, state: Text = "", kind: Text = "", namespace: Text = "",
                    queue: Text = "", offset: Offset = 0) -> Response:
        """Alerts, newest first; `state` empty: all of them."""
        if not isinstance(clusters := asked_clusters(request), tuple | None):
            return clusters
        where = [c == v for c, v in ((Alert.state, state), (Alert.kind, kind), (Alert.namespace, namespace),
                                     (Alert.queue, queue)) if v]
        where += only(Alert.namespace, allowed)
        with session() as s:
            total = s.execute(fleet(select(func.count()).select_from(Alert).where(*where), clusters)).scalar_one()
            rows = list(s.scalars(fleet(select(Alert).where(*where).order_by(Alert.started_at.desc(), Alert.id.desc())
                                        .limit(PAGE).offset(offset), clusters)))
            multi = many(s)
        where_to = {"cluster": joined(clusters), "kind": kind, "namespace": namespace, "queue": queue}
        tabs = " · ".join(link(qs("/ui/alerts", state=st, **where_to), st or "all")
                          for st in ("firing", "pending", "resolved", ""))
        return html("Alerts", f"<p>{tabs}</p>" + table(headers(ALERT_HEADERS, multi), alert_rows(rows, allowed, multi))
                    + pager("/ui/alerts", total, offset, state=state, **where_to))

    @router.get("/ui/alerts/{alert_id}", response_class=HTMLResponse)
    def alert_page(alert_id: AlertId, note: Text = "", allowed: Scope = scoped, cluster: Text = "") -> Response:
        """One alert (ids are database-wide: any cluster's; `cluster` is only carried by links), its job, and
        the resolve and silence forms (they need the api_token; both act in the alert's cluster)."""
        with session() as s:
            a = any_alert(s, alert_id)
            if a is None or not visible(allowed, a.namespace):
                return error_page(404, "no such alert")
            run = s.scalars(fleet(select(JobRun).where(JobRun.namespace == a.namespace, JobRun.name == a.job_name)
                                  .order_by(JobRun.id.desc()).limit(1), (a.cluster,))).first() if a.job_name else None
        facts = table(("", ""), [
            ["cluster", cluster_link(a.cluster)],
            ["state", f'<span class="{esc(a.state)}">{esc(a.state)}</span>'], ["kind", esc(a.kind)],
            ["severity", esc(a.severity)], ["summary", esc(redact_text(a.summary, allowed))],
            ["job", link(qs(f"/ui/jobs/{run.uid}", cluster=a.cluster), f"{a.namespace}/{a.job_name}") if run
             else esc(a.job_name)],
            ["queue", link(qs("/ui/jobs", cluster=a.cluster, queue=a.queue), a.queue) if a.queue else ""],
            ["subject", esc(a.subject)],
            ["started / fired / resolved", f"{when(a.started_at)} / {when(a.fired_at)} / {when(a.resolved_at)}"],
            ["details", f"<pre>{esc(json.dumps(redact_value(a.details, allowed), indent=1, default=str))}</pre>"]])
        token = '<input type="password" name="token" placeholder="api_token" autocomplete="off" required>'
        forms = ""
        if a.state != "resolved":
            forms += (f'<h2>Resolve</h2><form method="post" action="/ui/alerts/{a.id}/resolve">{token}'
                      '<button type="submit">resolve</button></form>')
        matcher_text = "\n".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (  # quoted, escaped
            ("alertname", a.kind), ("namespace", a.namespace), ("job_name", a.job_name), ("queue", a.queue)) if v)
        forms += (f'<h2>Silence</h2><form method="post" action="/ui/silences">'
                  f'<input type="hidden" name="back" value="/ui/alerts/{a.id}">'
                  f'<input type="hidden" name="cluster" value="{esc(a.cluster)}">'
                  f'<textarea name="matchers" rows="4" cols="60">{esc(matcher_text)}</textarea><br>'
                  '<label>hours <input name="hours" value="4" size="4"></label> '
                  '<label>by <input name="created_by" size="16"></label> '
                  f'<label>comment <input name="comment" size="30"></label><br>{token}'
                  '<button type="submit">silence</button></form>')
        return html(f"Alert {a.id}: {a.kind}", facts + forms, note)

    @writes.post("/ui/alerts/{alert_id}/resolve")
    def resolve(alert_id: AlertId) -> Response:
        """The API's resolve: a request the leader's worker carries out; waits a little for it."""
        request_id = store_resolve_request(engine, alert_id, clock)
        request_made()
        note = "stored" if wait_for_request(engine, request_id, wait_seconds) is None else "resolved"
        return RedirectResponse(f"/ui/alerts/{alert_id}?note={note}", status_code=303)

    @writes.post("/ui/silences")
    async def add_silence(request: Request) -> Response:
        """The API's silence (matchers one per line, a duration in hours); back to the page it came from."""
        form = form_of(await request.body())
        try:
            hours = float(form.get("hours", "") or "nan")
            if not 0 < hours <= 24 * 365:
                raise ValueError("hours must be between 0 and 8760")
            now = clock()
            body = SilenceIn(matchers=[m.strip() for m in form.get("matchers", "").splitlines() if m.strip()],
                             ends_at=now + timedelta(hours=hours), created_by=form.get("created_by", ""),
                             comment=form.get("comment", ""))
        except (ValueError, ValidationError) as exc:
            reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) and exc.errors() else str(exc)
            return error_page(400, reason)
        try:  # from another cluster's alert: that cluster's silence, which its notifier applies
            theirs = parse_cluster(form.get("cluster", ""), cluster_of(engine))
        except ValueError as exc:
            return error_page(422, exc)
        with Session(engine) as s, s.begin():
            s.add(Silence(cluster=theirs, matchers=body.matchers, starts_at=now, ends_at=body.ends_at,
                          created_by=body.created_by,
                          comment=body.comment, created_at=now, updated_at=now))
        back = form.get("back", "")
        target = back if back.startswith("/ui/") and "//" not in back and "\\" not in back else "/ui/silences"
        return RedirectResponse(f"{target}?note=silenced", status_code=303)

    @router.get("/ui/silences", response_class=HTMLResponse)
    def silences_page(request: Request, allowed: Scope = scoped, note: Text = "") -> Response:
        """Silences, newest first, with who made them (read token)."""
        if (refused := refused_reader(request, reader)) is not None:
            return refused
        if not isinstance(clusters := asked_clusters(request), tuple | None):
            return clusters
        now = clock()
        with session() as s:
            rows = [r for r in s.scalars(fleet(select(Silence).order_by(Silence.id.desc()).limit(200), clusters))
                    if silence_visible(allowed, r.matchers)]
            multi = many(s)
        body = table(headers(("#", "matchers", "starts", "ends", "active", "by", "comment"), multi), [
            [*([cluster_link(r.cluster)] if multi else []), esc(r.id), "<br>".join(esc(m) for m in r.matchers),
             when(r.starts_at), when(r.ends_at),
             "yes" if r.starts_at <= now < r.ends_at else "no", esc(r.created_by), esc(r.comment)] for r in rows])
        return html("Silences", body, note)

    @router.get("/ui/notifications", response_class=HTMLResponse)
    def notifications_page(request: Request, allowed: Scope = scoped, state: Text = "") -> Response:
        """The outbox, newest first; `state=dead`: the dead letters (read token)."""
        if (refused := refused_reader(request, reader)) is not None:
            return refused
        if not isinstance(clusters := asked_clusters(request), tuple | None):
            return clusters
        with session() as s:
            query = select(NotificationDelivery).order_by(NotificationDelivery.id.desc()).limit(PAGE)
            if state:
                query = query.where(NotificationDelivery.state == state)
            rows = [r for r in s.scalars(fleet(query, clusters)) if message_visible(allowed, r.message)]
            multi = many(s)
        tabs = " · ".join(link(qs("/ui/notifications", cluster=joined(clusters), state=st), st or "all")
                          for st in (*STATES, ""))
        body = f"<p>{tabs}</p>" + table(headers(("#", "receiver", "state", "attempts", "created", "sent", "title",
                                                 "error"), multi), [
            [*([cluster_link(r.cluster)] if multi else []), esc(r.id), esc(r.receiver), esc(r.state),
             esc(r.attempts), when(r.created_at), when(r.sent_at),
             esc(redact_text(_title(r.message), allowed)), esc(r.last_error)] for r in rows])
        return html("Notifications", body)

    router.include_router(writes)
    return router


def _amounts(values: Any) -> str:
    """A stored resource map (None: no capability), shown as the queue page shows amounts."""
    if not isinstance(values, dict):
        return ""
    return ", ".join(f"{esc(k)}: {amount(str(k), v)}" for k, v in sorted(values.items()))


def _title(message: Any) -> str:
    """The message's title, from the stored JSON (a malformed one shows as empty)."""
    from volcano_monitor.watchdog.actions.notify.message import Message

    try:
        return Message.from_dict(message).title
    except (KeyError, TypeError, ValueError, AttributeError):
        return ""
