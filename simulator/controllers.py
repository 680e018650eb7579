"""Volcano's job controller and scheduler, and the Kubeflow training operator, as the driver plays them."""

from __future__ import annotations

import functools
import logging

from volcano_monitor.simulator import objects as o
from volcano_monitor.simulator.adopt import workload_from_job
from volcano_monitor.simulator.preempt import Preemption, priority
from volcano_monitor.simulator.quantity import Resources
from volcano_monitor.simulator.resources import CRONJOBS, JOBS, NODES, PODGROUPS, PODS, QUEUES
from volcano_monitor.simulator.scheduler import QueueView, gang_message, headroom, place, queue_chain, queue_view, take
from volcano_monitor.simulator.specs import TaskSpec, Workload
from volcano_monitor.simulator.state import (
    TERMINAL_JOB_PHASES,
    NodeSim,
    Obj,
    PodSim,
    RunSim,
    min_resources,
    pod_counts,
    rfc3339,
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


class Controllers(Preemption):
    """Submission, Volcano's scheduler (enqueue + allocate), Volcano's job controller and the training
    operator, on top of the kubelet."""

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

    # ---- the scheduler ---------------------------------------------------------------------------------

    def _schedule(self) -> None:
        queue_objs = self.store.objects(QUEUES)
        node_objs = self.store.objects(NODES)
        # Nothing to do unless pods, runs, queue specs or node specs changed since the last pass.
        signature = (self._epoch, *((q["metadata"]["name"], q["metadata"].get("generation")) for q in queue_objs),
                     *((n["metadata"]["name"], n["metadata"].get("generation")) for n in node_objs))
        if signature == self._scheduled_at:
            return
        self._scheduled_at = signature
        queues = queue_view(queue_objs)
        room = headroom(queues, self._queue_allocated())
        nodes = sorted(self.nodes.values(), key=lambda n: n.name)
        cordoned = {n["metadata"]["name"] for n in node_objs if (n.get("spec") or {}).get("unschedulable")}
        # Volcano's priority plugin orders jobs by priority first.
        for run in sorted(self.runs.values(), key=lambda r: (-priority(r.workload), r.created, r.name)):
            if run.finished:
                continue
            chain = queue_chain(run.queue, queues)
            if run.pg_deleted:
                continue
            if run.pg_phase in ("", "Pending"):
                had_pods = bool(run.pods)
                if not self._enqueue(run, queues, chain, room) or not had_pods:
                    continue  # new pods wait for the next cycle: the job controller creates them on Inqueue
            if run.pg_phase in ("Inqueue", "Running", "Unknown"):
                self._allocate(run, nodes, cordoned, chain, room)
                if run.pg_unschedulable:
                    self._preempt(run, nodes, cordoned)
        self._flush()

    def _enqueue(self, run: RunSim, queues: dict[str, QueueView], chain: list[str],
                 room: dict[str, Resources | None]) -> bool:
        """Volcano's enqueue action. A group its queue cannot admit stays `Pending` with no condition
        at all: only Events say why ("queue resource quota insufficient"), and every group starts
        with the gang plugin's "0/0 tasks in gang unschedulable" Warning, admitted or not."""
        self._record(self._pg_ref(run), "Warning", "Unschedulable",
                     f"0/{len(run.pods)} tasks in gang unschedulable: pod group is not ready, "
                     f"{run.workload.min_member} minAvailable", series=("Unschedulable",))
        view = queues.get(run.queue)
        if view is None:
            message = f"queue {run.queue} does not exist"
        elif view.state != "Open":
            message = f"queue {run.queue} is {view.state.lower()}"
        else:
            cluster = self._cluster_allocatable()
            too_big = any(amount > cluster.get(r, 0.0) + 1e-9 for r, amount in run.min_resources.items())
            capped = any(left is not None and any(run.min_resources.get(r, 0.0) > free + 1e-9
                                                  for r, free in left.items())
                         for left in (room.get(name) for name in chain))
            message = "queue resource quota insufficient" if too_big or capped else ""
        if message:
            if run.pg_phase != "Pending":
                run.pg_phase = "Pending"
                self._dirty_runs[run] = None
            self._record(self._pg_ref(run), "Normal", "Unschedulable", message, series=("Unschedulable",))
            return False
        run.pg_phase = "Inqueue"
        self._dirty_runs[run] = None
        if run.is_vcjob and not run.pods and not run.orphaned:
            self._write_run(run)  # the job controller sees Inqueue, then creates the pods
            self._create_pods(run)
        return True

    def _cluster_allocatable(self) -> Resources:
        total: Resources = {}
        for node in self.nodes.values():
            for name, amount in node.allocatable.items():
                total[name] = total.get(name, 0.0) + amount
        return total

    def _allocate(self, run: RunSim, nodes: list[NodeSim], cordoned: set[str], chain: list[str],
                  room: dict[str, Resources | None]) -> None:
        order = {t.name: i for i, t in enumerate(run.workload.tasks)}
        pending = sorted((p for p in run.pods.values() if p.active and p.node is None and p.phase == "Pending"),
                         key=lambda p: (order.get(p.task.name, 0), p.index))
        if pending:
            placement = place(pending, nodes, cordoned, chain, room)
            held = sum(1 for p in run.pods.values() if p.active and (p.holding or p.phase == "Succeeded"))
            schedulable = 0
            discarded: list[tuple[PodSim, NodeSim]] = []
            if run.workload.gang and held + len(placement.plan) < run.workload.min_member:
                schedulable = len(placement.plan)  # Volcano discards a gang that does not fit whole
                discarded, placement.plan = placement.plan, []
            for pod, node in placement.plan:
                take(room, chain, pod.requests)
                self._bind(pod, node)
            placed = {pod for pod, _ in placement.plan}
            unplaced = [p for p in pending if p not in placed]
            run.pg_unschedulable = bool(unplaced)
            if unplaced:
                origin = next(iter(placement.failures.items()), None)
                message = gang_message(run, schedulable, len(placement.failures), origin)
                reason = f"{len(placement.failures)}/{message.split('/', 1)[1]}"
                self._pg_condition(run, "Unschedulable", "NotEnoughResources", reason)
                if run.is_vcjob:
                    self._record(self._job_ref(run), "Warning", "PodGroupPending",
                                 f"PodGroup {run.namespace}:{run.name} unschedulable, reason: {reason}",
                                 component="vc-controller-manager", series=("PodGroupPending",))
                self._record(self._pg_ref(run), "Warning", "Unschedulable", message, series=("Unschedulable",))
                could = dict(discarded)
                for pod in unplaced:
                    if pod in could:
                        message = (f"Pod {pod.namespace}/{pod.name} can possibly be assigned to "
                                   f"{could[pod].name}, once minAvailable is satisfied")
                        self._pod_unschedulable(pod, message, "Schedulable")
                    else:
                        self._pod_unschedulable(pod, placement.failures.get(pod, message))
        self._pg_sync(run)

    def _pod_unschedulable(self, pod: PodSim, message: str, reason: str = "Unschedulable") -> None:
        if pod.unschedulable != message or pod.unschedulable_reason != reason:
            if pod.unschedulable is None or pod.unschedulable_reason != reason:
                pod.unschedulable_since = self.now
            pod.unschedulable, pod.unschedulable_reason = message, reason
            self._dirty_pods[pod] = None
        self._record(self._pod_ref(pod), "Warning", "FailedScheduling", message, series=("FailedScheduling",))

    def _pg_condition(self, run: RunSim, kind: str, reason: str, message: str = "") -> None:
        current = run.pg_conditions.get(kind)
        if current is not None and current.get("reason") == reason and current.get("message", "") == message:
            return
        cond: Obj = {"type": kind, "status": "True", "reason": reason, "transitionID": self._uuid(),
                     "lastTransitionTime": current["lastTransitionTime"] if current else rfc3339(self.now)}
        if message:
            cond["message"] = message
        run.pg_conditions[kind] = cond
        self._dirty_runs[run] = None

    def _pg_sync(self, run: RunSim) -> None:
        """PodGroup phase as Volcano's scheduler derives it (jobStatus in its session). Its `Scheduled`
        condition is rewritten (new transitionID and time) whenever the group's pod counts change."""
        if run.pg_deleted or run.pg_phase in ("", "Pending") or run.phase in ("Completing", "Restarting"):
            return
        if run.finished and run.is_vcjob:
            return
        active = [p for p in run.pods.values() if p.active]
        allocated = sum(1 for p in active if p.holding or p.phase == "Succeeded")
        running = sum(1 for p in active if p.phase == "Running")
        succeeded = sum(1 for p in active if p.phase == "Succeeded")
        phase = run.pg_phase
        if running and run.pg_unschedulable:
            phase = "Unknown"
        elif allocated >= run.workload.min_member:
            phase = "Completed" if succeeded == allocated else "Running"
            counts = (running, succeeded, sum(1 for p in active if p.phase == "Failed"))
            if "Scheduled" not in run.pg_conditions or counts != run.pg_counts:
                run.pg_counts = counts
                run.pg_conditions.pop("Scheduled", None)
                self._pg_condition(run, "Scheduled", "tasks in gang are ready to be scheduled")
                self._record(self._pg_ref(run), "Normal", "Scheduled", "pod group is ready",
                             series=("Scheduled",))
        elif phase != "Inqueue":
            phase = "Pending"  # fewer than minMember hold resources (pods gone): enqueued again
            self._request_schedule()
        if phase != run.pg_phase:
            run.pg_phase = phase
            self._dirty_runs[run] = None

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
