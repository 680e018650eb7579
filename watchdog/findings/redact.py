"""What a namespace-scoped reader (auth.mode kubernetes) is shown of other namespaces' jobs.

A waiting job's place in its queue and its expected start are computed over the whole queue, so they
name jobs of any namespace: the jobs ahead of it, and the job whose end it waits for ("when
research/llama-pretrain ends", in `waits_for` and in the summary and details of GangUnschedulable and
QueueStarved alerts). A team that may list only its own namespaces must not learn another team's job
names from them, yet the numbers stay useful: the jobs ahead of another namespace are folded into a
count with their summed request, and a waits_for naming another namespace's job becomes a neutral phrase.

Redaction happens when a reader is served, never when the text is made: the stored alert, the outbox
message and the estimate keep the names (a cluster-wide reader, and today's `auth.mode: token`, whose
scope is None, see them unchanged). Here in `findings` so that the API route of `findings.why`, the
alert routes and the UI (views) share one rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from volcano_monitor.core.kube.reviews import Scope, visible
from volcano_monitor.core.model import res_dict
from volcano_monitor.watchdog.state.cluster import Ahead

__all__ = ["OTHER_JOB", "FoldedAhead", "fold_ahead", "redact_text", "redact_value", "when_ends"]

OTHER_JOB = "when a job of another namespace ends"
# "when <namespace>/<name> ends", as `when_ends` writes it for findings.estimates; names are DNS labels /
# subdomains. One writer and one reader of the phrase, so a new wording cannot silently stop the redaction.
_WHEN_ENDS = re.compile(r"when (?P<namespace>[a-z0-9][-a-z0-9]*)/(?P<name>[a-z0-9][-a-z0-9.]*) ends")

T = TypeVar("T")


def when_ends(job: str) -> str:
    """The expected start of a job that waits for `job` ("namespace/name") to end: `redact_text` reads it."""
    return f"when {job} ends"


def redact_text(text: str, scope: Scope) -> str:
    """`text` with each "when ns/name ends" of a namespace outside `scope` replaced by OTHER_JOB."""
    if scope is None or "when " not in text:
        return text
    return _WHEN_ENDS.sub(lambda m: m.group(0) if visible(scope, m.group("namespace")) else OTHER_JOB, text)


def redact_value(value: T, scope: Scope) -> T:
    """A copy of a JSON-like value (an alert's details, an outbox message) with every string redacted as
    `redact_text`; the value itself when the scope is cluster-wide."""
    if scope is None:
        return value
    if isinstance(value, str):
        return redact_text(value, scope)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: redact_value(v, scope) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list | tuple):
        return type(value)(redact_value(v, scope) for v in value)
    return value


@dataclass(slots=True)
class FoldedAhead:
    """The jobs ahead as a scoped reader sees them: those of its namespaces by name, the others counted."""

    shown: list[Ahead]
    others: int = 0  # jobs ahead of namespaces outside the scope (among those listed)
    others_requests: dict[str, float] = field(default_factory=dict)  # their summed gang requests (base units)


def fold_ahead(ahead: Iterable[Ahead], scope: Scope) -> FoldedAhead:
    """Split `ahead` by `scope`; with scope None every job is shown, as before."""
    folded = FoldedAhead(shown=[])
    for a in ahead:
        if visible(scope, a.namespace):
            folded.shown.append(a)
            continue
        folded.others += 1
        for name, amount in res_dict(a.min_resources).items():
            folded.others_requests[name] = folded.others_requests.get(name, 0.0) + amount
    return folded
