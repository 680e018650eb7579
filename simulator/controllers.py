"""Volcano's job controller and the Kubeflow training operator, as the driver plays them, on top of Volcano's
scheduler (simulator.allocate)."""

from __future__ import annotations

import functools
import logging

from volcano_monitor.simulator import objects as o
from volcano_monitor.simulator.adopt import workload_from_job
from volcano_monitor.simulator.allocate import Allocation
from volcano_monitor.simulator.resources import CRONJOBS, JOBS, PODGROUPS, PODS
from volcano_monitor.simulator.specs import TaskSpec, Workload
from volcano_monitor.simulator.state import (
    TERMINAL_JOB_PHASES,
    Obj,
    PodSim,
    RunSim,
    min_resources,
    pod_counts,
    task_requests,
)
from volcano_monitor.simulator.store import ApiError

log = logging.getLogger(__name__)

NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for generated names

KILL_ACTIONS = {"CompleteJob": "Completing", "AbortJob": "Aborting", "TerminateJob": "Terminating"}
KILLING = ("Restarting", "Completing", "Aborting", "Terminating")
AFTER_KILL = {"Completing": "Completed", "Aborting": "Aborted", "Terminating": "Terminated"}
# Scenario seconds from a Job's deletion to the garbage collector deleting its pods / its PodGroup
# (as recorded on a real cluster).
GC_PODS_DELAY = 15.0
GC_PODGROUP_DELAY = 18.0
GC_GRACE = 0.05  # the recorded pods went within milliseconds of their deletionTimestamp


