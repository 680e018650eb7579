"""The job page's lines about a waiting job: its place in its queue (`core.queueorder`, through
`ClusterIndex.why`) and its expected start (`findings.expected`). Apart from `pages.py` so that module
stays one page of routes. A namespace-scoped reader (auth.mode kubernetes) is not shown other namespaces'
job names: those ahead are counted ("3 jobs of other namespaces, requesting ..."), and "when ns/job ends" of
another namespace reads "when a job of another namespace ends" (`findings.redact`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from volcano_monitor.core.kube.reviews import Scope
from volcano_monitor.core.pending import amount_text
from volcano_monitor.watchdog.findings.estimates import Estimate
from volcano_monitor.watchdog.findings.redact import fold_ahead, redact_text
from volcano_monitor.watchdog.state.cluster import QueuePlace
from volcano_monitor.watchdog.views.ui.html import esc, link, qs


def _amounts(resources: Iterable[tuple[str, float]]) -> str:
    return esc(", ".join(f"{name} {amount_text(name, amount)}" for name, amount in resources if name != "pods"))


def place_line(place: QueuePlace | None, scope: Scope = None) -> str:
    """"Position 2 of 4 in queue narrow", and the jobs ahead with their priority and gang request; those of
    namespaces outside `scope` (None: every namespace) only counted, with their summed request."""
    if place is None:
        return ""
    folded = fold_ahead(place.ahead, scope)
    ahead = [f"{esc(a.namespace)}/{esc(a.job_name)} (priority {a.priority}: {_amounts(a.min_resources)})"
             for a in folded.shown]
    if folded.others:
        ahead.append(f"{folded.others} job{'s' if folded.others > 1 else ''} of other namespaces (requesting "
                     f"{_amounts(sorted(folded.others_requests.items()))})")
    more = place.position - 1 - len(place.ahead)
    if more > 0:
        ahead.append(f"{more} more")
    return (f'<p class="place">Position {place.position} of {place.waiting} in queue '
            f'{link(qs("/ui/jobs", queue=place.queue), place.queue)}'
            + (f"; ahead: {'; '.join(ahead)}" if ahead else "") + "</p>")


def expected_line(est: Estimate | None, scope: Scope = None) -> str:
    """"Expected to start 2026-12-01 10:15 UTC (10:05 to 10:40), when research/llama-pretrain ends", or why
    there is no estimate; a job outside `scope` is not named."""
    if est is None:
        return ""
    waits_for = redact_text(est.waits_for, scope)
    if est.start is None:
        return f'<p class="expected">No expected start: {esc(waits_for)}</p>'

    def at(seconds: float | None) -> str:
        return "?" if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<p class="expected">Expected to start {at(est.start)} ({at(est.low)} to {at(est.high)}), '
            f"{esc(waits_for)}</p>")


