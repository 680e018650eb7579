"""Detectors on hand-built objects shaped like the simulator's (simulator/objects.py): each detector fires for
the object built to trigger it and stays quiet for healthy ones. The waste detector reads the database
(both backends, through the `engine` fixture)."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, update
from sqlalchemy.orm import Session

from volcano_monitor.core.model import parse_job, parse_pod, parse_podgroup, parse_queue
from volcano_monitor.watchdog.findings.detectors import (
    FailureDetector,
    GangDetector,
    QueueDetector,
    Signal,
    WasteDetector,
    fingerprint,
    waste,
)
from volcano_monitor.watchdog.findings.detectors.settings import Detectors
from volcano_monitor.watchdog.state.alerts import AlertBook
from volcano_monitor.watchdog.state.db.models import JobRun, UsageRollup

Obj = dict[str, Any]
T0 = 1_700_000_000.0


def ts(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def job(name: str = "train-abcd", uid: str = "job-uid-1", phase: str = "Running", retry: int = 0,
        max_retry: int = 3, namespace: str = "ml", queue: str = "research", reason: str = "", message: str = "",
        conditions: tuple[tuple[str, float], ...] = ()) -> Obj:
    state: Obj = {"phase": phase, "lastTransitionTime": ts(T0)}
    if reason:
        state["reason"] = reason
    if message:
        state["message"] = message
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": ts(T0)},
        "spec": {"schedulerName": "volcano", "queue": queue, "minAvailable": 1, "maxRetry": max_retry,
                 "tasks": [{"name": "main", "replicas": 1, "template": {"spec": {"containers": [
                     {"name": "main", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}}]},
        "status": {"state": state, "retryCount": retry, "minAvailable": 1,
                   "conditions": [{"status": p, "lastTransitionTime": ts(t)} for p, t in conditions]},
    }


def pod(name: str = "train-abcd-main-0", uid: str = "pod-uid-1", phase: str = "Running", job_name: str = "train-abcd",
        namespace: str = "ml", queue: str = "research", group: str = "train-abcd-job-uid-1", node: str | None = "n1",
        reason: str = "", state: Obj | None = None, last_state: Obj | None = None, restarts: int = 0,
        requests: Obj | None = None, limits: Obj | None = None, container: str = "main") -> Obj:
    labels = {"volcano.sh/job-name": job_name, "volcano.sh/queue-name": queue, "volcano.sh/task-spec": "main"} \
        if job_name else {}
    resources: Obj = {"requests": requests or {"cpu": "2", "memory": "4Gi"}}
    if limits:
        resources["limits"] = limits
    spec: Obj = {"schedulerName": "volcano", "containers": [{"name": container, "image": "x", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    status: Obj = {"phase": phase}
    if reason:
        status["reason"] = reason
    if node and not reason:
        status["containerStatuses"] = [{"name": container, "restartCount": restarts,
                                        "state": state or ({"running": {}} if phase == "Running" else {"waiting": {}}),
                                        "lastState": last_state or {}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels,
                         "annotations": {"scheduling.k8s.io/group-name": group} if group else {}},
            "spec": spec, "status": status}


def oom(exit_code: int = 137) -> Obj:
    return {"terminated": {"exitCode": exit_code, "reason": "OOMKilled"}}


def podgroup(name: str = "train-abcd-job-uid-1", uid: str = "pg-uid-1", phase: str = "Inqueue", min_member: int = 4,
             namespace: str = "ml", queue: str = "research", conditions: tuple[Obj, ...] = (), running: int = 0,
             min_resources: Obj | None = None) -> Obj:
    status: Obj = {"phase": phase, "conditions": list(conditions)}
    if running:
        status["running"] = running
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": uid,
                         "ownerReferences": [{"kind": "Job", "name": name.split("-job-")[0], "controller": True}]},
            "spec": {"minMember": min_member, "queue": queue,
                     "minResources": min_resources or {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}},
            "status": status}


def condition(kind: str, t: float, reason: str = "NotEnoughResources", message: str = "", status: str = "True") -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": ts(t)}


def queue(name: str = "research-nlp", parent: str = "research", capability: Obj | None = None,
          allocated: Obj | None = None) -> Obj:
    spec: Obj = {"weight": 1, "parent": parent} if parent else {"weight": 1}
    if capability:
        spec["capability"] = capability
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name, "uid": name},
            "spec": spec, "status": {"state": "Open", "allocated": allocated or {"cpu": "0", "memory": "0"}}}


# ---- helpers -------------------------------------------------------------------------------------------

SETTINGS = Detectors()


def active(signals: list[Signal], kind: str | None = None) -> list[Signal]:
    return [s for s in signals if s.active and (kind is None or s.kind == kind)]


def feed_job(d: FailureDetector, event: str = "MODIFIED", **kw: Any) -> list[Signal]:
    return d.on_job(event, parse_job(job(**kw)))


def feed_pod(d: FailureDetector, event: str = "MODIFIED", **kw: Any) -> list[Signal]:
    return d.on_pod(event, parse_pod(pod(**kw)))


def test_fingerprint_is_stable_and_distinguishes_runs() -> None:
    a = fingerprint("JobFailed", "ml", "train", "uid-1")
    assert a == fingerprint("JobFailed", "ml", "train", "uid-1") and len(a) == 32
    assert a != fingerprint("JobFailed", "ml", "train", "uid-2")
    assert a != fingerprint("JobRetrying", "ml", "train", "uid-1")
    assert fingerprint("k", "a", "bc") != fingerprint("k", "ab", "c")  # parts are separated
    assert len(fingerprint("k", "\ud800 ü" * 100)) == 32  # lone surrogates and unicode do not break it


# ---- FailureDetector -----------------------------------------------------------------------------------

def test_healthy_job_and_pods_raise_nothing() -> None:
    d = FailureDetector(SETTINGS)
    out: list[Signal] = []
    for phase in ("Pending", "Running", "Completing", "Completed"):
        out += feed_job(d, "ADDED" if phase == "Pending" else "MODIFIED", phase=phase)
    for phase, state in (("Pending", None), ("Running", None),
                         ("Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}})):
        out += feed_pod(d, phase=phase, state=state)
    assert out == [] and d.active() == set()
    # Deletion is definite: it says "resolved" for whatever an earlier process may have left open.
    gone = feed_job(d, "DELETED", phase="Completed") + feed_pod(d, "DELETED", phase="Succeeded")
    assert sorted(s.kind for s in gone) == ["JobFailed", "JobRetrying", "RetryExhausted"]
    assert active(gone) == []


def test_job_failed_lists_the_pods_termination_reasons() -> None:
    d = FailureDetector(SETTINGS)
    feed_job(d, "ADDED", phase="Running")
    assert active(feed_pod(d, phase="Failed", state=oom(), limits={"memory": "8Gi"}), "PodOOMKilled")
    signals = feed_job(d, phase="Failed", reason="PodFailed", message="pod failed")
    (failed,) = active(signals, "JobFailed")
    assert failed.severity == "critical" and failed.job_name == "train-abcd" and failed.queue == "research"
    assert failed.fingerprint == fingerprint("JobFailed", "ml", "train-abcd", "job-uid-1")
    assert failed.details["pod_terminations"] == [{"pod": "train-abcd-main-0", "container": "main",
                                                   "reason": "OOMKilled", "exit_code": 137}]
    assert "OOMKilled" in failed.summary and failed.for_seconds == 0
    assert not active(signals, "RetryExhausted")  # retryCount 0
    assert failed.fingerprint in d.active()
    # Deleting the job resolves it.
    gone = feed_job(d, "DELETED", phase="Failed")
    assert [(s.kind, s.active) for s in gone if s.kind == "JobFailed"] == [("JobFailed", False)]
    assert failed.fingerprint not in d.active()


def test_pod_event_after_the_job_failed_refreshes_the_details() -> None:
    d = FailureDetector(SETTINGS)
    (failed,) = active(feed_job(d, "ADDED", phase="Failed"), "JobFailed")
    assert failed.details["pod_terminations"] == []
    later = feed_pod(d, phase="Failed", state={"terminated": {"exitCode": 2, "reason": "Error"}})
    (again,) = active(later, "JobFailed")
    assert again.fingerprint == failed.fingerprint
    assert again.details["pod_terminations"][0]["exit_code"] == 2 and "Error" in again.summary
    assert not active(later, "PodOOMKilled") and not active(later, "PodRejected")


def test_aborted_is_a_warning_and_running_again_resolves() -> None:
    d = FailureDetector(SETTINGS)
    (aborted,) = active(feed_job(d, phase="Aborted"), "JobFailed")
    assert aborted.severity == "warning"
    resumed = feed_job(d, phase="Running")
    assert [(s.fingerprint, s.active) for s in resumed] == [(aborted.fingerprint, False)]


def test_retrying_then_retry_exhausted() -> None:
    d = FailureDetector(SETTINGS)
    assert feed_job(d, "ADDED", phase="Running") == []
    (retrying,) = active(feed_job(d, phase="Restarting", retry=1))
    assert retrying.kind == "JobRetrying" and retrying.severity == "warning" and retrying.details["retry_count"] == 1
    assert active(feed_job(d, phase="Running", retry=2)) == [replace(retrying, summary=retrying.summary.replace(
        "retry 1 of 3 (Restarting)", "retry 2 of 3 (Running)"), details={**retrying.details, "retry_count": 2,
                                                                         "phase": "Running"})]
    final = feed_job(d, phase="Failed", retry=3, reason="MaxRetryExceeded")
    assert sorted(s.kind for s in active(final)) == ["JobFailed", "RetryExhausted"]
    assert [s.kind for s in final if not s.active] == ["JobRetrying"]  # resolved: the job is terminal


def test_retrying_threshold_and_max_retry_zero() -> None:
    d = FailureDetector(Detectors(retrying_min_retries=2))
    assert not active(feed_job(d, phase="Running", retry=1))
    assert active(feed_job(d, phase="Running", retry=2), "JobRetrying")
    d = FailureDetector(SETTINGS)
    signals = feed_job(d, phase="Failed", max_retry=0)  # maxRetry 0 and no retry: just JobFailed
    assert [s.kind for s in active(signals)] == ["JobFailed"]


def test_replayed_old_events_do_not_resolve() -> None:
    """A fresh detector replaying a job's history (Pending, Running, ..., Failed) must not send an
    inactive signal for the alert the previous process opened; deletion still resolves."""
    d = FailureDetector(SETTINGS)
    assert feed_job(d, "ADDED", phase="Pending") == []
    assert feed_job(d, phase="Running") == []
    assert active(feed_job(d, phase="Failed"), "JobFailed")


def test_new_job_under_a_reused_name_forgets_the_old_pods() -> None:
    d = FailureDetector(SETTINGS)
    feed_job(d, "ADDED", phase="Running")
    feed_pod(d, phase="Failed", state={"terminated": {"exitCode": 1, "reason": "Error"}})
    feed_job(d, "DELETED", phase="Failed")
    (failed,) = active(feed_job(d, "ADDED", uid="job-uid-2", phase="Failed"), "JobFailed")
    assert failed.details["pod_terminations"] == [] and failed.details["job_uid"] == "job-uid-2"


def test_pod_rejected_by_the_kubelet() -> None:
    d = FailureDetector(SETTINGS)
    assert feed_pod(d, "ADDED", phase="Pending", node=None) == []
    signals = feed_pod(d, phase="Failed", reason="OutOfcpu", requests={"cpu": "8", "memory": "16Gi"})
    (rejected,) = active(signals, "PodRejected")
    assert rejected.subject == "train-abcd-main-0" and rejected.details["reason"] == "OutOfcpu"
    assert rejected.details["requests"]["cpu"] == 8.0 and rejected.details["node"] == "n1"
    assert rejected.fingerprint == fingerprint("PodRejected", "ml", "train-abcd-main-0", "pod-uid-1")
    (failed,) = active(feed_job(d, phase="Failed"), "JobFailed")
    assert failed.details["pod_terminations"][0]["reason"] == "OutOfcpu"
    gone = feed_pod(d, "DELETED", phase="Failed", reason="OutOfcpu")
    assert [(s.fingerprint, s.kind, s.active) for s in gone] == [(rejected.fingerprint, "PodRejected", False)]
    for reason in ("UnexpectedAdmissionError", "OutOfmemory", "OutOfnvidia.com/gpu"):
        assert active(FailureDetector(SETTINGS).on_pod("ADDED", parse_pod(pod(phase="Failed", reason=reason))))
    # Evicted is not an admission rejection.
    assert not active(FailureDetector(SETTINGS).on_pod("ADDED", parse_pod(pod(phase="Failed", reason="Evicted"))))


def test_oom_killed_once_per_container_then_resolves_when_it_runs_again() -> None:
    d = FailureDetector(SETTINGS)
    kw: dict[str, Any] = {"limits": {"memory": "8Gi"}, "requests": {"cpu": "4", "memory": "6Gi"}}
    assert feed_pod(d, "ADDED", **kw) == []
    (oomed,) = active(feed_pod(d, phase="Running", state=oom(), **kw))
    assert oomed.kind == "PodOOMKilled" and oomed.details["container"] == "main"
    assert oomed.details["pod_memory_limit_bytes"] == 8 * 2**30
    assert oomed.details["pod_memory_request_bytes"] == 6 * 2**30 and oomed.details["exit_code"] == 137
    assert "8Gi" in oomed.summary
    # The same kill seen again: the same alert.
    assert active(feed_pod(d, phase="Running", state=oom(), **kw)) == [oomed]
    # Restarted in place: the kill moves to lastState, the container runs again -> resolved.
    again = feed_pod(d, phase="Running", last_state=oom(), restarts=1, **kw)
    assert [(s.fingerprint, s.active) for s in again] == [(oomed.fingerprint, False)]
    # A crash loop does not raise it again.
    assert feed_pod(d, phase="Running", state=oom(), restarts=1, **kw) == []
    assert feed_pod(d, phase="Running", last_state=oom(), restarts=2, **kw) == []


def test_oom_first_seen_in_last_state_is_reported_and_deleted_pod_resolves() -> None:
    d = FailureDetector(SETTINGS)
    (oomed,) = active(feed_pod(d, "ADDED", phase="Running", last_state=oom(), restarts=3))
    assert oomed.details["current"] is False and oomed.details["restart_count"] == 3
    assert oomed.fingerprint in d.active()
    gone = feed_pod(d, "DELETED", phase="Running", last_state=oom(), restarts=3)
    assert [(s.kind, s.active) for s in gone] == [("PodOOMKilled", False)] and d.active() == set()


def test_malformed_objects_are_skipped_not_fatal() -> None:
    d = FailureDetector(SETTINGS)
    raws: list[object] = [None, 42, "x", [], {"metadata": "nope"}, {"metadata": {"name": "\u00fc" * 300}}]
    for raw in raws:
        assert d.on_job("ADDED", parse_job(raw)) == []
        assert d.on_pod("ADDED", parse_pod(raw)) == []
    assert d.skipped == 12
    weird = job(name="j\u00fcb-\U0001f600", phase="Failed")
    weird["status"]["retryCount"] = "many"  # wrong type: parsed as 0, reported as a problem
    (failed,) = active(d.on_job("ADDED", parse_job(weird)), "JobFailed")
    assert failed.details["retry_count"] == 0 and failed.job_name == "j\u00fcb-\U0001f600"


# ---- GangDetector --------------------------------------------------------------------------------------

def gang(phase: str, conditions: tuple[Obj, ...], pods: list[tuple[str, bool]], min_member: int = 4,
         running: int = 0, settings: Detectors = SETTINGS) -> GangDetector:
    d = GangDetector(settings)
    d.on_podgroup("ADDED", parse_podgroup(podgroup(phase=phase, conditions=conditions, min_member=min_member,
                                                   running=running)))
    for i, (pod_phase, bound) in enumerate(pods):
        d.on_pod("ADDED", parse_pod(pod(name=f"p{i}", uid=f"pu{i}", phase=pod_phase, node="n1" if bound else None)))
    return d


def test_gang_unschedulable() -> None:
    d = gang("Inqueue", (condition("Unschedulable", T0 - 100, message="4/4 tasks in gang unschedulable"),),
             [("Pending", False)] * 4)
    (signal,) = d.check(T0)
    assert signal.kind == "GangUnschedulable" and signal.active and signal.for_seconds == 600
    assert signal.since == datetime.fromtimestamp(T0 - 100, UTC)
    assert signal.subject == "train-abcd-job-uid-1" and signal.job_name == "train-abcd"
    assert signal.details["reason"] == "NotEnoughResources" and signal.details["min_member"] == 4
    assert signal.fingerprint == fingerprint("GangUnschedulable", "ml", "train-abcd-job-uid-1", "pg-uid-1")
    # The group is deleted: nothing to report.
    d.on_podgroup("DELETED", parse_podgroup(podgroup()))
    assert d.check(T0) == []


def test_gang_scheduled_after_unschedulable_is_quiet() -> None:
    conds = (condition("Unschedulable", T0 - 100), condition("Scheduled", T0 - 50, reason="tasks ready"))
    assert gang("Running", conds, [("Running", True)] * 4, running=4).check(T0) == []
    # Pods bound but containers still starting: not partial, not unschedulable.
    assert gang("Inqueue", conds, [("Pending", True)] * 4).check(T0) == []


def test_gang_back_to_inqueue_after_a_restart_starts_a_new_episode_now() -> None:
    conds = (condition("Unschedulable", T0 - 1000), condition("Scheduled", T0 - 500, reason="tasks ready"))
    (signal,) = gang("Inqueue", conds, [("Pending", False)] * 4).check(T0)
    assert signal.kind == "GangUnschedulable" and signal.since is None  # the old condition time says nothing


def test_gang_waiting_for_its_queue_is_left_to_queue_starved() -> None:
    """Whatever the condition says: the queue detector decides whether the group waits for its queue
    (more cases in test_gang_queue.py)."""
    conds = (condition("Unschedulable", T0 - 100, message="queue resource quota insufficient (queue q)"),)
    queues = QueueDetector(SETTINGS)
    queues.on_queue("ADDED", parse_queue(queue("research", parent="", capability={"cpu": "16"},
                                               allocated={"cpu": "12"})))
    d = GangDetector(SETTINGS, blocked=queues.blocked)
    d.on_podgroup("ADDED", parse_podgroup(podgroup(phase="Pending", conditions=conds)))
    assert d.check(T0) == []


def test_partial_gang() -> None:
    pods = [("Running", True), ("Running", True), ("Pending", False), ("Pending", False)]
    d = gang("Unknown", (condition("Unschedulable", T0 - 100),), pods, running=2)
    (signal,) = d.check(T0)
    assert signal.kind == "PartialGang" and signal.for_seconds == 600
    assert (signal.details["running"], signal.details["holding"], signal.details["waiting"]) == (2, 2, 2)
    assert signal.details["held_resources"]["cpu"] == 4.0
    # The evaluators get scheduled: the gang is complete.
    for i in (2, 3):
        d.on_pod("MODIFIED", parse_pod(pod(name=f"p{i}", uid=f"pu{i}", phase="Running")))
    assert d.check(T0) == []
    # A pod is deleted and recreated unbound: partial again.
    d.on_pod("DELETED", parse_pod(pod(name="p3", uid="pu3")))
    d.on_pod("ADDED", parse_pod(pod(name="p3", uid="pu3b", phase="Pending", node=None)))
    assert [s.kind for s in d.check(T0)] == ["PartialGang"]


def test_elastic_gang_above_min_member_is_healthy() -> None:
    pods = [("Running", True), ("Running", True), ("Pending", False)]
    assert gang("Running", (), pods, min_member=2, running=2).check(T0) == []


# ---- QueueDetector -------------------------------------------------------------------------------------

def starved(allocated_gpus: str, want_gpus: str = "2", capability_gpus: str = "10") -> list[Signal]:
    d = QueueDetector(SETTINGS)
    d.on_queue("ADDED", parse_queue(queue("research", parent="root", capability={"cpu": "192"},
                                          allocated={"cpu": "40"})))
    d.on_queue("ADDED", parse_queue(queue(capability={"cpu": "64", "nvidia.com/gpu": capability_gpus},
                                          allocated={"cpu": "40", "nvidia.com/gpu": allocated_gpus})))
    d.on_podgroup("ADDED", parse_podgroup(podgroup(
        name="hp-search-x", phase="Pending", queue="research-nlp", min_member=2,
        min_resources={"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": want_gpus},
        conditions=(condition("Unschedulable", T0, message="queue resource quota insufficient"),))))
    return d.check(T0)


def test_queue_starved() -> None:
    (signal,) = starved("10")
    assert signal.kind == "QueueStarved" and signal.queue == "research-nlp" and signal.for_seconds == 900
    assert signal.fingerprint == fingerprint("QueueStarved", "research-nlp")
    assert signal.details["resource"] == "nvidia.com/gpu" and signal.details["limiting_queue"] == "research-nlp"
    assert (signal.details["allocated"], signal.details["capability"]) == (10.0, 10.0)
    assert signal.details["waiting"] == 1 and "10 of 10" in signal.summary


def test_queue_with_room_or_an_impossible_request_is_not_starved() -> None:
    assert starved("8") == []  # 8 + 2 fits under 10: Volcano will admit it
    assert starved("1", want_gpus="16") == []  # bigger than the capability: never fits, not starvation


def test_queue_starved_by_its_parent_and_through_pending_pods() -> None:
    d = QueueDetector(SETTINGS)
    d.on_queue("ADDED", parse_queue(queue("research", parent="root", capability={"cpu": "48"},
                                          allocated={"cpu": "47"})))
    d.on_queue("ADDED", parse_queue(queue(capability={"cpu": "64"}, allocated={"cpu": "30"})))
    d.on_podgroup("ADDED", parse_podgroup(podgroup(phase="Inqueue", queue="research-nlp")))
    d.on_pod("ADDED", parse_pod(pod(phase="Pending", node=None, queue="research-nlp")))
    bound = pod(name="b", uid="b", phase="Pending", queue="research-nlp")  # bound: not demand
    d.on_pod("ADDED", parse_pod(bound))
    (signal,) = d.check(T0)
    assert signal.details["limiting_queue"] == "research" and signal.queue == "research-nlp"
    assert signal.details["waiting"] == 1
    d.on_pod("MODIFIED", parse_pod(pod(phase="Running", queue="research-nlp")))
    assert d.check(T0) == []
    # A Kubeflow pod (no queue label) is attributed through its PodGroup.
    d.on_pod("ADDED", parse_pod(pod(uid="kf", job_name="", phase="Pending", node=None, queue="")))
    assert [s.queue for s in d.check(T0)] == ["research-nlp"]
    d.on_queue("DELETED", parse_queue(queue("research", parent="root")))
    assert d.check(T0) == []  # research-nlp alone has room


# ---- WasteDetector (database) --------------------------------------------------------------------------

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def rollups(session: Session, uid: str, minutes: int, cpu: float, request: float = 8.0, gpus: float = 0.0,
            gpu_util: float = 0.0, end: datetime = NOW, bucket: int = 60) -> None:
    """One container's per-minute rollups ending at `end`: 6 samples a bucket."""
    for i in range(minutes):
        start = end - timedelta(seconds=bucket * (i + 1))
        session.add(UsageRollup(
            bucket_start=start, bucket_seconds=bucket, namespace="ml", pod=f"{uid}-0", container="main",
            job_uid=uid, workload="bert", queue="research-nlp", samples=6, cpu_cores_sum=6 * cpu,
            cpu_cores_max=cpu, memory_bytes_sum=6e9, memory_bytes_max=1e9, gpu_samples=6 if gpus else 0,
            gpu_util_sum=6 * gpu_util if gpus else 0.0, gpu_util_max=gpu_util, cpu_request_cores=request,
            memory_request_bytes=2**34, gpu_request=gpus))


