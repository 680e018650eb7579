"""The UI's fleet page (`/ui/fleet`, and `/` once the database holds more than one cluster) and the helpers
every list page uses to honour `?cluster=` and show a cluster column.

Per cluster: its jobs running and waiting (the ledger's live runs, as the queue page counts them), its firing
alerts, its waste over the last 7 days (hours requested but not used, never below zero per run, over the
runs the report counts in that period: watchdog.views.report.compute) and its last heartbeat, with its age
and "stale" past `cluster.stale_after_seconds` (the age at which the other clusters' leaders raise
ClusterStale). Each number links to that cluster's page of it. With auth.mode kubernetes only the caller's
namespaces are counted; a heartbeat names no namespace, so every reader sees it.

Clusters are those with a heartbeat, and the serving watchdog's own (`views.clusters.known_clusters`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.reviews import Scope
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.db.scope import fleet
from volcano_monitor.watchdog.state.fleet import heartbeats
from volcano_monitor.watchdog.views.clusters import Clusters, known_clusters, parse_clusters
from volcano_monitor.watchdog.views.report.compute import GIB, HOUR, in_period
from volcano_monitor.watchdog.views.ui.forms import error_page
from volcano_monitor.watchdog.views.ui.html import cores, esc, link, qs, table, when

WASTE_DAYS = 7
WAITING = ("Pending", "Inqueue")
WAITING_PHASES = ",".join(WAITING)  # the jobs page's phase filter for them


def asked_clusters(request: Request) -> Clusters | Response:
    """`?cluster=a&cluster=b` or `?cluster=a,b` of a list page (None: every cluster), or the 422 page."""
    try:
        return parse_clusters(request.query_params.getlist("cluster"))
    except ValueError as exc:
        return error_page(422, exc)


def joined(clusters: Clusters) -> str:
    """The clusters as one `cluster=` value for links ("" when every cluster)."""
    return ",".join(clusters) if clusters else ""


def cluster_link(name: str) -> str:
    return link(qs("/ui/fleet", cluster=name), name)


def _only(column: Any, scope: Scope) -> list[Any]:
    return [column.in_(scope)] if scope is not None else []


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def fleet_body(session: Session, now: datetime, stale_after_seconds: float, scope: Scope,
               clusters: Clusters = None) -> str:
    """The fleet table (HTML), one row per cluster (`clusters`: only those)."""
    names = [c for c in known_clusters(session) if clusters is None or c in clusters]
    live: dict[str, list[int]] = {}
    for cluster, phase, count in session.execute(fleet(select(JobRun.cluster, JobRun.phase, func.count()).where(
            JobRun.phase.in_((*WAITING, "Running")), JobRun.finished_at.is_(None), JobRun.deleted_at.is_(None),
            *_only(JobRun.namespace, scope)).group_by(JobRun.cluster, JobRun.phase), clusters)):
        live.setdefault(cluster, [0, 0])[0 if phase == "Running" else 1] += count
    firing = dict(session.execute(fleet(select(Alert.cluster, func.count()).where(
        Alert.state == "firing", *_only(Alert.namespace, scope)).group_by(Alert.cluster), clusters)).all())
    since = now - timedelta(days=WASTE_DAYS)

    def wasted(requested: Any, used: Any) -> Any:
        return func.sum(case((requested > used, requested - used), else_=0.0))

    waste = {row[0]: row[1:] for row in session.execute(fleet(select(
        JobRun.cluster, wasted(JobRun.cpu_core_seconds_requested, JobRun.cpu_core_seconds_used),
        wasted(JobRun.memory_byte_seconds_requested, JobRun.memory_byte_seconds_used),
        wasted(JobRun.gpu_seconds_requested, JobRun.gpu_seconds_used)).where(
        in_period(since, now), *_only(JobRun.namespace, scope)).group_by(JobRun.cluster), clusters))}
    beats = {h.cluster: h for h in heartbeats(session)}
    rows = []
    for name in names:
        running, waiting = live.get(name, [0, 0])
        cpu, memory, gpu = (float(v or 0.0) for v in waste.get(name, (0.0, 0.0, 0.0)))
        beat = beats.get(name)
        if beat is None:
            seen = '<span class="muted">no heartbeat</span>'
        else:
            age = max(0.0, (now - beat.seen_at).total_seconds())
            seen = f"{when(beat.seen_at)} ({esc(_age(age))} ago)" + (
                ' <span class="critical">stale</span>' if age > stale_after_seconds else "")
        report = qs("/api/v1/reports", by="queue", cluster=name, since=f"{WASTE_DAYS}d", format="html")
        rows.append([esc(name), link(qs("/ui/jobs", cluster=name, phase="Running"), running),
                     link(qs("/ui/jobs", cluster=name, phase=WAITING_PHASES), waiting),
                     link(qs("/ui/alerts", cluster=name, state="firing"), firing.get(name, 0)),
                     cores(cpu / HOUR), cores(memory / HOUR / GIB), cores(gpu / HOUR), seen,
                     link(qs("/ui/queues", cluster=name), "queues") + " · " + link(report, "report")])
    by_cluster = link(qs("/api/v1/reports", by="cluster", format="html", since=f"{WASTE_DAYS}d"), "report by cluster")
    head = (f"<p>Each cluster sharing this database. Waste: hours requested but not used over the last {WASTE_DAYS} "
            f"days ({by_cluster}); a heartbeat older than cluster.stale_after_seconds is stale.</p>")
    return head + table(("cluster", "jobs running", "jobs waiting", "firing alerts", "wasted core-h",
                         "wasted GiB-h", "wasted GPU-h", "last heartbeat", ""), rows, frozenset({1, 2, 3, 4, 5, 6}))
