"""`topology_fragmented` in the exporter's `volcano_job_pending_reason`: a waiting PodGroup with a hard
`networkTopology` whose gang fits the cluster's free GPUs but no HyperNode of an allowed tier
(`core.topology.topology_verdict`, the watchdog's `/why` says the same).

Only an unsharded exporter says it: whether a gang fits depends on every pod bound to the HyperNode's nodes,
and a shard sees only its own. Nothing is paid while no HyperNode exists (Volcano v1.9-v1.11 serve none): the
app starts its Nodes informer at the first HyperNode, and only then are pods counted per node (`activate`
sums the pods the store already holds, once; afterwards each pod event moves its own contribution).

What is kept, all under the store's lock:
- per node: name, labels, physical GPUs (`core.gpushare.node_gpus`, read again only when the labels, the
  device plugin's annotations or allocatable change), allocatable cpu and memory, Ready and not cordoned;
- per node and per PodGroup: the requests of the Volcano pods (bound to it / of it) not finished, in integer
  nano-units so adding and removing never drifts;
- the HyperNodes' specs (members' selectors), resolved to leaf nodes only when they or a node's labels changed.

The verdicts are made by `judge`, called from `WaitingJobs.refresh` (at a scrape), at most every
`interval_seconds` (10 s): a waiting job's reason may lag a placement by that much, as the watchdog's does.
Pods that are not Volcano's are not counted (the exporter does not watch them), as the watchdog's GpuStranded
and topology view do not. A pod asking its vGPU memory in MiB without cores counts the share the exporter's
own parse gives it (the configured card memory), not its node's card: the exporter has no node when it parses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.gpushare import node_gpus, physical_gpus
from volcano_monitor.core.model import Node, Pod, PodGroup, Resources, res_get
from volcano_monitor.core.topology import (
    GangShape,
    HyperNodeSpec,
    NodeRoom,
    Tree,
    Verdict,
    gang_shape,
    resolve,
    topology_verdict,
)

GroupKey = tuple[str, str]  # (namespace, podgroup name)
NANO = 1_000_000_000
DONE_PHASES = frozenset({"Succeeded", "Failed"})  # their requests no longer hold anything on a node
INTERVAL_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the exporter keeps of a Node (the informer's transform): the rest of a Node is never read here."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]  # the GPU device plugins' register annotations only
    allocatable: Resources
    schedulable: bool  # Ready and not cordoned
    problems: tuple[str, ...] = ()


def node_view(node: Node) -> NodeView:
    return NodeView(node.name, node.labels, node.annotations, node.allocatable, node.ready and not node.unschedulable,
                    node.problems)


@dataclass(slots=True)
class _Node:
    view: NodeView
    cards: float


def is_hard(group: PodGroup) -> bool:
    topology = group.network_topology
    return topology is not None and topology.mode == "hard"


def _amounts(pod: Pod) -> tuple[int, int, int]:
    requests = pod.requests
    return (round(physical_gpus(requests) * NANO), round(res_get(requests, "cpu") * NANO),
            round(res_get(requests, "memory") * NANO))


def _add(sums: dict[Any, list[int]], key: object, amounts: tuple[int, int, int], sign: int) -> None:
    """Adds (sign 1) or takes away (-1) one pod's amounts; the entry goes with its last pod."""
    entry = sums.get(key)
    if entry is None:
        entry = sums[key] = [0, 0, 0, 0]
    entry[0] += sign * amounts[0]
    entry[1] += sign * amounts[1]
    entry[2] += sign * amounts[2]
    entry[3] += sign
    if entry[3] <= 0:
        del sums[key]


