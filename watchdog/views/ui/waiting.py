"""The job page's lines about a waiting job: its place in its queue (`core.queueorder`, through
`ClusterIndex.why`) and its expected start (`findings.expected`). Apart from `pages.py` so that module
stays one page of routes."""

from __future__ import annotations

from datetime import UTC, datetime

from volcano_monitor.core.pending import amount_text
from volcano_monitor.watchdog.findings.estimates import Estimate
from volcano_monitor.watchdog.state.cluster import QueuePlace
from volcano_monitor.watchdog.views.ui.html import esc, link, qs


def place_line(place: QueuePlace | None) -> str:
    """"Position 2 of 4 in queue narrow", and the jobs ahead with their priority and gang request."""
    if place is None:
        return ""
    ahead = [f"{esc(a.namespace)}/{esc(a.job_name)} (priority {a.priority}: "
             + esc(", ".join(f"{name} {amount_text(name, amount)}" for name, amount in a.min_resources
                             if name != "pods")) + ")" for a in place.ahead]
    more = place.position - 1 - len(place.ahead)
    if more > 0:
        ahead.append(f"{more} more")
    return (f'<p class="place">Position {place.position} of {place.waiting} in queue '
            f'{link(qs("/ui/jobs", queue=place.queue), place.queue)}'
            + (f"; ahead: {'; '.join(ahead)}" if ahead else "") + "</p>")


def expected_line(est: Estimate | None) -> str:
    """"Expected to start 2026-12-01 10:15 UTC (10:05 to 10:40), when research/llama-pretrain ends", or why
    there is no estimate."""
    if est is None:
        return ""
    if est.start is None:
        return f'<p class="expected">No expected start: {esc(est.waits_for)}</p>'

    def at(seconds: float | None) -> str:
        return "?" if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<p class="expected">Expected to start {at(est.start)} ({at(est.low)} to {at(est.high)}), '
            f"{esc(est.waits_for)}</p>")