def ledger(session: Session, uid: str, name: str, finished: datetime | None = None, ran: float = 3600, **kw: Any
           ) -> None:
    started = (finished or NOW) - timedelta(seconds=ran)
    session.add(JobRun(uid=uid, namespace="ml", name=name, workload=name.rsplit("-", 1)[0], queue="research-nlp",
                       created_at=started, started_at=started, finished_at=finished,
                       phase="Completed" if finished else "Running", updated_at=NOW, **kw))


def test_job_idle_cpu_and_gpu(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        rollups(session, "idle", 40, cpu=0.16, gpus=2, gpu_util=1.0)  # 2 % of 8 cores, GPUs at 1 %
        ledger(session, "idle", "bert-abcd")
        rollups(session, "busy", 40, cpu=6.0, gpus=4, gpu_util=85.0)  # healthy
        ledger(session, "busy", "llama-abcd")
        rollups(session, "young", 10, cpu=0.01)  # started 10 min ago: not a whole window yet
        rollups(session, "done", 40, cpu=0.01)  # idle, but the ledger says it finished
        ledger(session, "done", "etl-abcd", finished=NOW - timedelta(seconds=30))
        rollups(session, "stale", 40, cpu=0.01, end=NOW - timedelta(minutes=20))  # no fresh samples
        rollups(session, "noledger", 40, cpu=0.1, request=4.0)  # no ledger row: still judged on usage
    with Session(engine) as session:
        signals = WasteDetector(SETTINGS).check(session, NOW)
    found = {(s.details["job_uid"], s.details["resource"]): s for s in signals}
    assert set(found) == {("idle", "cpu"), ("idle", "gpu"), ("noledger", "cpu")}
    cpu = found[("idle", "cpu")]
    assert cpu.kind == "JobIdle" and cpu.job_name == "bert-abcd" and cpu.queue == "research-nlp"
    assert cpu.details["cpu_used_ratio"] == 0.02 and cpu.details["cpu_requested_cores"] == 8.0
    assert found[("idle", "gpu")].details["gpu_util_percent"] == 1.0
    assert cpu.fingerprint != found[("idle", "gpu")].fingerprint
    unknown = found[("noledger", "cpu")]
    assert unknown.subject == "bert" and unknown.details["cpu_used_ratio"] == 0.025


def test_job_idle_survives_a_collection_gap_and_resolves_when_finished(engine: Engine) -> None:
    detector, book = WasteDetector(SETTINGS), AlertBook()
    with Session(engine) as session, session.begin():
        rollups(session, "idle", 40, cpu=0.1, end=NOW - timedelta(hours=1))
        ledger(session, "idle", "bert-abcd")
    with Session(engine) as session, session.begin():
        signals = detector.check(session, NOW - timedelta(hours=1))
        assert [t.new_state for t in book.apply_round(detector.KINDS, signals, session, NOW)] == ["firing"]
    later = NOW + timedelta(minutes=5)  # an hour without samples (the watchdog was down)
    with Session(engine) as session, session.begin():
        signals = detector.check(session, later)
        assert [s.details["job_uid"] for s in signals] == ["idle"]
        assert book.apply_round(detector.KINDS, signals, session, later) == []
    with Session(engine) as session, session.begin():
        session.execute(update(JobRun).where(JobRun.uid == "idle").values(finished_at=later))
    with Session(engine) as session, session.begin():
        signals = detector.check(session, later)
        assert signals == []
        assert [t.new_state for t in book.apply_round(detector.KINDS, signals, session, later)] == ["resolved"]


def test_job_idle_resolves_when_usage_rises(engine: Engine) -> None:
    detector = WasteDetector(SETTINGS)
    with Session(engine) as session, session.begin():
        rollups(session, "j", 40, cpu=0.1)
        ledger(session, "j", "bert-abcd")
    with Session(engine) as session:
        assert len(detector.check(session, NOW)) == 1
    with Session(engine) as session, session.begin():
        rollups(session, "j", 30, cpu=6.0, end=NOW + timedelta(minutes=30))
    with Session(engine) as session:
        assert detector.check(session, NOW + timedelta(minutes=30)) == []


def test_job_idle_reads_only_new_buckets_and_agrees_with_a_fresh_read(engine: Engine) -> None:
    """A detector kept across checks (as the app keeps it) reads only the buckets that can still change,
    yet says what a new detector reading the whole window says, minute after minute, while the open
    bucket's rows keep growing and a job turns idle, then busy."""
    kept = WasteDetector(SETTINGS, settle_seconds=60)
    start = NOW - timedelta(minutes=45)
    with Session(engine) as session, session.begin():
        ledger(session, "a", "bert-aaaa")
        ledger(session, "b", "bert-bbbb")
    rows: dict[tuple[str, datetime], UsageRollup] = {}
    for minute in range(80):
        now = start + timedelta(minutes=minute)
        bucket = datetime.fromtimestamp(now.timestamp() // 300 * 300, UTC)
        with Session(engine) as session, session.begin():
            for uid, cpu in (("a", 0.1), ("b", 0.1 if minute < 60 else 6.0)):
                row = rows.get((uid, bucket))
                if row is None:
                    row = rows[(uid, bucket)] = UsageRollup(
                        bucket_start=bucket, bucket_seconds=300, namespace="ml", pod=f"{uid}-0", container="main",
                        job_uid=uid, workload="bert", queue="research-nlp", samples=0, cpu_cores_sum=0.0,
                        cpu_cores_max=0.0, memory_bytes_sum=0.0, memory_bytes_max=0.0, gpu_samples=0,
                        gpu_util_sum=0.0, gpu_util_max=0.0, cpu_request_cores=8.0, memory_request_bytes=2**34,
                        gpu_request=0.0)
                    session.add(row)
                else:
                    row = session.merge(row)
                row.samples += 2
                row.cpu_cores_sum += 2 * cpu
                rows[(uid, bucket)] = row
            session.flush()
            session.expunge_all()
        with Session(engine) as session:
            got = kept.check(session, now)
            fresh = WasteDetector(SETTINGS, settle_seconds=60).check(session, now)
        assert sorted((s.fingerprint, s.summary) for s in got) == sorted((s.fingerprint, s.summary) for s in fresh), now
    assert {s.details["job_uid"] for s in got} == {"a"}
    cache = kept._cache
    assert cache.partial_reads > 3 * cache.full_reads  # a full read once per 30-minute window
    # Checks missed for 5 minutes (a database outage) while a held-back flush lands in a settled bucket.
    settled = datetime.fromtimestamp((now - timedelta(minutes=20)).timestamp() // 300 * 300, UTC)
    with Session(engine) as session, session.begin():
        late = session.merge(rows[("a", settled)])
        late.samples += 20
        late.cpu_cores_sum += 20 * 8.0
    later = now + timedelta(minutes=5)
    with Session(engine) as session:
        got = kept.check(session, later)
        fresh = WasteDetector(SETTINGS, settle_seconds=60).check(session, later)
    assert sorted((s.fingerprint, s.summary) for s in got) == sorted((s.fingerprint, s.summary) for s in fresh)


def test_job_idle_forgets_the_figures_of_runs_gone_from_the_cluster(engine: Engine) -> None:
    """The cache holds the window of the runs that exist, not of every run that had usage in it: a busy
    hour's finished jobs (thousands) would otherwise stay in memory for the whole window. Until the informers
    have listed, nothing is forgotten; the live job's alert is the same either way."""
    live = {"idle", "gone"}
    synced = [False]
    kept = WasteDetector(SETTINGS, settle_seconds=60, live=lambda: set(live), synced=lambda: synced[0])
    with Session(engine) as session, session.begin():
        for uid in ("idle", "gone"):
            rollups(session, uid, 40, cpu=0.1)
            ledger(session, uid, f"bert-{uid}")

    def cached() -> set[str]:
        return {uid for jobs in kept._cache.buckets.values() for uid in jobs}

    with Session(engine) as session:
        assert {s.details["job_uid"] for s in kept.check(session, NOW)} == {"idle", "gone"}
    assert cached() == {"idle", "gone"}
    synced[0] = True
    live.discard("gone")  # deleted: the index no longer holds it
    later = NOW + timedelta(minutes=1)
    with Session(engine) as session:
        got = kept.check(session, later)
        fresh = WasteDetector(SETTINGS, settle_seconds=60).check(session, later)
    assert cached() == {"idle"}
    assert {s.details["job_uid"] for s in got} == {"idle"}
    assert [s for s in got] == [s for s in fresh if s.details["job_uid"] == "idle"]


def test_job_idle_reads_the_window_of_live_runs_only(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once per window the whole window is read again; its rows cover every run that had usage in it, most of
    them finished and gone. Only the live runs' figures are built: building all of them to forget the dead
    ones right after was a transient of tens of MB at 300k pods a day (bench/soak.py), and the heap it grew
    stayed. The live run's alert is the one a detector that knows nothing of liveness raises."""
    with Session(engine) as session, session.begin():
        rollups(session, "idle", 40, cpu=0.1)
        ledger(session, "idle", "bert-idle")
        for i in range(50):
            rollups(session, f"gone-{i}", 40, cpu=0.1)
    built: list[str] = []

    class Counted(waste._Figures):
        __slots__ = ()

        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            built.append(kw["workload"])

    monkeypatch.setattr(waste, "_Figures", Counted)
    detector = WasteDetector(SETTINGS, settle_seconds=60, live=lambda: {"idle"})
    with Session(engine) as session:
        got = detector.check(session, NOW)
        assert detector._cache.full_reads == 1
        window = sum("idle" in jobs for jobs in detector._cache.buckets.values())
        assert window >= 25 and len(built) == window  # the live run's buckets; the 50 gone runs' never built
        fresh = WasteDetector(SETTINGS, settle_seconds=60).check(session, NOW)
    assert [s.details["job_uid"] for s in got] == ["idle"]
    assert got == [s for s in fresh if s.details["job_uid"] == "idle"]


def test_over_requested_reads_columns_not_a_day_of_job_run_objects(engine: Engine) -> None:
    # The report window holds a day of runs and the check runs every minute: it streams the columns a
    # signal needs. Whole JobRun objects for every matching run were tens of MB built and dropped each time.
    with Session(engine) as session, session.begin():
        for i in range(300):
            ledger(session, f"run-{i}", f"short-{i:04d}-abcd", finished=NOW - timedelta(seconds=600), ran=60 + i,
                   requested_cpu_cores=4, cpu_core_seconds_requested=4.0 * 600, cpu_core_seconds_used=1.0)
        ledger(session, "long", "long-abcd", finished=NOW - timedelta(seconds=600), ran=1200, requested_cpu_cores=4,
               cpu_core_seconds_requested=4.0 * 1200, cpu_core_seconds_used=1.0)
    loaded: list[object] = []

    def on_load(target: object, _: object) -> None:
        loaded.append(target)

    event.listen(JobRun, "load", on_load)
    try:
        with Session(engine) as session:
            signals = WasteDetector(SETTINGS).check(session, NOW)
    finally:
        event.remove(JobRun, "load", on_load)
    assert [s.details["job_uid"] for s in signals if s.kind == "OverRequested"] == ["long"]
    assert loaded == []


def test_over_requested_leaves_runs_too_short_to_judge_in_the_database(engine: Engine) -> None:
    """The duration filter is SQL too (julianday() on SQLite, epoch on PostgreSQL): the window holds a day of
    runs, most of them short, and they were read and dropped in Python every minute. The boundary stays the
    Python check's (a run of exactly the minimum counts), and a run deleted while running is judged to its
    deletion."""
    minimum = SETTINGS.over_requested_min_seconds
    ago = NOW - timedelta(seconds=600)
    low = {"requested_cpu_cores": 4, "cpu_core_seconds_requested": 4.0 * 3600, "cpu_core_seconds_used": 1.0}
    with Session(engine) as session, session.begin():
        for i in range(200):
            ledger(session, f"short-{i}", f"short-{i:04d}-abcd", finished=ago, ran=60 + i, **low)
        for uid, ran in (("under", minimum - 0.5), ("exact", minimum), ("over", minimum + 0.5)):
            ledger(session, uid, f"{uid}-abcd", finished=ago, ran=ran, **low)
        ledger(session, "deleted", "deleted-abcd", ran=600 + 1400, deleted_at=ago, object_deleted=True, **low)
        ledger(session, "deleted-short", "deleted-short-abcd", ran=600 + 100, deleted_at=ago, object_deleted=True,
               **low)
    detector = WasteDetector(SETTINGS)
    with Session(engine) as session:
        read = {row.uid for row in detector._over_candidates(session, NOW)}
        signals = detector.check(session, NOW)
    assert {"exact", "over", "deleted"} <= read <= {"under", "exact", "over", "deleted"}
    assert {s.details["job_uid"] for s in signals if s.kind == "OverRequested"} == {"exact", "over", "deleted"}


def test_over_requested(engine: Engine) -> None:
    gib = 2**30
    runs = {  # uid: (cpu used / requested core-seconds, memory used / requested byte-seconds, ran, finished ago)
        "batch": (1 / 16, 0.15, 1200, 600),
        "mild": (0.2, 0.5, 1200, 600),
        "good": (0.7, 0.6, 1200, 600),
        "short": (0.01, 0.01, 300, 600),
        "nodata": (0.0, 0.0, 1200, 600),
        "settling": (0.01, 0.01, 1200, 30),
        "old": (0.01, 0.01, 1200, 3 * 86400),
    }
    with Session(engine) as session, session.begin():
        for uid, (cpu, mem, ran, ago) in runs.items():
            ledger(session, uid, f"{uid}-abcd", finished=NOW - timedelta(seconds=ago), ran=ran,
                   requested_cpu_cores=16, cpu_core_seconds_requested=16 * ran, cpu_core_seconds_used=16 * ran * cpu,
                   memory_byte_seconds_requested=32 * gib * ran, memory_byte_seconds_used=32 * gib * ran * mem)
        ledger(session, "running", "running-abcd", cpu_core_seconds_requested=1e6, cpu_core_seconds_used=1.0)
    with Session(engine) as session:
        signals = WasteDetector(SETTINGS).check(session, NOW)
    found = {s.details["job_uid"]: s for s in signals}
    assert set(found) == {"batch", "mild"}
    batch = found["batch"]
    assert batch.kind == "OverRequested" and batch.severity == "warning" and batch.for_seconds == 0
    assert batch.details["used_ratio"] == {"cpu": 0.0625, "memory": 0.15}
    assert "cpu 6%" in batch.summary and "memory 15%" in batch.summary and "20 min" in batch.summary
    assert found["mild"].severity == "info" and "memory" not in found["mild"].summary