class Topology:
    def __init__(self, enabled: bool, clock: Callable[[], float] = time.monotonic,
                 interval_seconds: float = INTERVAL_SECONDS) -> None:
        """`enabled`: this exporter may say `topology_fragmented` (it is unsharded)."""
        self.enabled = enabled
        self.active = False  # a HyperNode was seen: pods are counted per node and group
        self.clock, self.interval_seconds = clock, interval_seconds
        self.nodes_listed: Callable[[], bool] = lambda: False  # set by the app with the Nodes informer
        self._nodes: dict[str, _Node] = {}
        self._specs: dict[str, HyperNodeSpec] = {}
        self._node_used: dict[str, list[int]] = {}  # node -> [gpus, cpu, memory (nano), pods]
        self._group_used: dict[GroupKey, list[int]] = {}  # (namespace, podgroup) -> the same
        self._tree: Tree | None = None  # None: to resolve again
        self._last: float | None = None

    # ---- events (the store's lock held) -----------------------------------------------------------------

    def on_hypernode(self, spec: HyperNodeSpec, deleted: bool, pods: Callable[[], Iterable[Pod]]) -> bool:
        """A HyperNode changed. True the first time one is seen (the app then starts its Nodes informer);
        `pods`: the pods the store holds, summed once then."""
        if not self.enabled or not spec.name:
            return False
        if deleted:
            self._specs.pop(spec.name, None)
        else:
            self._specs[spec.name] = spec
        self._tree = None
        if self.active or deleted:
            return False
        self.active = True
        for pod in pods():
            self.on_pod(None, pod)
        return True

    def on_node(self, view: NodeView, deleted: bool) -> None:
        old = self._nodes.get(view.name)
        if deleted:
            if old is not None:
                del self._nodes[view.name]
                self._tree = None
            return
        if old is not None and old.view.labels == view.labels and old.view.annotations == view.annotations \
                and old.view.allocatable == view.allocatable:
            old.view = view  # a status update: same cards, same tree
            return
        self._nodes[view.name] = _Node(view, float(node_gpus(view.labels, view.annotations, view.allocatable).cards))
        if old is None or old.view.labels != view.labels:
            self._tree = None

    def on_pod(self, old: Pod | None, new: Pod | None) -> None:
        """A pod's previous view (None: new) and its current one (None: gone): its node's and its group's
        sums move by the difference. Cheap when nothing counted changed (the usual status update)."""
        if old is not None and new is not None and old.requests is new.requests and old.phase == new.phase \
                and old.node_name == new.node_name and old.podgroup == new.podgroup:
            return
        for pod, sign in ((old, -1), (new, 1)):
            if pod is None or pod.phase in DONE_PHASES or not (pod.node_name or pod.podgroup):
                continue
            amounts = _amounts(pod)
            if pod.node_name:
                _add(self._node_used, pod.node_name, amounts, sign)
            if pod.podgroup:
                _add(self._group_used, (pod.namespace, pod.podgroup), amounts, sign)

    # ---- verdicts ---------------------------------------------------------------------------------------

    def judge(self, groups: Iterable[tuple[GroupKey, PodGroup]]) -> dict[GroupKey, str] | None:
        """The waiting hard-topology `groups` found fragmented, with the message; None when it is too soon
        to judge again (or nothing can be judged: no HyperNode, or the nodes not listed yet)."""
        if not self.active or not self.nodes_listed():
            return None
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_seconds:
            return None
        self._last = now
        if self._tree is None:
            self._tree = resolve(self._specs.values(), {n: node.view.labels for n, node in self._nodes.items()})
        tree = self._tree
        found: dict[GroupKey, str] = {}
        if not tree.leaves:
            return found
        rooms: dict[str, NodeRoom] | None = None
        verdicts: dict[tuple[float, float, float, int], Verdict | None] = {}
        for group_key, group in groups:
            shape = self._shape(group_key, group, tree)
            if shape is None:
                continue
            if shape not in verdicts:
                if rooms is None:
                    rooms = self._rooms()
                verdicts[shape] = topology_verdict(*shape, tree, rooms)
            verdict = verdicts[shape]
            if verdict is not None:
                found[group_key] = verdict.message
        return found

    def _shape(self, group_key: GroupKey, group: PodGroup, tree: Tree) -> GangShape | None:
        used = self._group_used.get(group_key)
        pods = None if used is None else (used[0] / NANO, used[1] / NANO, used[2] / NANO, used[3])
        return gang_shape(group, pods, tree)

    def _rooms(self) -> dict[str, NodeRoom]:
        rooms = {}
        for name, node in self._nodes.items():
            used = self._node_used.get(name, (0, 0, 0, 0))
            alloc = node.view.allocatable
            rooms[name] = NodeRoom(name, node.cards, res_get(alloc, "cpu"), res_get(alloc, "memory"),
                                   used_gpus=used[0] / NANO, used_cpu=used[1] / NANO, used_memory=used[2] / NANO,
                                   schedulable=node.view.schedulable)
        return rooms
