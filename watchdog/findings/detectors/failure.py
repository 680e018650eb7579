"""Event-driven failure detectors: JobFailed, RetryExhausted, JobRetrying (from Job watch events) and
PodRejected, PodOOMKilled (from Pod watch events).

The cause of these alerts is an event, so they are detected from the event itself — the Job turning
Failed raises JobFailed in the same call — never by polling. All of them are once-per-run kinds (see
`ONCE_PER_RUN_KINDS`): the fingerprint holds the Job or Pod UID, so a new run of the same job is a
new alert and a replay of the same events is the same alert.

PodOOMKilled is one alert per pod x container: it fires on the first OOM kill seen (state or
lastState terminated with reason OOMKilled), resolves when the container runs again (the kill only in
lastState, pod Running) or the pod is gone, and later kills of the same container (a crash loop) do
not raise it again. Per restart would be finer, but the Pod view's restart count is the pod's total,
so a restart of another container would look like a new kill.

State kept here is small and rebuilt from the informers' ADDED events after a restart:
- per Volcano job (namespace, name): the last pod terminations seen (OOMKilled, Error exit codes,
  kubelet rejections), bounded, so JobFailed can say why the pods died even after Volcano deleted
  them (RestartJob kills the pods of every retry);
- which alerts each live Job / Pod currently holds, so a DELETED event or `active()` can resolve them.

Only Volcano Jobs raise the job-level alerts; Kubeflow/Spark jobs have no Job object here (their
pods still raise PodRejected and PodOOMKilled).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from volcano_monitor.core.model import JOB_TERMINAL_PHASES, Job, Pod, res_get
from volcano_monitor.watchdog.findings.detectors.settings import Detectors
from volcano_monitor.watchdog.state.signals import (
    JOB_FAILED,
    JOB_RETRYING,
    POD_OOM_KILLED,
    POD_REJECTED,
    RETRY_EXHAUSTED,
    Signal,
    fingerprint,
)

__all__ = ["FAILED_PHASES", "REJECTION_REASONS", "FailureDetector"]

FAILED_PHASES = frozenset({"Failed", "Aborted", "Terminated"})

# status.reason of a pod the kubelet refused at admission (besides every "OutOf<resource>").
REJECTION_REASONS = frozenset({
    "UnexpectedAdmissionError", "NodeAffinity", "NodeName", "NodePorts", "Taint", "InvalidNodeInfo",
    "PodOSNotSupported", "PodOSSelectorNodeLabelDoesNotMatch", "SysctlForbidden", "TopologyAffinityError",
    "UnknownReason", "InitContainerRestartPolicyForbidden",
})

MAX_TERMINATIONS_PER_JOB = 16  # what JobFailed lists: the latest ones
MAX_JOBS_REMEMBERED = 20_000  # per-job termination memory (LRU), bounded whatever the cluster does


def is_rejection(pod: Pod) -> bool:
    return pod.phase == "Failed" and (pod.reason.startswith("OutOf") or pod.reason in REJECTION_REASONS)


class FailureDetector:
    """`on_job` / `on_pod` take an informer event (ADDED / MODIFIED / DELETED) and the parsed object,
    and return the signals it causes (often none)."""

    KINDS = frozenset({JOB_FAILED, RETRY_EXHAUSTED, JOB_RETRYING, POD_REJECTED, POD_OOM_KILLED})

    def __init__(self, settings: Detectors) -> None:
        self.settings = settings
        # (namespace, job name) -> latest pod terminations (pod/container -> description)
        self._terminations: OrderedDict[tuple[str, str], dict[str, dict[str, Any]]] = OrderedDict()
        self._job_uid: dict[tuple[str, str], str] = {}
        self._failed_jobs: dict[tuple[str, str], Job] = {}  # jobs in a failed phase: details refresh
        self._job_alerts: dict[str, set[str]] = {}  # job uid -> active fingerprints
        self._pod_alerts: dict[str, dict[str, str]] = {}  # pod uid -> {active fingerprint: kind}
        self._pod_done: dict[str, set[str]] = {}  # pod uid -> OOM kills seen resolved ("runs again")
        self.skipped = 0  # objects without the identity an alert needs (no uid / name)

    def active(self) -> set[str]:
        """Fingerprints of everything this detector considers active now. After the informers'
        initial sync, `AlertBook.resolve_missing(FailureDetector.KINDS, detector.active(), ...)`
        resolves alerts whose Job or Pod was deleted while the watchdog was down."""
        out: set[str] = set()
        for fps in self._job_alerts.values():
            out |= fps
        for by_fp in self._pod_alerts.values():
            out |= by_fp.keys()
        return out

    # ---- jobs ----------------------------------------------------------------------------------------

    def on_job(self, event_type: str, job: Job) -> list[Signal]:
        if not job.uid or not job.name:
            self.skipped += 1
            return []
        key = (job.namespace, job.name)
        known = self._job_uid.get(key)
        if known != job.uid:
            if known is not None:  # a new job under a reused name: forget the old one's pods
                self._terminations.pop(key, None)
            self._job_uid[key] = job.uid
        deleted = event_type == "DELETED"
        failed = not deleted and job.phase in FAILED_PHASES
        retrying = (not deleted and job.phase not in JOB_TERMINAL_PHASES
                    and job.retry_count >= self.settings.retrying_min_retries)
        exhausted = failed and job.phase == "Failed" and job.retry_count > 0 and job.retry_count >= job.max_retry
        signals = [
            self._job_failed(job, failed),
            self._job_signal(job, RETRY_EXHAUSTED, exhausted, "critical",
                             f"Job {job.namespace}/{job.name} failed after {job.retry_count} retries "
                             f"(maxRetry {job.max_retry})"),
            self._job_signal(job, JOB_RETRYING, retrying, "warning",
                             f"Job {job.namespace}/{job.name} is retrying: retry {job.retry_count} of "
                             f"{job.max_retry} ({job.phase})"),
        ]
        active = {s.fingerprint for s in signals if s.active}
        previous = self._job_alerts.get(job.uid, set())
        # A condition ends ("the job runs again", "no longer retrying") only for this detector's own
        # earlier observation: replayed old events of a job that failed later must not resolve its
        # alert. Deletion is definite. Alerts left open by a restart: see active().
        signals = [s for s in signals if s.active or deleted or s.fingerprint in previous]
        if active:
            self._job_alerts[job.uid] = active
        else:
            self._job_alerts.pop(job.uid, None)
        if failed:
            self._failed_jobs[key] = job
        else:
            self._failed_jobs.pop(key, None)
        if deleted:
            self._terminations.pop(key, None)
            if self._job_uid.get(key) == job.uid:
                del self._job_uid[key]
        return signals

    def _job_signal(self, job: Job, kind: str, active: bool, severity: str, summary: str,
                    details: dict[str, Any] | None = None) -> Signal:
        return Signal(
            kind=kind, fingerprint=fingerprint(kind, job.namespace, job.name, job.uid), active=active,
            severity=severity, namespace=job.namespace, queue=job.queue, job_name=job.name,
            subject=job.name, summary=summary if active else "",
            details=(details or self._job_details(job)) if active else {},
        )

    @staticmethod
    def _job_details(job: Job) -> dict[str, Any]:
        return {"job_uid": job.uid, "phase": job.phase, "reason": job.reason, "message": job.message[:1000],
                "retry_count": job.retry_count, "max_retry": job.max_retry}

    def _job_failed(self, job: Job, active: bool) -> Signal:
        details = self._job_details(job)
        terms = self._terminations.get((job.namespace, job.name))
        details["pod_terminations"] = list(terms.values()) if terms else []
        why = job.reason or job.message
        summary = f"Job {job.namespace}/{job.name} {job.phase}" + (f": {why}" if why else "")
        if terms:
            reasons = sorted({str(t["reason"]) for t in terms.values()})
            summary += f" (pods: {', '.join(reasons)})"
        severity = "critical" if job.phase == "Failed" else "warning"  # Aborted/Terminated: often on purpose
        return self._job_signal(job, JOB_FAILED, active, severity, summary[:1000], details)

    # ---- pods ----------------------------------------------------------------------------------------

    def on_pod(self, event_type: str, pod: Pod) -> list[Signal]:
        if not pod.uid or not pod.name:
            self.skipped += 1
            return []
        if event_type == "DELETED":
            self._pod_done.pop(pod.uid, None)
            gone = self._pod_alerts.pop(pod.uid, {})
            return [self._pod_signal(pod, kind, fp, False) for fp, kind in sorted(gone.items())]
        signals: list[Signal] = []
        remembered = self._remember_terminations(pod)
        previous = self._pod_alerts.get(pod.uid, {})
        done = self._pod_done.get(pod.uid, set())
        now_active: dict[str, str] = {}
        if is_rejection(pod):
            fp = fingerprint(POD_REJECTED, pod.namespace, pod.name, pod.uid)
            now_active[fp] = POD_REJECTED
            signals.append(self._pod_signal(
                pod, POD_REJECTED, fp, True, "warning",
                f"Pod {pod.namespace}/{pod.name} was rejected by the kubelet on {pod.node_name or '?'}: {pod.reason}",
                {"pod_uid": pod.uid, "reason": pod.reason, "node": pod.node_name, "task": pod.task,
                 "requests": dict(pod.requests)}))
        for term in pod.terminations:
            if term.reason != "OOMKilled":
                continue
            fp = fingerprint(POD_OOM_KILLED, pod.namespace, pod.name, pod.uid, term.container)
            if fp in now_active or fp in done:
                continue
            # "Runs again": the kill is only in lastState and the pod is Running. A kill seen for the
            # first time is still reported (it is news); a known one resolves, once: later kills of the
            # same container (a crash loop) do not raise it again.
            if not term.current and pod.phase == "Running" and fp in previous:
                self._pod_done.setdefault(pod.uid, set()).add(fp)
                continue
            now_active[fp] = POD_OOM_KILLED
            limit = res_get(pod.limits, "memory")
            signals.append(self._pod_signal(
                pod, POD_OOM_KILLED, fp, True, "warning",
                f"Container {term.container} of pod {pod.namespace}/{pod.name} was OOMKilled"
                + (f" (pod memory limit {limit / 2**30:.3g}Gi)" if limit else ""),
                {"pod_uid": pod.uid, "container": term.container, "exit_code": term.exit_code,
                 "current": term.current, "restart_count": pod.restart_count, "node": pod.node_name,
                 "task": pod.task, "phase": pod.phase,
                 # the Pod view knows the pod's effective request/limit (= the container's for
                 # single-container pods), not each container's
                 "pod_memory_request_bytes": res_get(pod.requests, "memory") or None,
                 "pod_memory_limit_bytes": limit or None}))
        for fp, kind in sorted(previous.items()):
            if fp not in now_active:
                signals.append(self._pod_signal(pod, kind, fp, False))
        if now_active:
            self._pod_alerts[pod.uid] = now_active
        else:
            self._pod_alerts.pop(pod.uid, None)
        if remembered:
            signals.extend(self._refresh_failed_job(pod))
        return signals

    @staticmethod
    def _pod_signal(pod: Pod, kind: str, fp: str, active: bool, severity: str = "warning", summary: str = "",
                    details: dict[str, Any] | None = None) -> Signal:
        return Signal(kind=kind, fingerprint=fp, active=active, severity=severity, namespace=pod.namespace,
                      queue=pod.queue, job_name=pod.job_name, subject=pod.name, summary=summary,
                      details=details or {})

    def _remember_terminations(self, pod: Pod) -> bool:
        """Record the pod's failures under its Volcano job; True when something new was recorded."""
        if not pod.job_name:
            return False
        found: dict[str, dict[str, Any]] = {}
        if is_rejection(pod) or (pod.phase == "Failed" and pod.reason):
            found[pod.name] = {"pod": pod.name, "container": "", "reason": pod.reason, "exit_code": None}
        for term in pod.terminations:
            if term.reason == "Completed" or (term.exit_code == 0 and term.reason in ("", "Completed")):
                continue
            found[f"{pod.name}/{term.container}"] = {"pod": pod.name, "container": term.container,
                                                     "reason": term.reason or "Error", "exit_code": term.exit_code}
        if not found:
            return False
        key = (pod.namespace, pod.job_name)
        terms = self._terminations.get(key)
        if terms is None:
            terms = self._terminations[key] = {}
            while len(self._terminations) > MAX_JOBS_REMEMBERED:
                self._terminations.popitem(last=False)
        else:
            self._terminations.move_to_end(key)
        changed = False
        for name, desc in found.items():
            if terms.get(name) != desc:
                terms.pop(name, None)
                terms[name] = desc
                changed = True
        while len(terms) > MAX_TERMINATIONS_PER_JOB:
            del terms[next(iter(terms))]
        return changed

    def _refresh_failed_job(self, pod: Pod) -> list[Signal]:
        """A pod event that arrives after its Job turned Failed (the two informers are not ordered):
        say JobFailed again with the pod's reason, so the stored alert's details gain it."""
        job = self._failed_jobs.get((pod.namespace, pod.job_name))
        return [self._job_failed(job, True)] if job is not None else []

