"""Volcano's `preempt` action, the minimal part the exporter's eviction metrics need.

Within one queue (Volcano's preempt action takes victims only from the preemptor's queue; `reclaim`
across queues is not simulated): a Job whose pending pods do not fit evicts running pods of Jobs of lower
priority, lowest priority and newest first, node by node, and only when that makes room for all of its
pending pods (a gang is not preempted for in part). Pods already being deleted count as room to come, so a
pass does not evict again while the first victims terminate.

An eviction is what Volcano's Evictor does: a Warning Event `Evict` on the pod ("Pod is evicted, because
of preempt") and a Normal `Evict` on the victim's PodGroup, the pod's status written with the condition,
then the pod deleted (graceful). The victim's job controller replaces the lost pod (or applies its
`PodEvicted` policy). Priority comes from the PriorityClass the workload names (simulator.scenario's `priority_value`).
"""

from __future__ import annotations

from collections.abc import Iterable

from volcano_monitor.simulator.kubelet import GRACE_RUNNING, Kubelet
from volcano_monitor.simulator.quantity import Resources
from volcano_monitor.simulator.scenario import priority_value
from volcano_monitor.simulator.scheduler import node_reasons
from volcano_monitor.simulator.specs import TaskSpec, Workload
from volcano_monitor.simulator.state import NodeSim, PodSim, RunSim

EVICT_MESSAGE = "Pod is evicted, because of {}"


def priority(workload: Workload) -> int:
    return priority_value(workload.priority_class)


def _fits(pod: PodSim, free: Resources) -> bool:
    return free.get("pods", 0.0) >= 1 and all(
        amount <= free.get(name, 0.0) + 1e-9 for name, amount in pod.requests.items() if amount > 0)


def _add(free: Resources, pod: PodSim, sign: int) -> None:
    for name, amount in pod.requests.items():
        free[name] = free.get(name, 0.0) + sign * amount
    free["pods"] = free.get("pods", 0.0) + sign


def plan_preemption(pending: list[PodSim], nodes: list[NodeSim], cordoned: set[str],
                    holders: Iterable[PodSim], releasing: Iterable[PodSim], floor: int) -> list[PodSim] | None:
    """The pods to evict so that every pending pod fits (None: no plan makes them all fit). `holders` are
    the running pods the preemptor may take from (priority below `floor`), `releasing` the pods already
    being deleted (their room counts)."""
    free = {n.name: n.free() for n in nodes}
    for pod in releasing:
        if pod.node in free:
            _add(free[pod.node], pod, 1)
    by_node: dict[str, list[PodSim]] = {}
    for pod in holders:
        if pod.node is not None and priority(pod.run.workload) < floor:
            by_node.setdefault(pod.node, []).append(pod)
    for victims in by_node.values():  # lowest priority first, then the newest
        victims.sort(key=lambda p: (priority(p.run.workload), -(p.bound_at or 0.0)))
    chosen: list[PodSim] = []
    for pod in pending:
        placed = False
        for node in nodes:
            if node_reasons(pod, node, {"pods": 1.0, **{r: 1e18 for r in pod.requests}}, node.name in cordoned):
                continue  # selectors, taints, cordon: eviction would not help
            room, taken = dict(free[node.name]), []
            for victim in by_node.get(node.name, []):
                if _fits(pod, room):
                    break
                _add(room, victim, 1)
                taken.append(victim)
            if _fits(pod, room):
                _add(room, pod, -1)
                free[node.name] = room
                by_node[node.name] = [v for v in by_node.get(node.name, []) if v not in taken]
                chosen += taken
                placed = True
                break
        if not placed:
            return None
    return chosen


class Preemption(Kubelet):
    """The preempt action on top of the kubelet (the scheduler, simulator.allocate, calls `_preempt` after
    allocating)."""

    def _preempt(self, run: RunSim, nodes: list[NodeSim], cordoned: set[str]) -> None:
        floor = priority(run.workload)
        pending = [p for p in run.pods.values() if p.active and p.node is None and p.phase == "Pending"]
        if not pending or floor <= 0:
            return
        same_queue = [p for p in self.pods.values() if p.run is not run and p.run.queue == run.queue]
        holders = [p for p in same_queue if p.active and p.holding]
        releasing = [p for p in self.pods.values() if p.holding and not p.active]
        victims = plan_preemption(pending, nodes, cordoned, holders, releasing, floor)
        for victim in victims or ():
            self._evict(victim, "preempt")

    def _evict(self, pod: PodSim, action: str) -> None:
        message = EVICT_MESSAGE.format(action)
        self._record(self._pod_ref(pod), "Warning", "Evict", message)
        self._record(self._pg_ref(pod.run), "Normal", "Evict", action)
        pod.evicted = (message, self.now)
        self._write_pod(pod)  # the condition first (UpdateStatus), then the deletion
        self._delete_pod(pod)
        self._after(GRACE_RUNNING, lambda: self._after_eviction(pod))

    def _after_eviction(self, pod: PodSim) -> None:
        """Volcano's job controller: the evicted pod is gone; apply `PodEvicted` or replace the pod."""
        run = pod.run
        if not pod.removed or run.finished or run.orphaned or not run.is_vcjob:
            return
        action = self._policy(run, pod.task, "PodEvicted")
        if action is not None and run.phase in ("Pending", "Running"):
            self._job_action(run, action, pod)
        elif run.phase in ("Pending", "Running") and pod.name not in run.pods:
            self._create_pod(run, pod.task, pod.index)
        self._request_schedule()

    # Provided by the controllers (declared here for the type checker).
    @staticmethod
    def _policy(run: RunSim, task: TaskSpec, event: str) -> str | None:
        raise NotImplementedError

    def _job_action(self, run: RunSim, action: str, pod: PodSim) -> None:
        raise NotImplementedError

    def _create_pod(self, run: RunSim, task: TaskSpec, index: int) -> None:
        raise NotImplementedError
