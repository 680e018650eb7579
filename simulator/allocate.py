"""Volcano's scheduler as the driver plays it: each cycle's enqueue and allocate actions (then `preempt`,
simulator.preempt, for a job that still does not fit) and the PodGroup status the scheduler writes.

A layer of its own between the preempt action and the controllers (simulator.controllers: submission,
Volcano's job controller, the training operator), as Volcano's scheduler is a process apart from its
controllers: it reads queues, nodes and runs and binds pods; the only controller step it calls is the job
controller creating a job's pods once its PodGroup is Inqueue. The placement arithmetic (queue headroom,
which node fits a pod, Volcano's messages) is in simulator.scheduler.
"""

from __future__ import annotations

from volcano_monitor.simulator import topology
from volcano_monitor.simulator.preempt import Preemption, priority
from volcano_monitor.simulator.quantity import Resources
from volcano_monitor.simulator.resources import HYPERNODES, NODES, QUEUES
from volcano_monitor.simulator.scheduler import (
    Headroom,
    Placement,
    QueueView,
    gang_message,
    headroom,
    place,
    queue_chain,
    queue_view,
    take,
)
from volcano_monitor.simulator.specs import DEVICE_MANAGED
from volcano_monitor.simulator.state import NodeSim, Obj, PodSim, RunSim, rfc3339


class Allocation(Preemption):
    """Volcano's scheduler cycle (enqueue, allocate, preempt) and its PodGroup status, on top of the kubelet."""

    def _schedule(self) -> None:
        queue_objs = self.store.objects(QUEUES)
        node_objs = self.store.objects(NODES)
        hypernode_objs = self.store.objects(HYPERNODES) if HYPERNODES in self.store.buckets else []
        # Nothing to do unless pods, runs, queue, node or HyperNode specs changed since the last pass.
        signature = (self._epoch, *((q["metadata"]["name"], q["metadata"].get("generation")) for q in queue_objs),
                     *((n["metadata"]["name"], n["metadata"].get("generation")) for n in node_objs),
                     *((h["metadata"]["name"], h["metadata"].get("generation")) for h in hypernode_objs))
        if signature == self._scheduled_at:
            return
        self._scheduled_at = signature
        queues = queue_view(queue_objs)
        room = headroom(queues, self._queue_allocated())
        admit = self._admission_room(queues, room)
        nodes = sorted(self.nodes.values(), key=lambda n: n.name)
        cordoned = {n["metadata"]["name"] for n in node_objs if (n.get("spec") or {}).get("unschedulable")}
        # Volcano's priority plugin orders jobs by priority first (the PodGroup's PriorityClass), then creation
        # time; a job its queue cannot admit is skipped and later ones still may be (no head-of-line blocking).
        for run in sorted(self.runs.values(), key=lambda r: (-priority(r.workload), r.created, r.name)):
            if run.finished:
                continue
            chain = queue_chain(run.queue, queues)
            if run.pg_deleted:
                continue
            if run.pg_phase in ("", "Pending"):
                had_pods = bool(run.pods)
                if not self._enqueue(run, queues, chain, admit) or not had_pods:
                    continue  # new pods wait for the next cycle: the job controller creates them on Inqueue
            if run.pg_phase in ("Inqueue", "Running", "Unknown"):
                self._allocate(run, nodes, cordoned, chain, room)
                if run.pg_unschedulable:
                    self._preempt(run, nodes, cordoned)
        self._flush()

    def _admission_room(self, queues: dict[str, QueueView], room: Headroom) -> Headroom:
        """What the enqueue action may still admit per queue: its capability minus what is allocated and
        minus what the groups already `Inqueue` are owed (their minResources not yet bound), as Volcano's
        proportion plugin counts `inqueue` against the capability. Without it every waiting job that fits
        the free capability would be admitted in one cycle, and all but the first would wait `Inqueue`
        with unschedulable pods where Volcano keeps them `Pending`."""
        admit: Headroom = {name: None if left is None else dict(left) for name, left in room.items()}
        for run in self.runs.values():
            if run.finished or run.pg_deleted or run.pg_phase != "Inqueue":
                continue
            owed = dict(run.min_resources)
            for pod in run.pods.values():
                if pod.holding:
                    for name, amount in pod.requests.items():
                        owed[name] = owed.get(name, 0.0) - amount
            take(admit, queue_chain(run.queue, queues), {name: max(0.0, amount) for name, amount in owed.items()})
        return admit

    def _enqueue(self, run: RunSim, queues: dict[str, QueueView], chain: list[str], room: Headroom) -> bool:
        """Volcano's enqueue action. A group its queue cannot admit stays `Pending` with no condition
        at all: only Events say why ("queue resource quota insufficient"), and every group starts
        with the gang plugin's "0/0 tasks in gang unschedulable" Warning, admitted or not. `room` is what
        the queues may still admit (`_admission_room`); an admitted group takes its minResources from it."""
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
            too_big = any(amount > cluster.get(r, 0.0) + 1e-9 for r, amount in run.min_resources.items()
                          if r not in DEVICE_MANAGED)
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
        take(room, chain, run.min_resources)
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
            held = sum(1 for p in run.pods.values() if p.active and (p.holding or p.phase == "Succeeded"))
            placement = self._place_in_topology(run, pending, nodes, cordoned, chain, room, held)
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

    def _place_in_topology(self, run: RunSim, pending: list[PodSim], nodes: list[NodeSim], cordoned: set[str],
                           chain: list[str], room: Headroom, held: int) -> Placement:
        """First-fit on all nodes; a hard-topology gang (where the release serves HyperNodes) inside the first
        allowed HyperNode that takes it whole (simulator.topology), or nowhere: with the topology's reason when
        the cluster's nodes would take it, the nodes' reasons when they would not."""
        highest = topology.hard_tier(run.workload.network_topology)
        if highest is None or HYPERNODES not in self.store.buckets:
            return place(pending, nodes, cordoned, chain, room)
        holding = {p.node for p in run.pods.values() if p.active and p.holding and p.node}
        groups = topology.allowed_groups(topology.resolve(self.store.objects(HYPERNODES), self.nodes), highest,
                                         holding)
        need = run.workload.min_member if run.workload.gang else 1
        for group in groups:
            inside = place(pending, [n for n in nodes if n.name in group.nodes], cordoned, chain, room)
            if held + len(inside.plan) >= need and (inside.plan or not pending):
                return inside
        everywhere = place(pending, nodes, cordoned, chain, room)
        if held + len(everywhere.plan) < need:
            return everywhere  # the cluster cannot take it either: the usual reasons (and nothing is bound)
        message = topology.unplaced_message(len(nodes), highest, groups)
        return Placement([], dict.fromkeys(pending, message))

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

    # Provided by the controllers (declared here for the type checker).
    def _create_pods(self, run: RunSim) -> None:
        raise NotImplementedError
