"""What the node detectors (GpuStranded, NodeHot) know of the nodes: the Node objects (allocatable, GPUs),
each node's measured usage (metrics.k8s.io NodeMetrics) and each pod's latest measured usage (from the
usage samples the collectors already produce, summed over the pod's containers).

Why a table of its own, behind a lock, rather than the worker's `ClusterIndex`: Node events and node
usage only feed these two periodic detectors, so they are written straight from the informer and
collector threads and read by the worker at check time; nothing about them has to be stored, and the
worker's queue (and the observer, which replays writes) stays as it is. Pods come from the index, which
already holds every Volcano pod with its node and requests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.kube.informer import DELETED
from exporter.model import Node, res_get
from watchdog.cluster import ClusterIndex, gpu_count
from watchdog.usage.samples import UsageSample

__all__ = ["NodePod", "NodeTable", "NodeUsage", "PodUsage", "pods_by_node"]

DONE_PHASES = frozenset({"Succeeded", "Failed"})  # their requests no longer hold anything on the node

POD_USAGE_TTL_SECONDS = 900.0  # a pod not measured for this long (gone, or its collector down) is forgotten


@dataclass(frozen=True, slots=True)
class NodeUsage:
    ts: float
    cpu_cores: float
    memory_bytes: float


@dataclass(slots=True)
class PodUsage:
    ts: float
    cpu_cores: float
    memory_bytes: float


class NodeTable:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._nodes: dict[str, Node] = {}
        self._usage: dict[str, NodeUsage] = {}
        self._pods: dict[tuple[str, str], PodUsage] = {}
        self.usage_at: float | None = None  # when the last NodeMetrics poll succeeded (None: never)

    def on_node(self, event_type: str, node: Node) -> None:
        """Informer handler (an informer thread)."""
        if not node.name:
            return
        with self.lock:
            if event_type == DELETED:
                self._nodes.pop(node.name, None)
                self._usage.pop(node.name, None)
            else:
                self._nodes[node.name] = node

    def set_usage(self, usage: dict[str, NodeUsage], polled_at: float) -> None:
        """One successful NodeMetrics poll: the usage of every node that reported (a node missing from it
        loses its value, so a node whose metrics stopped is not judged on old numbers)."""
        with self.lock:
            self._usage = dict(usage)
            self.usage_at = polled_at

    def add_samples(self, samples: Iterable[UsageSample]) -> None:
        """Container samples of one collection round: each pod's usage is the sum of its containers at the
        round's latest timestamp for that pod (a collector thread)."""
        latest: dict[tuple[str, str], PodUsage] = {}
        newest = 0.0
        for s in samples:
            key = (s.namespace, s.pod)
            current = latest.get(key)
            if current is None or s.ts > current.ts:
                current = latest[key] = PodUsage(s.ts, 0.0, 0.0)
            elif s.ts < current.ts:
                continue
            current.cpu_cores += s.cpu_cores or 0.0
            current.memory_bytes += s.memory_bytes or 0.0
            newest = max(newest, s.ts)
        with self.lock:
            for key, value in latest.items():
                old = self._pods.get(key)
                if old is None or value.ts >= old.ts:
                    self._pods[key] = value
            if newest:
                self._pods = {k: v for k, v in self._pods.items() if v.ts >= newest - POD_USAGE_TTL_SECONDS}

    def nodes(self) -> list[Node]:
        with self.lock:
            return sorted(self._nodes.values(), key=lambda n: n.name)

    def usage(self) -> dict[str, NodeUsage]:
        with self.lock:
            return dict(self._usage)

    def pod_usage(self, namespace: str, pod: str) -> PodUsage | None:
        with self.lock:
            return self._pods.get((namespace, pod))


@dataclass(frozen=True, slots=True)
class NodePod:
    """A pod holding resources on a node: bound, not finished."""

    namespace: str
    name: str
    queue: str
    job_name: str
    priority_class: str
    cpu_request: float
    memory_request: float
    gpu_request: float


def pods_by_node(index: ClusterIndex) -> dict[str, list[NodePod]]:
    """The Volcano pods the index knows, bound and not finished, by node. Pods the watchdog does not watch
    (not Volcano's) are not in it: the node detectors see the requests of Volcano pods only."""
    out: dict[str, list[NodePod]] = {}
    with index.lock:
        for pod in index.pods.values():
            if not pod.node_name or pod.phase in DONE_PHASES:
                continue
            group = index.group_views.get((pod.namespace, pod.podgroup)) if pod.podgroup else None
            queue = pod.queue or (group.queue if group is not None else "")
            job_name = pod.job_name or (group.owner_name if group is not None else "")
            priority = group.priority_class if group is not None else ""
            if not priority and pod.job_name:
                job = index.jobs.get(index.job_uids.get((pod.namespace, pod.job_name), ""))
                priority = job.priority_class if job is not None else ""
            out.setdefault(pod.node_name, []).append(NodePod(
                pod.namespace, pod.name, queue, job_name, priority, res_get(pod.requests, "cpu"),
                res_get(pod.requests, "memory"), gpu_count(pod.requests)))
    return out
