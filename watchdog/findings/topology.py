"""HyperNode fragmentation as the watchdog sees it: free physical GPUs per HyperNode, the largest gang one
HyperNode of each tier can take, and `topology_fragmented` for a hard-topology gang that would fit the
cluster but no HyperNode it may use (`core.topology` does the arithmetic; this module feeds it and serves it).

Inputs, all already in memory: the Node objects (`state.nodes.NodeTable`), the Volcano pods bound to them and
not finished (the index, through a `NodePodCache` of this module's own: that cache is not thread-safe and
the node detectors' one belongs to the writer thread), the HyperNodes (`state.hypernodes.HyperNodeTable`)
and GpuStranded's typical GPU pod shape (`detectors.gpu_stranded.cpu_per_gpu` / `memory_per_gpu`), so the
largest gang and the stranded GPUs count GPUs the same way. Pods the watchdog does not watch (not Volcano's)
are not counted, as for GpuStranded.

Why computed on demand with a short TTL rather than on every event: it is read by `/metrics` scrapes, `/why`
requests and the GangUnschedulable round, a few times a minute, and one computation walks every pod; so a
snapshot is kept for `ttl_seconds` (10 s) and shared by all three, under a lock.

Bad HyperNodes (a member naming an unknown node or HyperNode, a loop, a regex that does not compile, a
label operator Kubernetes does not know) are counted in `volcano_watchdog_hypernode_problems{problem}` and
each is logged once while it lasts; the member picks nothing, the rest of the tree is used.

Families are served by the leader only (like GpuStranded's): every replica keeps the inputs (they serve
`/why`), but one set of series per cluster keeps `sum` in PromQL right.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from volcano_monitor.core.exposition import Family
from volcano_monitor.core.gpushare import physical_gpus
from volcano_monitor.core.model import Node, PodGroup, res_get
from volcano_monitor.core.pending import BELOW_TOPOLOGY, group_waiting, with_topology
from volcano_monitor.core.topology import (
    PROBLEM_KINDS,
    Fragmentation,
    HyperNodeSpec,
    NodeRoom,
    Problem,
    Tree,
    Verdict,
    fragmentation,
    gang_shape,
    resolve,
    topology_verdict,
)
from volcano_monitor.watchdog.findings.detectors.settings import GpuStrandedSettings
from volcano_monitor.watchdog.state.cluster import ClusterIndex, WhyPending
from volcano_monitor.watchdog.state.hypernodes import HyperNodeTable
from volcano_monitor.watchdog.state.nodes import DONE_PHASES, NodePod, NodePodCache, NodeTable

__all__ = ["FAMILIES", "Snapshot", "TopologyView", "node_cards", "node_room"]

log = logging.getLogger(__name__)

FREE_GPUS = Family("volcano_hypernode_free_gpus",
                   "Free physical GPUs on the Ready, schedulable nodes under a HyperNode (its leaf nodes, resolved "
                   "through its member HyperNodes): allocatable minus the requests of the Volcano pods bound there "
                   "and not finished. Served by the watchdog's leader.", ("hypernode", "tier"))
LARGEST_GANG = Family("volcano_hypernode_largest_gang_gpus",
                      "The most GPUs a gang can get inside one HyperNode of this tier now, spreading one GPU-granular "
                      "pod at a time over its nodes, each GPU needing GpuStranded's cpu_per_gpu and memory_per_gpu "
                      "(detectors.gpu_stranded). A hard-topology gang of more GPUs at this tier waits "
                      "(topology_fragmented). Served by the watchdog's leader.", ("tier",))
PROBLEMS = Family("volcano_watchdog_hypernode_problems",
                  "Problems in the HyperNode tree at the last computation, by kind: unknown_node, unknown_hypernode "
                  "(a member naming none), loop (a HyperNode under itself), bad_regex (a regexMatch that does not "
                  "compile), bad_selector. The member picks nothing; each is logged once.", ("problem",))
FAMILIES = (FREE_GPUS, LARGEST_GANG, PROBLEMS)

TTL_SECONDS = 10.0
MAX_LOGGED = 1000  # distinct problems remembered as logged


def node_cards(nodes: NodeTable, node: Node) -> float:
    """A node's physical GPUs: the table's reading of its cards (`core.gpushare.node_gpus`, read once per Node
    event: GPU feature discovery's count, the device plugin's annotation, then allocatable), never a HAMi node's
    vGPU slots; whole `*/gpu` of its allocatable while the table has no reading."""
    found = nodes.gpus(node.name)
    return float(found.cards) if found is not None else physical_gpus(node.allocatable)


def node_room(node: Node, pods: list[NodePod], cards: float) -> NodeRoom:
    return NodeRoom(node.name, cards, res_get(node.allocatable, "cpu"), res_get(node.allocatable, "memory"),
                    used_gpus=sum(p.gpu_request for p in pods), used_cpu=sum(p.cpu_request for p in pods),
                    used_memory=sum(p.memory_request for p in pods),
                    schedulable=node.ready and not node.unschedulable)


def problem_counts(problems: Sequence[Problem]) -> dict[str, int]:
    """Problems by kind, every kind present (0 when none): the gauge's series."""
    counts = dict.fromkeys(PROBLEM_KINDS, 0)
    for p in problems:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    return counts


