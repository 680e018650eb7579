"""Placement logic of the simulated Volcano scheduler: queue capability checks (hierarchical), first-fit
node selection with selectors, taints and allocatable resources, and Volcano-style messages."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from volcano_monitor.simulator import vgpu
from volcano_monitor.simulator.quantity import Resources, parse_quantity
from volcano_monitor.simulator.specs import DEVICE_MANAGED
from volcano_monitor.simulator.state import CardUse, NodeSim, PodSim, RunSim

Headroom = dict[str, Resources | None]  # queue -> capability minus allocated; None: no capability


@dataclass(frozen=True)
class QueueView:
    name: str
    parent: str | None
    capability: Resources
    state: str


def queue_view(objs: Iterable[Mapping[str, object]]) -> dict[str, QueueView]:
    """Queues as the scheduler needs them, read from the stored objects (others may edit the spec)."""
    views = {}
    for obj in objs:
        meta = obj.get("metadata")
        spec = obj.get("spec")
        status = obj.get("status")
        if not isinstance(meta, dict):
            continue
        spec = spec if isinstance(spec, dict) else {}
        status = status if isinstance(status, dict) else {}
        capability: Resources = {}
        raw = spec.get("capability")
        for name, value in (raw.items() if isinstance(raw, dict) else ()):
            try:
                capability[name] = parse_quantity(value)
            except (ValueError, TypeError):
                continue
        name = str(meta.get("name"))
        parent = spec.get("parent")
        if not parent and name != "root":
            parent = "root"
        views[name] = QueueView(name, str(parent) if parent else None, capability,
                                str(status.get("state") or "Open"))
    return views


def queue_chain(queue: str, queues: Mapping[str, QueueView]) -> list[str]:
    """The queue and its ancestors, nearest first."""
    chain: list[str] = []
    current: str | None = queue
    while current is not None and current not in chain:
        chain.append(current)
        view = queues.get(current)
        current = view.parent if view is not None else None
    return chain


def headroom(queues: Mapping[str, QueueView], allocated: Mapping[str, Resources]) -> Headroom:
    room: Headroom = {}
    for name, view in queues.items():
        if view.capability:
            used = allocated.get(name, {})
            room[name] = {r: cap - used.get(r, 0.0) for r, cap in view.capability.items()}
        else:
            room[name] = None
    return room


def blocking_queue(request: Mapping[str, float], chain: list[str], room: Headroom) -> str | None:
    """The first queue in the chain whose capability the request would exceed."""
    for name in chain:
        left = room.get(name)
        if left is None:
            continue
        for resource, free in left.items():
            if request.get(resource, 0.0) > free + 1e-9:
                return name
    return None


def take(room: Headroom, chain: list[str], request: Mapping[str, float]) -> None:
    for name in chain:
        left = room.get(name)
        if left is not None:
            for resource in left:
                left[resource] -= request.get(resource, 0.0)


def node_reasons(pod: PodSim, node: NodeSim, free: Resources, cordoned: bool,
                 cards: list[CardUse] | None = None) -> list[str]:
    """Why the pod cannot go to the node (kube-scheduler's wording); empty when it fits. vGPUs of a sharing
    device plugin are checked card by card (`cards`: the card use to test against, default the node's)."""
    if cordoned:
        return ["node(s) were unschedulable"]
    labels = node.labels
    for key, value in pod.task.node_selector.items():
        if labels.get(key) != value:
            return ["node(s) didn't match Pod's node affinity/selector"]
    if node.taints and not (pod.task.gpus or pod.task.vgpu):
        return ["node(s) had untolerated taint {nvidia.com/gpu: present}"]
    reasons = ["Too many pods"] if free.get("pods", 0.0) < 1 else []
    reasons += [f"Insufficient {name}" for name, amount in pod.requests.items()
                if name not in DEVICE_MANAGED and amount > 0 and amount > free.get(name, 0.0) + 1e-9]
    request = vgpu.request_for(pod.task, node)
    if not reasons and request is not None and vgpu.fits(node, request, cards) is None:
        reasons.append(vgpu.NO_FIT)
    return reasons


@dataclass
class Placement:
    plan: list[tuple[PodSim, NodeSim]]
    failures: dict[PodSim, str]


def place(pods: list[PodSim], nodes: list[NodeSim], cordoned: set[str], chain: list[str],
          room: Headroom) -> Placement:
    """First-fit the pods; nothing is committed (the caller binds or, for a broken gang, discards)."""
    free = {n.name: n.free() for n in nodes}
    cards = {n.name: list(n.cards) for n in nodes}
    room = {k: (dict(v) if v is not None else None) for k, v in room.items()}
    result = Placement([], {})
    for pod in pods:
        blocked = blocking_queue(pod.requests, chain, room)
        if blocked is not None:
            result.failures[pod] = f"queue {blocked} resource quota insufficient"
            continue
        reasons: Counter[str] = Counter()
        chosen = None
        for node in nodes:
            why = node_reasons(pod, node, free[node.name], node.name in cordoned, cards[node.name])
            if not why:
                chosen = node
                break
            reasons.update(why)
        if chosen is None:
            detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
            result.failures[pod] = f"0/{len(nodes)} nodes are unavailable: {detail}."
            continue
        node_free = free[chosen.name]
        for resource, amount in pod.requests.items():
            node_free[resource] = node_free.get(resource, 0.0) - amount
        node_free["pods"] = node_free.get("pods", 0.0) - 1
        request = vgpu.request_for(pod.task, chosen)
        if request is not None:
            placed = vgpu.fits(chosen, request, cards[chosen.name]) or []
            vgpu.take(cards[chosen.name], placed, request, chosen.spec.gpu_memory_mib)
        take(room, chain, pod.requests)
        result.plan.append((pod, chosen))
    return result


def task_status(pod: PodSim) -> str:
    """Volcano's task status names (api.TaskStatus)."""
    if pod.deleting_at is not None:
        return "Releasing"
    if pod.phase == "Pending":
        return "Pending" if pod.node is None else "Bound"
    return pod.phase


def gang_message(run: RunSim, schedulable: int, unschedulable: int,
                 origin: tuple[PodSim, str] | None = None) -> str:
    """'4/4 tasks in gang unschedulable: pod group is not ready, 4 Pending, 4 minAvailable; Pending: 1
    Unschedulable, 3 Schedulable. Origin reason is gang-worker-3: 0/3 nodes are unavailable: ...'"""
    pods = [p for p in run.pods.values() if not p.removed]
    histogram = Counter(task_status(p) for p in pods)
    histogram["minAvailable"] = run.workload.min_member
    parts = ", ".join(f"{n} {k}" for k, n in sorted(histogram.items(), key=lambda kv: (kv[1], kv[0])))
    message = f"{histogram['Pending']}/{len(pods)} tasks in gang unschedulable: pod group is not ready, {parts}"
    pending = [f"{n} {k}" for k, n in (("Unschedulable", unschedulable), ("Schedulable", schedulable)) if n]
    if pending:
        message += "; Pending: " + ", ".join(pending) + "."
    if origin is not None:
        message += f" Origin reason is {origin[0].name}: {origin[1]}"
    return message
