"""`GET /api/v1/jobs/{uid}/why`: why a live job is not running, from the watchdog's informer state.

The explanation is `core.pending`'s, the same the exporter puts on `volcano_job_pending_reason`,
computed on request from `ClusterIndex` (the Jobs, PodGroups and Queues the worker has observed): a
request costs one explanation, nothing is kept. With it, the job's place in its queue (`position`, and
the jobs `ahead` with their priority and gang request) in the order Volcano v1.12's scheduler takes a
queue's jobs (`core.queueorder`; the exporter's `volcano_job_queue_position` says the same), and its
expected start from the last round of `findings.expected` (`expected_start`, its low/high bounds, `waits_for`).
Read-only and public like `/api/v1/jobs`: it names queues and jobs and their requests, nothing of the
jobs' data. A namespace-scoped caller (auth.mode kubernetes) is not told other namespaces' job names: the
jobs ahead of those are folded into `ahead_other_namespaces` and their summed requests, and a `waits_for`
naming one reads "when a job of another namespace ends" (`findings.redact`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path
from pydantic import BaseModel

from volcano_monitor.core.kube.reviews import Scope, every_namespace, visible
from volcano_monitor.core.model import res_dict
from volcano_monitor.core.pending import REASONS
from volcano_monitor.watchdog.findings.estimates import Estimate
from volcano_monitor.watchdog.findings.redact import fold_ahead, redact_text
from volcano_monitor.watchdog.state.cluster import AHEAD_LIMIT, QueuePlace, WhyPending

Explain = Callable[[str], WhyPending | None]  # ClusterIndex.why
Expected = Callable[[str, str], Estimate | None]  # ExpectedStarts.get(namespace, job name)


def no_estimate(namespace: str, job_name: str) -> Estimate | None:
    return None


class ErrorOut(BaseModel):
    detail: str


class AheadOut(BaseModel):
    """A job the scheduler takes before this one."""

    namespace: str
    job_name: str
    podgroup: str
    priority_class: str  # as the PodGroup names it, "" for none
    priority: int  # the class's value (a missing class: the globalDefault class's, else 0)
    requests: dict[str, float]  # the PodGroup's minResources (base units: cores, bytes, counts)


class WhyOut(BaseModel):
    """Why a live job waits. `pending` is false, and the reason fields null, once it runs or has finished."""

    uid: str
    kind: str  # Job (Volcano), the PodGroup owner's kind (PyTorchJob, ...), or PodGroup
    namespace: str
    job_name: str
    phase: str
    pending: bool
    reason: str | None  # one of the documented reasons
    queue: str | None  # the queue the reason is about (the job's own when it is about none)
    resource: str | None  # the resource short of room, e.g. nvidia.com/gpu; "" when the reason names none
    message: str | None  # e.g. "queue research: nvidia.com/gpu 6 allocated + 4 requested > capability 8"
    scheduler_reason: str  # the PodGroup's Unschedulable condition as the scheduler wrote it, "" without one
    scheduler_message: str
    # The place in the queue while it waits with a PodGroup (null otherwise: no PodGroup yet, or running).
    position: int | None = None  # 1 = the scheduler takes it next
    queue_waiting: int | None = None  # waiting jobs in the queue, this one included
    priority: int | None = None
    ahead: list[AheadOut] = []  # in the scheduler's order; at most the first 100 of position - 1
    # Of those first 100, the jobs of namespaces the caller may not list (auth.mode kubernetes): left out of
    # `ahead`, counted here with their summed requests. Always 0 and {} for a cluster-wide caller.
    ahead_other_namespaces: int = 0
    ahead_other_namespaces_requests: dict[str, float] = {}
    # When it is expected to start (the last estimate, docs/watchdog.md#expected-start), null without one.
    expected_start: datetime | None = None
    expected_start_low: datetime | None = None
    expected_start_high: datetime | None = None
    # What the start waits for: "when research/llama-pretrain ends", "room now"; with no estimate, why there
    # is none (e.g. "queue narrow: capability of cpu below the request"); null before the first estimate.
    waits_for: str | None = None


DESCRIPTION = (
    "Why a live Job (or another operator's PodGroup, by its UID) is not running: one reason, the first that "
    "holds of\n\n" + "\n".join(f"- `{reason}`: {meaning}" for reason, meaning in REASONS.items())
    + "\n\n`position` (1 = next) and `ahead` place the job among its queue's waiting PodGroups in the order "
    "Volcano v1.12's scheduler takes them: the higher PriorityClass value first (a PodGroup's "
    "`priorityClassName`; none or an unknown one: the globalDefault class's value, else 0), then the older "
    "PodGroup, then `namespace/podgroup name`. A place, not a start order: a job that fits the queue is "
    f"admitted past an earlier one that does not. `ahead` lists at most the first {AHEAD_LIMIT}; of those, "
    "jobs of namespaces the caller may not list (auth.mode kubernetes) are only counted, in "
    "`ahead_other_namespaces` with their summed requests, and a `waits_for` naming such a job reads "
    "\"when a job of another namespace ends\"."
    + "\n\n`expected_start` (with `expected_start_low` and `expected_start_high`) is when the job is expected "
    "to start: the queues played forward from the last estimate (at most 30 s old), running jobs ending at "
    "their workload's median run length from the ledger, and `waits_for` the event it waits for (\"when "
    "ns/job ends\", or \"room now\"). A job that can never start as the cluster stands has none, and "
    "`waits_for` says why."
    + "\n\n404 when the watchdog's informers know no live Job or PodGroup with this UID (finished and "
    "deleted runs: `/api/v1/jobs/{uid}`).")


def ahead_out(place: QueuePlace | None, scope: Scope = None) -> tuple[list[AheadOut], int, dict[str, float]]:
    """The jobs ahead the caller may see, and the count and summed requests of the others."""
    if place is None:
        return [], 0, {}
    folded = fold_ahead(place.ahead, scope)
    return [AheadOut(namespace=a.namespace, job_name=a.job_name, podgroup=a.podgroup,
                     priority_class=a.priority_class, priority=a.priority, requests=res_dict(a.min_resources))
            for a in folded.shown], folded.others, folded.others_requests


def stamp(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def why_out(found: WhyPending, expected: Estimate | None = None, scope: Scope = None) -> WhyOut:
    """`scope`: the caller's namespaces (None: every one); other namespaces' jobs are not named."""
    why, place = found.explanation, found.place
    if why is None:
        return WhyOut(uid=found.uid, kind=found.kind, namespace=found.namespace, job_name=found.job_name,
                      phase=found.phase, pending=False, reason=None, queue=None, resource=None, message=None,
                      scheduler_reason="", scheduler_message="")
    ahead, others, others_requests = ahead_out(place, scope)
    return WhyOut(uid=found.uid, kind=found.kind, namespace=found.namespace, job_name=found.job_name,
                  phase=found.phase, pending=True, reason=why.reason, queue=why.queue, resource=why.resource,
                  message=why.message, scheduler_reason=why.scheduler_reason,
                  scheduler_message=why.scheduler_message,
                  position=place.position if place is not None else None,
                  queue_waiting=place.waiting if place is not None else None,
                  priority=place.priority if place is not None else None, ahead=ahead,
                  ahead_other_namespaces=others, ahead_other_namespaces_requests=others_requests,
                  expected_start=stamp(expected.start) if expected is not None else None,
                  expected_start_low=stamp(expected.low) if expected is not None else None,
                  expected_start_high=stamp(expected.high) if expected is not None else None,
                  waits_for=redact_text(expected.waits_for, scope) if expected is not None else None)


def why_router(explain: Explain, synced: Callable[[], bool] = lambda: True,
               expected: Expected = no_estimate, scope: Callable[..., Scope] = every_namespace) -> APIRouter:
    """`synced`: the index holds every informer's first list (`Watchdog.index_synced`). Before, a job's queue
    may not be known yet and would read as `queue_missing`: the route answers 503 instead. `expected`: the
    last estimate of a waiting job's start (`ExpectedStarts.get`). `scope`: the namespaces the caller may see
    (auth.mode kubernetes); another namespace's job is a 404, as if it did not exist."""
    router = APIRouter(tags=["jobs"])
    scoped = Depends(scope)

    @router.get("/api/v1/jobs/{uid}/why", response_model=WhyOut, description=DESCRIPTION,
                responses={404: {"model": ErrorOut}, 503: {"model": ErrorOut}})
    def why_pending(uid: Annotated[str, Path(max_length=64, pattern=r"^[^\x00]*$")],
                    allowed: Scope = scoped) -> WhyOut:
        if not synced():
            raise HTTPException(503, "the watchdog's informers have not synced yet")
        found = explain(uid)
        if found is None or not visible(allowed, found.namespace):
            raise HTTPException(404, "no such live job or podgroup")
        return why_out(found, expected(found.namespace, found.job_name) if found.explanation is not None else None,
                       allowed)

    return router