class Controllers(Allocation):
    """Submission, Volcano's job controller and the training operator, on top of Volcano's scheduler
    (enqueue + allocate + preempt) and the kubelet."""

    # ---- submission -----------------------------------------------------------------------------------

    def _new_name(self, workload: Workload) -> str:
        if workload.cron:  # as Volcano's (and Kubernetes') CronJob controller: <cron>-<scheduled minute>
            return f"{workload.cron}-{int(self.now // 60)}"
        while True:
            name = f"{workload.name}-{''.join(self._rng.choice(NAME_ALPHABET) for _ in range(4))}"
            if (workload.namespace, name) not in self.runs:
                return name

    def _submit(self, workload: Workload) -> None:
        run = RunSim(workload, self._new_name(workload), created=self.now, state_time=self.now,
                     min_resources=min_resources(workload))
        if run.is_vcjob:
            if workload.cron:
                cron = self.store.get(CRONJOBS, workload.namespace, workload.cron) if CRONJOBS in self.store.buckets \
                    else None
                run.owner_uid = cron["metadata"]["uid"] if cron is not None else ""
            try:
                created = self.store.create(JOBS, o.job_object(run))
            except ApiError as exc:  # someone took the name: try again later
                log.warning("cannot submit %s/%s: %s", run.namespace, run.name, exc.message)
                self._after(workload.pause, lambda: self._submit(workload))
                return
            self._begin_job(run, created["metadata"]["uid"])
            if workload.delete_after is not None:
                self._after(workload.delete_after, lambda: self._delete(JOBS, run.namespace, run.name))
            return
        run.owner_uid = self._uuid()
        run.pg_name = run.name
        self.runs[(run.namespace, run.name)] = run
        run.pg_uid = self.store.upsert(PODGROUPS, o.podgroup_object(run))["metadata"]["uid"]
        self._create_pods(run)  # the training operator creates the pods at once; Volcano holds them
        self._request_schedule()

    def _begin_job(self, run: RunSim, uid: str) -> None:
        """A Volcano Job in the store (ours, or adopted): Pending, with its PodGroup."""
        run.uid = uid
        run.pg_name = f"{run.name}-{run.uid}"
        self.runs[(run.namespace, run.name)] = run
        self._set_phase(run, "Pending")
        run.pg_uid = self.store.upsert(PODGROUPS, o.podgroup_object(run))["metadata"]["uid"]
        self._request_schedule()

    def _adopt(self, obj: Obj) -> None:
        """A Job someone else created through the API: play it as a run of its own (simulator.adopt)."""
        meta = obj.get("metadata") or {}
        workload = workload_from_job(obj)
        if not workload.tasks:
            log.warning("not adopting job %s/%s: no tasks", meta.get("namespace"), meta.get("name"))
            return
        run = RunSim(workload, workload.name, created=self.now, state_time=self.now,
                     min_resources=min_resources(workload))
        self._begin_job(run, str(meta.get("uid")))

    def _create_pods(self, run: RunSim) -> None:
        for task in run.workload.tasks:
            for index in range(task.replicas):
                name = f"{run.name}-{task.name}-{index}"
                if name in run.pods:
                    continue
                self._create_pod(run, task, index)

    def _create_pod(self, run: RunSim, task: TaskSpec, index: int) -> None:
        name = f"{run.name}-{task.name}-{index}"
        pod = PodSim(run, task, index, name, created=self.now, requests=task_requests(task))
        try:
            created = self.store.create(PODS, o.pod_object(pod))
        except ApiError as exc:
            log.warning("cannot create pod %s/%s: %s", run.namespace, name, exc.message)
            return
        pod.uid = created["metadata"]["uid"]
        run.pods[name] = pod
        self.pods[(run.namespace, name)] = pod
        self._request_schedule()

    # ---- the job controller and the training operator ----------------------------------------------

    def _sync_run(self, run: RunSim) -> None:
        """The job controller reacts to a pod change at once; the scheduler (PodGroup status) at its
        next cycle."""
        self._request_schedule()
        if run.is_vcjob:
            self._job_sync(run)
        else:
            self._operator_sync(run)

    def _pod_finished(self, pod: PodSim) -> None:
        run = pod.run
        if run.is_vcjob and not run.finished and not run.orphaned:
            action = None
            if pod.phase == "Failed":
                action = self._policy(run, pod.task, "PodFailed")
            elif all(p.phase == "Succeeded" for p in run.pods.values()
                     if p.task.name == pod.task.name and not p.removed):
                action = self._policy(run, pod.task, "TaskCompleted")
            if action is not None and run.phase in ("Pending", "Running"):
                self._job_action(run, action, pod)
        self._sync_run(run)
        self._request_schedule()

    @staticmethod
    def _policy(run: RunSim, task: TaskSpec, event: str) -> str | None:
        for policy in (*task.policies, *run.workload.policies):
            events = [policy.get("event"), *(policy.get("events") or [])]
            if event in events or "*" in events:
                return str(policy.get("action"))
        return None

    def _job_action(self, run: RunSim, action: str, pod: PodSim) -> None:
        """Volcano's kill path: pods deleted (finished ones kept, except on a restart that has retries
        left), the PodGroup deleted, the phase written with a new version."""
        self._command_action(run, action)

    def _command_action(self, run: RunSim, action: str) -> None:
        """`_job_action` for a pod's policy or a bus Command (simulator.commands)."""
        self._record(self._job_ref(run), "Normal", "ExecuteAction", f"Start to execute action {action} ",
                     component="vc-controller-manager")
        if action == "RestartJob":
            run.retry_count += 1
            self._kill(run, retain_finished=run.retry_count >= run.workload.max_retry)
            phase = "Restarting"
        elif action in KILL_ACTIONS:
            self._kill(run, retain_finished=True)
            phase = KILL_ACTIONS[action]
        else:
            return
        self._delete_podgroup(run)
        self._set_phase(run, phase)

    def _kill(self, run: RunSim, retain_finished: bool) -> None:
        for pod in list(run.pods.values()):
            if retain_finished and pod.phase in ("Succeeded", "Failed"):
                continue
            self._delete_pod(pod)

    def _set_phase(self, run: RunSim, phase: str, reason: str = "", message: str = "") -> None:
        """Write the new phase at once: each transition is its own status write (and condition), as
        in Volcano, even when the next one follows in the same sync (Pending -> Running -> Failed)."""
        if run.phase == phase and run.conditions:
            return
        previous = run.phase
        run.phase, run.state_reason, run.state_message = phase, reason, message
        if phase in KILLING or AFTER_KILL.get(previous) == phase:
            run.status_mode = "kill"
            run.version += 1
        else:
            run.status_mode = "sync"
        self._write_run(run)

    def _job_sync(self, run: RunSim) -> None:
        """Volcano's job state machine, driven by the pods' phases."""
        if run.finished or run.orphaned:
            return
        self._dirty_runs[run] = None
        counts = pod_counts(run)
        total, min_available = run.workload.replicas, run.workload.min_member
        if run.phase == "Pending" and counts["running"] + counts["succeeded"] + counts["failed"] >= min_available:
            self._set_phase(run, "Running")
        if run.phase == "Running":
            if counts["succeeded"] + counts["failed"] == total:
                self._set_phase(run, "Completed" if counts["succeeded"] >= min_available else "Failed")
        elif run.phase in AFTER_KILL:
            if counts["terminating"] == counts["pending"] == counts["running"] == 0:
                self._set_phase(run, AFTER_KILL[run.phase])
        elif run.phase == "Restarting":
            if run.retry_count >= run.workload.max_retry:
                self._set_phase(run, "Failed")
            elif not [p for p in run.pods.values() if not p.removed]:
                self._restart(run)
        if run.phase in TERMINAL_JOB_PHASES:
            self._finish(run)

    def _restart(self, run: RunSim) -> None:
        """The old pods are gone: new ones with the same names (new UIDs), a new PodGroup."""
        self._create_pods(run)
        self._set_phase(run, "Pending")
        self._create_podgroup(run)
        self._request_schedule()

    def _create_podgroup(self, run: RunSim) -> None:
        run.pg_phase, run.pg_conditions, run.pg_counts = "", {}, (0, 0, 0)
        run.pg_unschedulable = run.pg_deleted = False
        run.pg_uid = self.store.upsert(PODGROUPS, o.podgroup_object(run))["metadata"]["uid"]

    def _delete_podgroup(self, run: RunSim) -> None:
        run.pg_deleted = True
        self._delete(PODGROUPS, run.namespace, run.pg_name)

    def _operator_sync(self, run: RunSim) -> None:
        """The training operator: the job is done when every replica succeeded (or one failed)."""
        if run.finished:
            return
        self._dirty_runs[run] = None
        pods = [p for p in run.pods.values() if not p.removed]
        failed = any(p.phase == "Failed" for p in pods)
        if failed or (len(pods) == run.workload.replicas and all(p.phase == "Succeeded" for p in pods)):
            run.phase = "Failed" if failed else "Succeeded"
            self._finish(run)

    def _finish(self, run: RunSim) -> None:
        """A Volcano Job's PodGroup is deleted and its status rewritten once more without the pod
        counts (runningDuration in whole seconds, a new version); a PyTorchJob's group is Completed."""
        run.finished_at = self.now
        if run.phase != "Completed":
            self._kill(run, retain_finished=True)
        if run.is_vcjob:
            self._delete_podgroup(run)
            run.status_mode = "final"
            run.version += 1
            self._write_run(run)
        else:
            run.pg_phase = "Completed"
            run.pg_unschedulable = False
        self._dirty_runs[run] = None
        workload = run.workload
        self._after(workload.ttl_after_finished, lambda: self._gc(run))
        if workload.repeat:
            self._after(workload.pause, lambda: self._submit(workload))

    def _orphan(self, run: RunSim) -> None:
        """The Job was deleted (no finalizer, no Terminating phase): Kubernetes' garbage collector
        deletes its pods and, a little later, its PodGroup, which the scheduler meanwhile moves back
        to Pending and Inqueue once its pods are gone."""
        run.orphaned = True
        self._dirty_runs.pop(run, None)
        self._after(GC_PODS_DELAY, lambda: self._gc_pods(run))
        self._after(GC_PODGROUP_DELAY, lambda: self._gc(run, job_in_store=False))

    def _gc_pods(self, run: RunSim) -> None:
        for pod in list(run.pods.values()):
            self._delete_pod(pod)
            self._after(GC_GRACE, functools.partial(self._remove_pod, pod))

    def _gc(self, run: RunSim, job_in_store: bool = True) -> None:
        """Delete a run's job, PodGroup and pods (the TTL controller and the garbage collector)."""
        if self.runs.get((run.namespace, run.name)) is not run:
            return
        del self.runs[(run.namespace, run.name)]
        self._dirty_runs.pop(run, None)
        if run.is_vcjob and job_in_store:
            self._delete(JOBS, run.namespace, run.name)
        self._delete(PODGROUPS, run.namespace, run.pg_name)
        run.finished_at = run.finished_at or self.now
        for pod in list(run.pods.values()):
            self._remove_pod(pod)
