"""A stored alert in the words of a message: its pods' termination reasons and, where the watchdog
has one, the right-sized request to use instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from volcano_monitor.watchdog.actions.notify.message import AlertItem, rfc3339
from volcano_monitor.watchdog.findings.detectors.fleet import CLUSTER_STALE
from volcano_monitor.watchdog.findings.recommendations.book import Recommendation
from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.state.signals import (
    GPU_STRANDED,
    JOB_FAILED,
    JOB_IDLE,
    NODE_HOT,
    OVER_REQUESTED,
    POD_OOM_KILLED,
    POD_REJECTED,
)

__all__ = ["alert_item", "cluster_about", "cluster_stale", "format_bytes", "reasons", "recommendation_text"]

MAX_REASONS = 10

# (namespace, workload, task, container) -> recommendations; the worker's HistogramBook behind it.
Recommender = Callable[[str, str, str, str], list[Recommendation]]


def format_bytes(value: float) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


def reasons(kind: str, subject: str, details: dict[str, Any]) -> tuple[str, ...]:
    """"pod/container: OOMKilled (exit 137)" lines from an alert's details."""
    out: list[str] = []
    if kind == JOB_FAILED:
        for term in details.get("pod_terminations") or ():
            if isinstance(term, dict):
                exit_code = term.get("exit_code")
                out.append(f"{term.get('pod', '?')}/{term.get('container', '?')}: {term.get('reason', 'Error')}"
                           + (f" (exit {exit_code})" if exit_code is not None else ""))
    elif kind == POD_OOM_KILLED:
        exit_code = details.get("exit_code")
        out.append(f"{subject}/{details.get('container', '?')}: OOMKilled"
                   + (f" (exit {exit_code})" if exit_code is not None else ""))
    elif kind == POD_REJECTED and details.get("reason"):
        out.append(f"{subject}: {details['reason']} on {details.get('node') or '?'}")
    elif kind in (GPU_STRANDED, NODE_HOT):  # the pods on the node, as the detector lists them
        out.extend(str(p["text"]) for p in details.get("pods") or () if isinstance(p, dict) and p.get("text"))
    if len(out) > MAX_REASONS:
        out = [*out[:MAX_REASONS], f"... and {len(out) - MAX_REASONS} more"]
    return tuple(out)


def recommendation_text(recs: list[Recommendation]) -> str:
    parts = [f"{r.task or '-'}/{r.container}: cpu {r.cpu_target_cores:.3g} cores, memory "
             f"{format_bytes(r.memory_target_bytes)}" for r in recs[:5]]
    return "; ".join(parts)


def _recommendations(row: Alert, details: dict[str, Any], recommender: Recommender | None,
                     workload_of: Callable[[str, str], tuple[str, str]] | None) -> str:
    if recommender is None:
        return ""
    if row.kind == POD_OOM_KILLED and workload_of is not None:
        workload, task = workload_of(row.namespace, row.subject)
        if workload:
            return recommendation_text(recommender(row.namespace, workload, task, str(details.get("container", ""))))
    if row.kind in (JOB_IDLE, OVER_REQUESTED) and details.get("workload"):
        return recommendation_text(recommender(row.namespace, str(details["workload"]), "", ""))
    return ""


def alert_item(row: Alert, status: str, *, api_url: str | None = None, recommender: Recommender | None = None,
               workload_of: Callable[[str, str], tuple[str, str]] | None = None) -> AlertItem:
    """The message's view of a stored watchdog alert."""
    details = row.details if isinstance(row.details, dict) else {}
    return AlertItem(
        kind=row.kind, severity=row.severity, status=status, summary=row.summary, namespace=row.namespace,
        queue=row.queue, job_name=row.job_name, subject=row.subject,
        reasons=reasons(row.kind, row.subject, details),
        recommendation=_recommendations(row, details, recommender, workload_of),
        started_at=rfc3339(row.fired_at or row.started_at), resolved_at=rfc3339(row.resolved_at),
        source="watchdog", fingerprint=row.fingerprint,
        # the UI's page of it, in its cluster (any cluster's UI shows it: ids are database-wide)
        url=f"{api_url.rstrip('/')}/ui/alerts/{row.id}" + (f"?cluster={quote(row.cluster, safe='')}" if row.cluster
                                                             else "") if api_url else "",
    )


def cluster_about(own: str, items: tuple[AlertItem, ...]) -> str:
    """The one cluster a message's alerts are about, for its Grafana link ("" when they are about several:
    the dashboards then show every cluster). Each alert is about its group's cluster, except ClusterStale
    (about the silent cluster, its subject: is that cluster's exporter still up?) and an Alertmanager alert
    with a `cluster` label (one Alertmanager may post a whole fleet's alerts to one watchdog)."""
    clusters = {a.subject if cluster_stale(a) else a.labels.get("cluster") or own for a in items}
    return clusters.pop() if len(clusters) == 1 else "" if clusters else own


def cluster_stale(item: AlertItem) -> bool:
    """The watchdog's own ClusterStale (an Alertmanager rule may be named so too: its subject is no cluster)."""
    return item.kind == CLUSTER_STALE and item.source == "watchdog"
