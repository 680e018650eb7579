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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from volcano_monitor.core.gpushare import NodeGpus, node_gpus
from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.model import Job, Node, Pod, PodGroup, res_get
from volcano_monitor.watchdog.state.cluster import ClusterIndex, pod_gpus
from volcano_monitor.watchdog.state.samples import UsageSample

__all__ = ["NodePod", "NodePodCache", "NodeTable", "NodeUsage", "PodUsage", "gpu_cards", "node_gpu_view",
           "pods_by_node"]

DONE_PHASES = frozenset({"Succeeded", "Failed"})  # their requests no longer hold anything on the node

POD_USAGE_TTL_SECONDS = 900.0  # a pod not measured for this long (gone, or its collector down) is forgotten


def node_gpu_view(node: Node) -> NodeGpus:
    """The node's physical GPUs as `core.gpushare.node_gpus` reads them: GPU feature discovery's labels, the
    device plugin's annotations, then allocatable. A HAMi node's allocatable `nvidia.com/gpu` counts vGPU
    slots (4 cards split 10 ways: 40), which is not its capacity."""
    return node_gpus(node.labels, getattr(node, "annotations", None) or {}, node.allocatable)


def gpu_cards(node: Node) -> float:
    """Physical GPUs (cards) of the node: what GpuStranded counts free and stranded GPUs against. Reads the
    node afresh (and counts its bad input again): the table keeps one reading per Node event (`NodeTable.gpus`)."""
    return float(node_gpu_view(node).cards)


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
        # The node's physical GPUs, read once per Node event: a node without the device plugin's annotations
        # is counted (core.gpushare.share_problems) when it changes, not at every check of every detector.
        self._gpus: dict[str, NodeGpus] = {}
        self._usage: dict[str, NodeUsage] = {}
        self._pods: dict[tuple[str, str], PodUsage] = {}
        self.usage_at: float | None = None  # when the last NodeMetrics poll succeeded (None: never)
        # the node detectors' view of the pods (the worker's thread only)
        self.pods = NodePodCache(self.card_memories)

    def on_node(self, event_type: str, node: Node) -> None:
        """Informer handler (an informer thread)."""
        if not node.name:
            return
        with self.lock:
            if event_type == DELETED:
                self._nodes.pop(node.name, None)
                self._usage.pop(node.name, None)
                self._gpus.pop(node.name, None)
                return
            old = self._nodes.get(node.name)
            self._nodes[node.name] = node
            if old is not None and node.name in self._gpus and old.labels == node.labels \
                    and old.allocatable == node.allocatable \
                    and getattr(old, "annotations", None) == getattr(node, "annotations", None):
                return  # a status heartbeat: same GPUs
        gpus = node_gpu_view(node)
        with self.lock:
            if self._nodes.get(node.name) is node:
                self._gpus[node.name] = gpus

    def gpus(self, name: str) -> NodeGpus | None:
        """The node's physical GPUs as read at its last event (None: node unknown)."""
        with self.lock:
            return self._gpus.get(name)

    def labels(self, name: str) -> Mapping[str, str] | None:
        """The node's labels (its price, watchdog.state.prices); None while the node is unknown."""
        with self.lock:
            node = self._nodes.get(name)
        return None if node is None else node.labels

    def card_memory_mib(self, name: str) -> float | None:
        """Memory of one GPU card of the node, MiB (None: node unknown or not said), for the share of a pod
        that asks its vGPU memory in MiB (`nvidia.com/gpumem`, `volcano.sh/vgpu-memory`)."""
        gpus = self.gpus(name)
        return gpus.memory_mib if gpus is not None and gpus.memory_mib > 0 else None

    def card_memories(self) -> dict[str, float]:
        """`card_memory_mib` of every node that says it, in one go (a check over many pods)."""
        with self.lock:
            return {name: gpus.memory_mib for name, gpus in self._gpus.items() if gpus.memory_mib > 0}

    def largest_allocatable(self) -> dict[str, float]:
        """Per resource (cpu, memory), the most one node can give: a recommendation above it could never
        be placed (watchdog.findings.recommendations.policy). Empty while no node is known."""
        largest: dict[str, float] = {}
        with self.lock:
            for node in self._nodes.values():
                for name in ("cpu", "memory"):
                    amount = res_get(node.allocatable, name)
                    if amount > largest.get(name, 0.0):
                        largest[name] = amount
        return largest

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

    def forget_pod(self, namespace: str, name: str) -> None:
        """A deleted pod's usage goes at once: the TTL alone kept every pod of the last 15 minutes (at a
        burst of churn, tens of thousands)."""
        with self.lock:
            self._pods.pop((namespace, name), None)

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