def spec_problems(specs: Sequence[HyperNodeSpec]) -> list[str]:
    """The parse problems of the specs, named by HyperNode (for the log)."""
    return [f"HyperNode {s.name or '?'}: {p}" for s in specs for p in s.problems]


@dataclass(frozen=True, slots=True)
class Gang:
    """What a waiting hard-topology PodGroup's unfinished pods ask in all (physical GPUs, cores, bytes)."""

    gpus: float
    cpu: float
    memory: float
    pods: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    at: float
    tree: Tree
    nodes: Mapping[str, NodeRoom]
    fragmentation: Fragmentation
    problems: Mapping[str, int]
    gangs: Mapping[tuple[str, str], Gang]  # (namespace, PodGroup) -> its pods' requests
    # (GPUs, cores, bytes, tier) -> verdict: gangs of one shape (and GangUnschedulable's rounds, /why's requests
    # within the TTL) share one walk of the tree (10 ms at 5000 nodes)
    verdicts: dict[tuple[float, float, float, int], Verdict | None] = field(default_factory=dict)


class TopologyView:
    def __init__(self, nodes: NodeTable, hypernodes: HyperNodeTable, index: ClusterIndex,
                 shape: GpuStrandedSettings, clock: Callable[[], float] = time.time,
                 ttl_seconds: float = TTL_SECONDS, leading: Callable[[], bool] = lambda: True) -> None:
        self.nodes, self.hypernodes, self.index, self.shape = nodes, hypernodes, index, shape
        self.clock, self.ttl_seconds, self.leading = clock, ttl_seconds, leading
        self._lock = threading.Lock()
        self._pods = NodePodCache(nodes.card_memories)  # MiB-only vGPU pods count their card's share
        self._last: Snapshot | None = None
        self._tree_key: tuple[int, frozenset[tuple[str, tuple[tuple[str, str], ...]]]] | None = None
        self._tree: Tree | None = None
        self._logged: set[str] = set()

    # ---- the snapshot ----------------------------------------------------------------------------------

    def snapshot(self, fresh: bool = False) -> Snapshot | None:
        """The current snapshot (at most `ttl_seconds` old; `fresh`: computed now). None while no HyperNode
        is known: a cluster without topology has nothing to say."""
        with self._lock:
            now = self.clock()
            last = self._last
            if not fresh and last is not None and now - last.at < self.ttl_seconds:
                return last if last.tree.leaves else None
            self._last = last = self._compute(now)
            return last if last.tree.leaves else None

    def _compute(self, now: float) -> Snapshot:
        version, specs = self.hypernodes.specs()
        node_list = self.nodes.nodes()
        labels = frozenset((n.name, tuple(sorted(n.labels.items()))) for n in node_list)
        if self._tree is None or self._tree_key != (version, labels):
            self._tree = resolve(specs, {n.name: n.labels for n in node_list})
            self._tree_key = (version, labels)
            self._log_problems([str(p) for p in self._tree.problems] + spec_problems(specs))
        tree = self._tree
        pods = self._pods.by_node(self.index) if specs else {}
        rooms = {n.name: node_room(n, pods.get(n.name, []), node_cards(self.nodes, n)) for n in node_list}
        found = fragmentation(tree, rooms.values(), self.shape.cpu_per_gpu, self.shape.memory_per_gpu)
        return Snapshot(now, tree, rooms, found, problem_counts(tree.problems), self._gangs() if specs else {})

    def _gangs(self) -> dict[tuple[str, str], Gang]:
        """The requests of the unfinished pods of each waiting hard-topology PodGroup. Why the pods and not the
        group's minResources: those are the raw vGPU amounts summed over the pods (HAMi's `nvidia.com/gpu`
        counts vGPUs, Volcano's `volcano.sh/vgpu-number` is no `*/gpu` at all), while each pod's requests carry
        its physical share (`core.gpushare`). One pass over the pods, only when such a group waits."""
        index = self.index
        out: dict[tuple[str, str], Gang] = {}
        with index.lock:
            wanted = {key for key, g in index.group_views.items() if group_waiting(g)
                      and g.network_topology is not None and g.network_topology.mode == "hard"}
            if not wanted:
                return out
            for pod in index.pods.values():
                key = (pod.namespace, pod.podgroup)
                if not pod.podgroup or key not in wanted or pod.phase in DONE_PHASES:
                    continue
                old = out.get(key) or Gang(0.0, 0.0, 0.0, 0)
                out[key] = Gang(old.gpus + physical_gpus(pod.requests), old.cpu + res_get(pod.requests, "cpu"),
                                old.memory + res_get(pod.requests, "memory"), old.pods + 1)
        return out

    def _log_problems(self, problems: list[str]) -> None:
        """Each problem once while it lasts (a fixed one, coming back, is logged again)."""
        current = set(problems)
        for text in sorted(current - self._logged):
            log.warning("HyperNode tree: %s (the member picks nothing)", text)
        self._logged = current if len(current) <= MAX_LOGGED else set(sorted(current)[:MAX_LOGGED])

    # ---- judging a gang --------------------------------------------------------------------------------

    def verdict(self, group: PodGroup) -> Verdict | None:
        """`topology_fragmented` for a waiting PodGroup with a hard network topology, or None."""
        if group.network_topology is None or group.network_topology.mode != "hard":
            return None
        snap = self.snapshot()
        if snap is None:
            return None
        gang = snap.gangs.get((group.namespace, group.name))
        key = gang_shape(group, None if gang is None else (gang.gpus, gang.cpu, gang.memory, gang.pods), snap.tree)
        if key is None:
            return None
        if key not in snap.verdicts:
            snap.verdicts[key] = topology_verdict(*key, snap.tree, snap.nodes)
        return snap.verdicts[key]

    def _group(self, found: WhyPending) -> PodGroup | None:
        index = self.index
        with index.lock:
            job = index.jobs.get(found.uid) if found.kind == "Job" else None
            if job is not None:
                return index.group_views.get((job.namespace, job.podgroup))
            key = index.group_keys.get(found.uid)
            return index.group_views.get(key) if key is not None else None

    def why(self, uid: str) -> WhyPending | None:
        """`ClusterIndex.why`, with `topology_fragmented` in place of `unschedulable` or `waiting` when the
        job's gang fits the cluster but no HyperNode it may use (`core.pending.with_topology`)."""
        found = self.index.why(uid)
        if found is None or found.explanation is None or found.explanation.reason not in BELOW_TOPOLOGY:
            return found
        group = self._group(found)
        verdict = self.verdict(group) if group is not None else None
        if verdict is None:
            return found
        return WhyPending(found.uid, found.kind, found.namespace, found.job_name, found.phase,
                          with_topology(found.explanation, verdict.message), found.place)

    # ---- /metrics --------------------------------------------------------------------------------------

    def render_metrics(self) -> str:
        """The three families (nothing on a follower, or before any HyperNode is known)."""
        if not self.leading():
            return ""
        snap = self.snapshot()
        if snap is None:
            return ""
        found = snap.fragmentation
        return (FREE_GPUS.header
                + "".join(FREE_GPUS.line((h.name, str(h.tier)), h.free_gpus) for h in found.hypernodes)
                + LARGEST_GANG.header
                + "".join(LARGEST_GANG.line((str(tier),), gpus) for tier, gpus in sorted(found.largest_gang.items()))
                + PROBLEMS.header
                + "".join(PROBLEMS.line((kind,), count) for kind, count in sorted(snap.problems.items())))
