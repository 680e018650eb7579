"""QueueStarved (periodic): a queue has demand waiting while it, an ancestor, or the whole cluster
is full with what already runs, for longer than `queue_starved_seconds`.

Demand is what Volcano has not admitted or placed: PodGroups still `Pending` (not enqueued; their
minResources is what they wait for) and unbound Pending pods of admitted groups. A demand item
starves on resource r when it requests r and, for a limit L with allocation A,
`A[r] + item[r] > L[r]` while the item alone would fit (`item[r] <= L[r]`): it waits because of what
already runs, and Volcano will admit or place it once something finishes. The limits, in order:
- the `capability` of the item's queue and of each ancestor (`spec.parent`, else `root`), against
  that queue's `status.allocated` (Volcano's, children of a hierarchical queue included);
- the cluster — also for queues without any capability: the `root` queue's `spec.deserved` (Volcano
  v1.12 sets it to the whole cluster's allocatable; else its `spec.capability`) against root's
  `status.allocated` (the sum of every queue's). Without a root queue carrying either (Volcano
  before the root queue existed), the watchdog does not know the cluster's size (it watches no
  nodes) and only capabilities are checked.
An item bigger than the limit itself never fits whatever runs — a configuration problem or a gang
too big for the cluster, not starvation — and is not reported here: GangUnschedulable reports such
a PodGroup. Conversely GangUnschedulable stays quiet for a group this detector finds blocked
(`blocked()`), so one cause raises one alert.

With `expected` (the last round of `findings.expected`), the alert names the earliest expected start among
the queue's waiting jobs (`expected_job`, `expected_start`, ...: `detectors.expect`); when none of them has
one, why the first of them has none.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from volcano_monitor.core.model import PodGroup, Queue, Resources, res_dict, res_get
from volcano_monitor.core.podview import Pod
from volcano_monitor.watchdog.findings.detectors.expect import Expected, expected_clause, expected_details
from volcano_monitor.watchdog.findings.detectors.settings import Detectors
from volcano_monitor.watchdog.findings.estimates import Estimate
from volcano_monitor.watchdog.state.signals import QUEUE_STARVED, Signal, fingerprint

__all__ = ["QueueDetector"]

EPSILON = 1e-6
ROOT = "root"


class _Demand(NamedTuple):
    namespace: str
    name: str  # the pod or podgroup
    queue: str  # "" : resolve through the pod's group at check time
    group: str
    requests: Resources


class QueueDetector:
    KINDS = frozenset({QUEUE_STARVED})

    def __init__(self, settings: Detectors, expected: Expected | None = None) -> None:
        self.settings = settings
        self.expected = expected
        self._queues: dict[str, Queue] = {}
        self._groups: dict[tuple[str, str], tuple[str, str, str]] = {}  # (ns, name) -> (queue, phase, job name)
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
        self._groups[key] = (group.queue, group.phase, group.owner_name or group.name)
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
        jobs: dict[str, dict[tuple[str, str], None]] = {}  # queue -> its waiting jobs (namespace, job), in order
        for item in self._demand():
            queue = item.queue
            waiting[queue] = waiting.get(queue, 0) + 1
            if self.expected is not None and item.group:
                group = self._groups.get((item.namespace, item.group))
                jobs.setdefault(queue, {})[(item.namespace, group[2] if group is not None else item.group)] = None
            if queue in starved:
                continue
            hit = self.blocked(queue, item.requests)
            if hit is not None:
                starved[queue] = {**hit, "example": f"{item.namespace}/{item.name}",
                                  "example_requests": res_dict(item.requests)}
        signals = []
        for queue, details in sorted(starved.items()):
            details["waiting"] = waiting[queue]
            full = (f"the cluster is full on {details['resource']}" if details["scope"] == "cluster" else
                    f"queue {details['limiting_queue']} is at its {details['resource']} capability")
            when = self._earliest(jobs.get(queue, {}), details, now)
            signals.append(Signal(
                kind=QUEUE_STARVED, fingerprint=fingerprint(QUEUE_STARVED, queue), active=True, severity="warning",
                queue=queue, subject=queue,
                summary=f"Queue {queue}: {waiting[queue]} waiting while {full} "
                        f"({details['allocated']:g} of {details['capability']:g} allocated){when}",
                details=details, for_seconds=self.settings.queue_starved_seconds,
            ))
        return signals

    def _earliest(self, jobs: dict[tuple[str, str], None], details: dict[str, Any], now: float) -> str:
        """The earliest expected start among `jobs` into `details`, and its clause for the summary ("" when
        no job has been estimated yet); without any start, why the first estimated job has none."""
        if self.expected is None:
            return ""
        best: tuple[str, Estimate] | None = None
        for namespace, job in jobs:
            est = self.expected(namespace, job)
            if est is None:
                continue
            if best is None or (est.start is not None and (best[1].start is None or est.start < best[1].start)):
                best = (f"{namespace}/{job}", est)
        if best is None:
            return ""
        name, est = best
        details.update(expected_details(est), expected_job=name)
        return f"; {name} {expected_clause(est, now)}" if est.start is not None else \
            f"; {name}: {expected_clause(est, now)}"

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

    def blocked(self, queue: str, requests: Resources) -> dict[str, object] | None:
        """What keeps `requests` of `queue` waiting for running work to finish, or None: the first limit
        (a queue's capability up the chain, then the cluster) it would fit alone but not on top of
        what is allocated now. Also asked by GangDetector, so that one cause raises one alert."""
        for q in self._chain(queue):
            hit = _over(requests, q.capability, q.allocated)
            if hit is not None:
                return {"scope": "queue", "limiting_queue": q.name, **hit}
        root = self._queues.get(ROOT)
        if root is not None:
            hit = _over(requests, root.deserved or root.capability, root.allocated)
            if hit is not None:
                return {"scope": "cluster", "limiting_queue": root.name, **hit}
        return None


def _over(requests: Resources, limit: Resources, allocated: Resources) -> dict[str, object] | None:
    for resource, cap in limit:
        want = res_get(requests, resource)
        if want <= 0 or want > cap + EPSILON:
            continue
        used = res_get(allocated, resource)
        if used + want > cap + EPSILON:
            return {"resource": resource, "allocated": used, "capability": cap}
    return None