class NodePodCache:
    """`NodePod` views of the index's pods, made again only for a pod whose view, PodGroup view or Job view
    changed (the index replaces a view on every event, so identity says "unchanged"): a check over 100k pods
    costs dictionary lookups, not 100k new views (0.5 s measured before the cache)."""

    def __init__(self, card_memories: Callable[[], Mapping[str, float]] | None = None) -> None:
        self._views: dict[tuple[str, str], tuple[object, object, object, float | None, NodePod | None]] = {}
        self._last: tuple[float, dict[str, list[NodePod]]] | None = None
        self._card_memories = card_memories  # per node, MiB per GPU card: the shares of pods asking MiB

    def by_node(self, index: ClusterIndex, at: float | None = None) -> dict[str, list[NodePod]]:
        """The Volcano pods the index knows, bound and not finished, by node. Pods the watchdog does not watch
        (not Volcano's) are not in it: the node detectors see the requests of Volcano pods only. Asked again
        with the same `at` (both node detectors in one pass), the same answer without a second walk."""
        if at is not None and self._last is not None and self._last[0] == at:
            return self._last[1]
        out: dict[str, list[NodePod]] = {}
        views: dict[tuple[str, str], tuple[object, object, object, float | None, NodePod | None]] = {}
        old = self._views
        cards = self._card_memories() if self._card_memories is not None else {}
        with index.lock:
            groups, jobs, job_uids = index.group_views, index.jobs, index.job_uids
            for key, pod in index.pods.items():
                group = groups.get((pod.namespace, pod.podgroup)) if pod.podgroup else None
                job = None  # only read for its priority class, when the PodGroup names none
                if pod.job_name and not (group is not None and group.priority_class):
                    job = jobs.get(job_uids.get((pod.namespace, pod.job_name), ""))
                cached = old.get(key)
                card = cards.get(pod.node_name)
                if cached is None or cached[0] is not pod or cached[1] is not group or cached[2] is not job \
                        or cached[3] != card:
                    cached = (pod, group, job, card, _node_pod(pod, group, job, card))
                views[key] = cached
                view = cached[4]
                if view is not None:
                    out.setdefault(pod.node_name, []).append(view)
        self._views = views
        if at is not None:
            self._last = (at, out)
        return out


def _node_pod(pod: Pod, group: PodGroup | None, job: Job | None,
              card_memory_mib: float | None = None) -> NodePod | None:
    if not pod.node_name or pod.phase in DONE_PHASES:
        return None
    priority = (group.priority_class if group is not None else "") or (job.priority_class if job is not None else "")
    return NodePod(pod.namespace, pod.name, pod.queue or (group.queue if group is not None else ""),
                   pod.job_name or (group.owner_name if group is not None else ""), priority,
                   res_get(pod.requests, "cpu"), res_get(pod.requests, "memory"),
                   pod_gpus(pod, lambda _: card_memory_mib))


def pods_by_node(index: ClusterIndex) -> dict[str, list[NodePod]]:
    """`NodePodCache.by_node` without a cache (tests, one-off reads)."""
    return NodePodCache().by_node(index)
