"""QueueStarved (periodic): a queue has demand waiting while it — or an ancestor — sits at its
capability, for longer than `queue_starved_seconds`.

Demand is what Volcano has not admitted or placed: PodGroups still `Pending` (not enqueued; their
minResources is what they wait for) and unbound Pending pods of admitted groups. A demand item
starves on resource r of queue q (the item's queue or an ancestor) when it requests r, the queue
caps r, `allocated(q)[r] + item[r] > capability(q)[r]` and the item alone would fit under the cap:
it waits because of what the queue already runs. An item bigger than the capability itself never
fits whatever runs — that is a configuration problem, not starvation, and is not reported here.

Queue `status.allocated` is Volcano's (it includes the children of a hierarchical queue).
"""

from __future__ import annotations

from typing import NamedTuple

from exporter.model import PodGroup, Queue, Resources, res_dict, res_get
from exporter.podview import Pod
from watchdog.config import Detectors
from watchdog.detectors.base import QUEUE_STARVED, Signal, fingerprint

__all__ = ["QueueDetector"]

EPSILON = 1e-6


class _Demand(NamedTuple):
    namespace: str
    name: str  # the pod or podgroup
    queue: str  # "" : resolve through the pod's group at check time
    group: str
    requests: Resources


class QueueDetector:
    KINDS = frozenset({QUEUE_STARVED})

    def __init__(self, settings: Detectors) -> None:
        self.settings = settings
        self._queues: dict[str, Queue] = {}
        self._groups: dict[tuple[str, str], tuple[str, str]] = {}  # (ns, name) -> (queue, phase)
        self._pending_groups: dict[tuple[str, str], _Demand] = {}
        self._pending_pods: dict[str, _Demand] = {}  # pod uid -> demand
        self.skipped = 0

    def on_queue(self, event_type: str, queue: Queue) -> None:
        if not queue.name:
            self.skipped += 1
        elif event_type == "DELETED":
            self._queues.pop(queue.name, None)
        else:
            self._queues[queue.name] = queue

    def on_podgroup(self, event_type: str, group: PodGroup) -> None:
        key = (group.namespace, group.name)
        if not group.name:
            self.skipped += 1
            return
        if event_type == "DELETED":
            self._groups.pop(key, None)
            self._pending_groups.pop(key, None)
            return
        self._groups[key] = (group.queue, group.phase)
        if group.phase == "Pending" and group.min_resources:
            self._pending_groups[key] = _Demand(group.namespace, group.name, group.queue, group.name,
                                                group.min_resources)
        else:
            self._pending_groups.pop(key, None)

    def on_pod(self, event_type: str, pod: Pod) -> None:
        if not pod.uid:
            self.skipped += 1
            return
        if event_type == "DELETED" or pod.phase != "Pending" or pod.node_name or not pod.requests:
            self._pending_pods.pop(pod.uid, None)
        else:
            self._pending_pods[pod.uid] = _Demand(pod.namespace, pod.name, pod.queue, pod.podgroup, pod.requests)

    def _chain(self, name: str) -> list[Queue]:
        chain: list[Queue] = []
        seen: set[str] = set()
        while name and name not in seen:
            seen.add(name)
            queue = self._queues.get(name)
            if queue is None:
                break
            chain.append(queue)
            name = queue.parent or ("root" if name != "root" else "")
        return chain

    def check(self, now: float) -> list[Signal]:
        starved: dict[str, dict[str, object]] = {}  # queue -> details of the first starving item
        waiting: dict[str, int] = {}
        for item in self._demand():
            queue = item.queue
            waiting[queue] = waiting.get(queue, 0) + 1
            if queue in starved:
                continue
            hit = self._limit(queue, item.requests)
            if hit is not None:
                limiting, resource, allocated, capability = hit
                starved[queue] = {"limiting_queue": limiting, "resource": resource, "allocated": allocated,
                                  "capability": capability, "example": f"{item.namespace}/{item.name}",
                                  "example_requests": res_dict(item.requests)}
        signals = []
        for queue, details in sorted(starved.items()):
            details["waiting"] = waiting[queue]
            signals.append(Signal(
                kind=QUEUE_STARVED, fingerprint=fingerprint(QUEUE_STARVED, queue), active=True, severity="warning",
                queue=queue, subject=queue,
                summary=f"Queue {queue}: {waiting[queue]} waiting while queue {details['limiting_queue']} is at its "
                        f"{details['resource']} capability ({details['allocated']:g} of {details['capability']:g})",
                details=details, for_seconds=self.settings.queue_starved_seconds,
            ))
        return signals

    def _demand(self) -> list[_Demand]:
        items = list(self._pending_groups.values())
        for item in self._pending_pods.values():
            queue = item.queue
            if item.group:
                group = self._groups.get((item.namespace, item.group))
                if group is not None:
                    if group[1] == "Pending":
                        continue  # counted once, as its group's minResources
                    queue = queue or group[0]
            if queue:
                items.append(item._replace(queue=queue))
        return items

    def _limit(self, queue: str, requests: Resources) -> tuple[str, str, float, float] | None:
        for q in self._chain(queue):
            for resource, cap in q.capability:
                want = res_get(requests, resource)
                if want <= 0 or want > cap + EPSILON:
                    continue
                allocated = res_get(q.allocated, resource)
                if allocated + want > cap + EPSILON:
                    return q.name, resource, allocated, cap
        return None
