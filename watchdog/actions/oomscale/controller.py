"""The OOM auto scale-up controller: watches Volcano Jobs and their pods, and when a Job ends Failed
or Aborted after an OOM kill, the leader resubmits it with more memory (watchdog.actions.oomscale.plan).

Several replicas, one truth. Every replica watches; only the leader decides, and each decision is a
row of `oom_resubmissions`, unique on (namespace, lineage UID, attempt), inserted BEFORE the Job is
created. So:
- a second replica (or a leader that lost the Lease mid-way) fails to insert the same attempt, and
  does nothing;
- a retry after a database error or a restart finds the row: "pending" means the create may or may
  not have happened, so it is done again, and the API server's 409 for the deterministic name
  `<lineage>-oom<N>` counts as done;
- the row leaves "pending" by a conditional UPDATE, in the same transaction as the chat notice: one
  notice, one count, one Event per resubmission, by whoever won that update.

Only OOM kills the controller saw on the pods count (state or lastState terminated with reason
OOMKilled, remembered per job: Volcano may delete the pods before the Job turns Failed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from sqlalchemy import Engine, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.kube.leaderelection import Leadership
from volcano_monitor.core.kube.resources import JOBS, PODS, QUEUES
from volcano_monitor.core.kube.rest import ApiUnavailable
from volcano_monitor.core.model import Pod, Queue, parse_pod, parse_queue, res_dict
from volcano_monitor.core.podview import is_volcano_pod
from volcano_monitor.watchdog.actions.controlloop import ControlLoop
from volcano_monitor.watchdog.actions.oomscale import kube, plan, store
from volcano_monitor.watchdog.actions.oomscale.settings import OomScaleUpSettings
from volcano_monitor.watchdog.actions.oomscale.store import APPLIED, CAPPED, DRY_RUN, EXHAUSTED, FAILED, PENDING
from volcano_monitor.watchdog.state.db.models import OomResubmission

log = logging.getLogger(__name__)

FAILED_PHASES = frozenset({"Failed", "Aborted"})
EVENT_REASONS = {APPLIED: "OOMScaleUp", DRY_RUN: "OOMScaleUpPlanned", CAPPED: "OOMScaleUpCapped",
                 EXHAUSTED: "OOMScaleUpExhausted", FAILED: "OOMScaleUpFailed"}


@dataclass(frozen=True)
class JobSeen:
    """A Volcano Job as the controller keeps it: the whole object only while it is in a failed phase
    (the spec to copy), else just enough to notice the change."""

    namespace: str
    name: str
    uid: str
    phase: str
    queue: str
    raw: dict[str, Any] = field(default_factory=dict)


def job_seen(raw: Any) -> JobSeen:
    meta = raw.get("metadata") or {} if isinstance(raw, dict) else {}
    spec = raw.get("spec") or {} if isinstance(raw, dict) else {}
    status = raw.get("status") or {} if isinstance(raw, dict) else {}
    phase = str((status.get("state") or {}).get("phase") or "")
    return JobSeen(str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")), phase,
                   str(spec.get("queue") or "default"), raw if phase in FAILED_PHASES else {})


@dataclass(frozen=True)
class Decision:
    """What was decided about one OOM-killed run: what `notify` receives."""

    namespace: str
    job: str
    queue: str
    lineage: str
    attempt: int
    new_name: str
    mode: str
    outcome: str
    containers: dict[str, Any]
    message: str
    at: datetime


Notify = Callable[[Session, Decision], None]  # queue the chat notice inside the given transaction


class OomScaleUpController(ControlLoop):
    thread_name = "oom-scale-up"

    def __init__(self, settings: OomScaleUpSettings, engine: Engine, api: client.ApiClient, leader: Leadership,
                 clock: Callable[[], float] = time.time, notify: Notify | None = None,
                 wake: Callable[[], None] | None = None, *, namespaces: Sequence[str] = (),
                 informer_backoff: tuple[float, float] = (0.5, 30.0)) -> None:
        super().__init__(api, leader, informer_backoff)
        self.settings = settings
        self.engine = engine
        self.clock = clock
        self.notify = notify
        self.wake = wake
        self._lock = threading.Lock()
        self._reconcile_lock = threading.Lock()
        self._failed: dict[tuple[str, str], JobSeen] = {}
        self._killed: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (ns, job) -> {(task, container)}
        self._queues: dict[str, Queue] = {}
        self._done: set[str] = set()  # Job UIDs decided (or not taking part): not looked at again
        self.counts: Counter[tuple[str, str]] = Counter()  # (namespace, outcome) -> decisions by this replica
        scopes: list[str | None] = list(namespaces) or [None]
        for namespace in scopes:
            self.informer(JOBS, job_seen, self._on_job, namespace)
            self.informer(PODS, parse_pod, self._on_pod, namespace, is_volcano_pod)
        self.informer(QUEUES, parse_queue, self._on_queue)

    # ---- informer handlers --------------------------------------------------------------------------

    def _on_job(self, event_type: str, job: JobSeen) -> None:
        key = (job.namespace, job.name)
        with self._lock:
            if event_type == DELETED:
                self._failed.pop(key, None)
                self._killed.pop(key, None)
                return
            if job.phase in FAILED_PHASES:
                self._failed[key] = job
            else:
                self._failed.pop(key, None)
        if job.phase in FAILED_PHASES:
            self._trigger.set()

    def _on_pod(self, event_type: str, pod: Pod) -> None:
        if not pod.job_name or event_type == DELETED:
            return
        killed = {(pod.task, t.container) for t in pod.terminations if t.reason == "OOMKilled"}
        if killed:
            with self._lock:
                self._killed.setdefault((pod.namespace, pod.job_name), set()).update(killed)
            self._trigger.set()

    def _on_queue(self, event_type: str, queue: Queue) -> None:
        with self._lock:
            if event_type == DELETED:
                self._queues.pop(queue.name, None)
            else:
                self._queues[queue.name] = queue

    def interval_seconds(self) -> float:
        return self.settings.reconcile_interval_seconds

    # ---- deciding ------------------------------------------------------------------------------------

    def reconcile(self) -> dict[str, str]:
        """Decide about every failed Job with OOM-killed containers not decided yet (leader only);
        "namespace/name" -> outcome of this pass."""
        if not self.leader.is_leader():
            return {}
        with self._reconcile_lock:
            with self._lock:
                todo = [(job, set(self._killed.get(key, ()))) for key, job in self._failed.items()
                        if job.uid not in self._done and self._killed.get(key)]
            outcomes: dict[str, str] = {}
            for job, killed in todo:
                try:
                    outcome = self._decide(job, killed)
                except (SQLAlchemyError, ApiUnavailable) as exc:  # left undecided: the next pass tries again
                    log.error("oom-scale-up: job %s/%s: %s", job.namespace, job.name, str(exc).splitlines()[0])
                    outcome = "retry"
                outcomes[f"{job.namespace}/{job.name}"] = outcome
            return outcomes

    def _decide(self, job: JobSeen, killed: set[tuple[str, str]]) -> str:
        notes = plan.annotations_of(job.raw)
        if not plan.takes_part(job.namespace, job.queue, notes, self.settings):
            self._done.add(job.uid)
            return "not_taking_part"
        lineage = plan.lineage_of(job.raw)
        now = datetime.fromtimestamp(self.clock(), UTC)
        with Session(self.engine) as session:
            row = store.find(session, lineage.namespace, lineage.uid, lineage.attempt)
            if row is not None and row.outcome != PENDING:
                self._done.add(job.uid)
                return "recorded"
            peaks = {key: store.peak_memory(session, job.uid, *key) for key in sorted(killed)}
        with self._lock:
            queue = self._queues.get(job.queue)
        queue_memory = res_dict(queue.capability).get("memory") if queue is not None else None
        planned = plan.plan(job.raw, peaks, self.settings, queue_memory)
        mode = self.settings.mode
        if lineage.attempt > self.settings.max_attempts:
            outcome, message = EXHAUSTED, f"{self.settings.max_attempts} resubmissions already: giving up"
        elif planned.capped:
            outcome, message = CAPPED, "no OOM-killed container can be given more memory"
        elif mode == "dry-run":
            outcome, message = DRY_RUN, f"would submit {planned.new_name}"
        else:
            outcome, message = PENDING, ""
        if row is None:
            values = {"namespace": lineage.namespace, "lineage": lineage.name, "lineage_uid": lineage.uid,
                      "attempt": lineage.attempt, "source_name": job.name, "source_uid": job.uid,
                      "new_name": planned.new_name, "queue": job.queue, "mode": mode, "outcome": PENDING,
                      "containers": planned.containers(), "message": message, "identity": self.leader.identity}
            try:
                with Session(self.engine) as session, session.begin():
                    if not self.leader.is_leader():
                        return "standby"
                    store.insert(session, values, now)
            except IntegrityError:  # another replica decided this attempt
                self._done.add(job.uid)
                return "recorded"
        if outcome == PENDING:
            if not self.leader.is_leader():
                return "standby"
            done, message = kube.create_job(self.api, planned.body)
            outcome = APPLIED if done else FAILED
        decision = Decision(job.namespace, job.name, job.queue, lineage.name, lineage.attempt, planned.new_name,
                            mode, outcome, planned.containers(), message, now)
        if self._settle(decision, lineage.uid):
            self._tell(job, decision)
        self._done.add(job.uid)
        return outcome

    def _settle(self, decision: Decision, lineage_uid: str) -> bool:
        """Move the row out of "pending" and queue the notice, in one transaction; False when another
        replica (or an earlier pass) settled it already."""
        with Session(self.engine) as session, session.begin():
            moved = session.execute(
                update(OomResubmission)
                .where(OomResubmission.namespace == decision.namespace, OomResubmission.lineage_uid == lineage_uid,
                       OomResubmission.attempt == decision.attempt, OomResubmission.outcome == PENDING)
                .values(outcome=decision.outcome, message=decision.message, updated_at=decision.at))
            if getattr(moved, "rowcount", 0) != 1:
                return False
            if self.notify is not None:
                self.notify(session, decision)
        return True

    def count_snapshot(self) -> Counter[tuple[str, str]]:
        """The decisions counted so far (a copy: /metrics renders it on another thread)."""
        with self._lock:
            return Counter(self.counts)

    def _tell(self, job: JobSeen, decision: Decision) -> None:
        with self._lock:
            self.counts[(decision.namespace, decision.outcome)] += 1
        kind = "Warning" if decision.outcome in (CAPPED, EXHAUSTED, FAILED) else "Normal"
        kube.job_event(self.api, job.namespace, job.name, job.uid, EVENT_REASONS[decision.outcome],
                       describe(decision), kind, self.leader.identity, self.clock())
        if self.wake is not None:
            self.wake()
        log.info("oom-scale-up: %s", describe(decision))


def describe(decision: Decision) -> str:
    memory = ", ".join(f"{name} {_gi(c['limit'] or c['request'])} -> {_gi(c['new_limit'])}"
                       for name, c in sorted(decision.containers.items()))
    head = {APPLIED: f"resubmitted as {decision.new_name}", DRY_RUN: f"would resubmit as {decision.new_name} "
            "(dry-run)", CAPPED: "not resubmitted: no room to grow", EXHAUSTED: "not resubmitted: attempts used up",
            FAILED: f"resubmission {decision.new_name} failed"}.get(decision.outcome, decision.outcome)
    text = f"Job {decision.namespace}/{decision.job} was OOM-killed; {head} (attempt {decision.attempt}"
    text += f", memory {memory})" if memory else ")"
    return text + (f": {decision.message}" if decision.message and decision.outcome == FAILED else "")


def _gi(value: Any) -> str:
    return f"{float(value or 0) / 2**30:.3g}Gi"
