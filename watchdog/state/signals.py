"""What every detector hands to the alert book: a `Signal` ("this condition holds / no longer holds"),
identified by a stable `fingerprint`.

Detectors never write to the database and never decide about pending/firing/resolved: they state
facts, and `watchdog.state.alerts.AlertBook` turns the stream of facts into alert episodes. That split is
what makes replays harmless: after a restart the informers relist everything, the detectors say the
same things again, and the book (which loaded the unresolved alerts from the database) recognises
them by fingerprint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "BUDGET_EXCEEDED",
    "BUDGET_FORECAST",
    "GANG_UNSCHEDULABLE",
    "GPU_STRANDED",
    "JOB_FAILED",
    "JOB_IDLE",
    "JOB_RETRYING",
    "NODE_HOT",
    "ONCE_PER_RUN_KINDS",
    "OVER_REQUESTED",
    "PARTIAL_GANG",
    "POD_OOM_KILLED",
    "POD_REJECTED",
    "QUEUE_STARVED",
    "RETRY_EXHAUSTED",
    "SEVERITIES",
    "Signal",
    "fingerprint",
]

JOB_FAILED = "JobFailed"
POD_REJECTED = "PodRejected"
POD_OOM_KILLED = "PodOOMKilled"
JOB_RETRYING = "JobRetrying"
RETRY_EXHAUSTED = "RetryExhausted"
GANG_UNSCHEDULABLE = "GangUnschedulable"
PARTIAL_GANG = "PartialGang"
JOB_IDLE = "JobIdle"
OVER_REQUESTED = "OverRequested"
QUEUE_STARVED = "QueueStarved"
GPU_STRANDED = "GpuStranded"  # periodic, per node: watchdog.findings.detectors.stranded
NODE_HOT = "NodeHot"  # periodic, per node: watchdog.findings.detectors.hot
BUDGET_FORECAST = "BudgetForecast"  # periodic, per queue and period: watchdog.findings.detectors.budget
BUDGET_EXCEEDED = "BudgetExceeded"

SEVERITIES = ("critical", "warning", "info")

# Kinds whose fingerprint names one run of something (a Job UID, a Pod UID): such an alert happens
# at most once, ever. Once it resolved, the same fingerprint never opens a new episode, so replaying
# old watch events (a relist after a restart, a Failed job that is still around) cannot fire it
# again. The other kinds (gang, idle, queue) describe conditions that can come and go during one run:
# each time they come back is a new episode with the same fingerprint.
ONCE_PER_RUN_KINDS = frozenset({JOB_FAILED, RETRY_EXHAUSTED, JOB_RETRYING, POD_REJECTED, POD_OOM_KILLED,
                                OVER_REQUESTED})


@dataclass(frozen=True)
class Signal:
    """A detector's statement that a condition holds (`active`) or no longer holds.

    `for_seconds`: how long the condition must hold before the alert fires (0: at once); the alert
    book measures it from the episode's start, which it keeps in the database so that a restart
    does not reset the clock. `since`: when the condition began, if the detector knows it from the
    object itself (e.g. a PodGroup condition's lastTransitionTime) — a watchdog started late then
    does not wait the whole `for_seconds` again. Ignored for inactive signals.
    """

    kind: str
    fingerprint: str
    active: bool
    severity: str = "warning"
    namespace: str = ""
    queue: str = ""
    job_name: str = ""
    subject: str = ""
    summary: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    for_seconds: float = 0
    since: datetime | None = None


def fingerprint(kind: str, *parts: str) -> str:
    """A stable identity for an alert: sha256 of the kind and its identifying parts (namespace, name,
    and the UID for per-run kinds), 32 hex characters. The same object gives the same fingerprint in
    every process; a new run of a job (new UID) gives a new one."""
    digest = hashlib.sha256(kind.encode())
    for part in parts:
        digest.update(b"\x1f")
        digest.update(part.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]
