"""Volcano's job controller and scheduler, and the Kubeflow training operator, as the driver plays them."""

from __future__ import annotations

import logging

from simulator import objects as o
from simulator.kubelet import Kubelet
from simulator.quantity import Resources
from simulator.resources import JOBS, NODES, PODGROUPS, PODS, QUEUES
from simulator.scenario import TaskSpec, Workload
from simulator.scheduler import QueueView, gang_message, headroom, place, queue_chain, queue_view, take
from simulator.state import (
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
from simulator.store import ApiError

log = logging.getLogger(__name__)

NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for generated names


class Controllers(Kubelet):
    """Submission, Volcano's scheduler (enqueue + allocate), Volcano's job controller and the training
    operator, on top of the kubelet."""

    # ---- submission -----------------------------------------------------------------------------------

    def _new_name(self, workload: Workload) -> str:
        while True:
            name = f"{workload.name}-{''.join(self._rng.choice(NAME_ALPHABET) for _ in range(4))}"
            if (workload.namespace, name) not in self.runs:
                return name

    def _submit(self, workload: Workload) -> None:
        run = RunSim(workload, self._new_name(workload), created=self.now, state_time=self.now,
                     min_resources=min_resources(workload))
        if run.is_vcjob:
            try:
                created = self.store.create(JOBS, o.job_object(run))
            except ApiError as exc:  # someone took the name: try again later
                log.warning("cannot submit %s/%s: %s", run.namespace, run.name, exc.message)
                self._after(workload.pause, lambda: self._submit(workload))
                return
            run.uid = created["metadata"]["uid"]
            run.pg_name = f"{run.name}-{run.uid}"
            self.runs[(run.namespace, run.name)] = run
            self._set_phase(run, "Pending")
        else:
            run.owner_uid = self._uuid()
            run.pg_name = run.name
            self.runs[(run.namespace, run.name)] = run
        run.pg_uid = self.store.upsert(PODGROUPS, o.podgroup_object(run))["metadata"]["uid"]
        if not run.is_vcjob:  # the training operator creates the pods at once; Volcano holds them
            self._create_pods(run)
        self._request_schedule()

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
        for run in sorted(self.runs.values(), key=lambda r: (r.created, r.name)):
            if run.finished:
                continue
            chain = queue_chain(run.queue, queues)
            if run.pg_phase == "Pending" and not self._enqueue(run, queues, chain, room):
                continue
            if run.pg_phase in ("Inqueue", "Running", "Unknown"):
                self._allocate(run, nodes, cordoned, chain, room)
        self._flush()

    def _enqueue(self, run: RunSim, queues: dict[str, QueueView], chain: list[str],
                 room: dict[str, Resources | None]) -> bool:
        if run.is_vcjob and run.phase != "Pending":
            return False
        view = queues.get(run.queue)
        blocked = None
        if view is None:
            message = f"queue {run.queue} does not exist"
        elif view.state != "Open":
            message = f"queue {run.queue} is {view.state.lower()}"
        else:
            for name in chain:
                left = room.get(name)
                if left is not None and any(run.min_resources.get(r, 0.0) > free + 1e-9 for r, free in left.items()):
                    blocked = name
                    break
            message = f"queue resource quota insufficient (queue {blocked})" if blocked else ""
        if message:
            self._pg_condition(run, "Unschedulable", "NotEnoughResources", message)
            self._record(self._pg_ref(run), "Normal", "Unschedulable", message, series=("Unschedulable",))
            return False
        run.pg_phase = "Inqueue"
        self._dirty_runs[run] = None
        if run.is_vcjob and not run.pods:
            self._create_pods(run)
        return True

    def _allocate(self, run: RunSim, nodes: list[NodeSim], cordoned: set[str], chain: list[str],
                  room: dict[str, Resources | None]) -> None:
        order = {t.name: i for i, t in enumerate(run.workload.tasks)}
        pending = sorted((p for p in run.pods.values() if p.active and p.node is None and p.phase == "Pending"),
                         key=lambda p: (order.get(p.task.name, 0), p.index))
        if pending:
            placement = place(pending, nodes, cordoned, chain, room)
            held = sum(1 for p in run.pods.values() if p.active and (p.holding or p.phase == "Succeeded"))
            schedulable = 0
            if run.workload.gang and held + len(placement.plan) < run.workload.min_member:
                schedulable = len(placement.plan)  # Volcano discards a gang that does not fit whole
                placement.plan = []
            for pod, node in placement.plan:
                take(room, chain, pod.requests)
                self._bind(pod, node)
            placed = {pod for pod, _ in placement.plan}
            unplaced = [p for p in pending if p not in placed]
            run.pg_unschedulable = bool(unplaced)
            if unplaced:
                message = gang_message(run, schedulable, len(placement.failures))
                self._pg_condition(run, "Unschedulable", "NotEnoughResources", message)
                self._record(self._pg_ref(run), "Warning", "Unschedulable", message, series=("Unschedulable",))
                for pod in unplaced:
                    self._pod_unschedulable(pod, placement.failures.get(pod, message))
        self._pg_sync(run)

    def _pod_unschedulable(self, pod: PodSim, message: str) -> None:
        if pod.unschedulable != message:
            if pod.unschedulable is None:
                pod.unschedulable_since = self.now
            pod.unschedulable = message
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
        """PodGroup phase as Volcano's scheduler derives it (jobStatus in its session)."""
        if run.finished or run.pg_phase == "Pending" or run.phase in ("Completing", "Restarting"):
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
            if "Scheduled" not in run.pg_conditions:
                self._pg_condition(run, "Scheduled", "tasks in gang are ready to be scheduled")
                self._record(self._pg_ref(run), "Normal", "Scheduled", "pod group is ready")
        elif phase != "Inqueue":
            phase = "Inqueue"
        if phase != run.pg_phase:
            run.pg_phase = phase
            self._dirty_runs[run] = None

    # ---- the job controller and the training operator ----------------------------------------------

    def _sync_run(self, run: RunSim) -> None:
        self._pg_sync(run)
        if run.is_vcjob:
            self._job_sync(run)
        else:
            self._operator_sync(run)

    def _pod_finished(self, pod: PodSim) -> None:
        run = pod.run
        if run.is_vcjob and not run.finished:
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
        self._record(self._job_ref(run), "Normal", "ExecuteAction", f"Start to execute action {action} ")
        if action == "RestartJob":
            run.retry_count += 1
            self._set_phase(run, "Restarting", "PodFailed",
                            f"pod {pod.name} failed with exit code {pod.exit_code}; retry {run.retry_count}")
            self._kill(run, retain_finished=False)
        elif action == "CompleteJob":
            self._set_phase(run, "Completing", "TaskCompleted", f"task {pod.task.name} completed")
            self._kill(run, retain_finished=True)
        elif action == "AbortJob":
            self._set_phase(run, "Aborting")
            self._kill(run, retain_finished=True)
        elif action == "TerminateJob":
            self._set_phase(run, "Terminating")
            self._kill(run, retain_finished=True)

    def _kill(self, run: RunSim, retain_finished: bool) -> None:
        for pod in list(run.pods.values()):
            if retain_finished and pod.phase in ("Succeeded", "Failed"):
                continue
            self._delete_pod(pod)

    def _set_phase(self, run: RunSim, phase: str, reason: str = "", message: str = "") -> None:
        if run.phase == phase and run.conditions:
            return
        run.phase, run.state_reason, run.state_message, run.state_time = phase, reason, message, self.now
        run.conditions = [c for c in run.conditions if c[0] != phase] + [(phase, self.now)]
        self._dirty_runs[run] = None
        if phase in TERMINAL_JOB_PHASES or phase == "Restarting":
            self._record(self._job_ref(run), "Normal" if phase == "Completed" else "Warning", phase,
                         f"Job {run.namespace}/{run.name} {phase.lower()}"
                         + (f" (retry {run.retry_count} of {run.workload.max_retry})" if phase == "Restarting" else ""))

    def _job_sync(self, run: RunSim) -> None:
        """Volcano's job state machine, driven by the pods' phases."""
        if run.finished:
            return
        counts = pod_counts(run)
        total, min_available = run.workload.replicas, run.workload.min_member
        if run.phase == "Pending" and counts["running"] + counts["succeeded"] + counts["failed"] >= min_available:
            self._set_phase(run, "Running")
        if run.phase == "Running":
            if counts["succeeded"] + counts["failed"] == total:
                self._set_phase(run, "Completed" if counts["succeeded"] >= min_available else "Failed")
        elif run.phase in ("Completing", "Aborting", "Terminating"):
            if counts["terminating"] == counts["pending"] == counts["running"] == 0:
                self._set_phase(run, {"Completing": "Completed", "Aborting": "Aborted",
                                      "Terminating": "Terminated"}[run.phase])
        elif run.phase == "Restarting":
            if run.retry_count >= run.workload.max_retry:
                self._set_phase(run, "Failed", "MaxRetryExceeded",
                                f"job failed after {run.retry_count} retries (maxRetry {run.workload.max_retry})")
            elif total - counts["terminating"] >= min_available and not run.pods:
                run.version += 1
                self._set_phase(run, "Pending")
                run.pg_phase = "Pending"
                run.pg_unschedulable = False
                self._request_schedule()
        self._dirty_runs[run] = None
        if run.phase in TERMINAL_JOB_PHASES:
            self._finish(run)

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
        run.finished_at = self.now
        if run.phase != "Completed":
            self._kill(run, retain_finished=True)
        run.pg_phase = "Completed"
        run.pg_unschedulable = False
        self._dirty_runs[run] = None
        workload = run.workload
        self._after(workload.ttl_after_finished, lambda: self._gc(run))
        if workload.repeat:
            self._after(workload.pause, lambda: self._submit(workload))

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
