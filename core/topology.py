"""HyperNode fragmentation: free physical GPUs per HyperNode, the largest gang one HyperNode of each tier can
still take, and whether a hard-topology gang fits anywhere it is allowed to go. Pure, no I/O: the watchdog's
`findings/topology.py` feeds it; the tree (HyperNodes resolved to their nodes, bad input as `Problem`s) is
`core.hypertree`'s, re-exported here.

Why: with topology-aware scheduling (Volcano v1.12+, `topology.volcano.sh` HyperNodes) a PodGroup with
`networkTopology: {mode: hard, highestTierAllowed: N}` must be placed inside ONE HyperNode of tier <= N. A
cluster with 16 free GPUs spread 4 to a tier-1 HyperNode takes no 8-GPU gang at tier 1, and nothing in
Volcano says so: the gang waits, looking like a plain "not enough resources".

A node's room for a gang is GpuStranded's rule (watchdog/findings/detectors/stranded.py): a gang spreads one
GPU-granular pod at a time, each GPU needing `cpu_per_gpu` cores and `memory_per_gpu` bytes, so a node takes
`floor(min(free GPUs, free cpu / cpu_per_gpu, free memory / memory_per_gpu))`, a HyperNode the sum over its
leaf nodes. Nodes not Ready or cordoned take nothing and count no free GPU.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from volcano_monitor.core.gpushare import group_gpus
from volcano_monitor.core.hypertree import (
    BAD_REGEX,
    BAD_SELECTOR,
    LOOP,
    PROBLEM_KINDS,
    UNKNOWN_HYPERNODE,
    UNKNOWN_NODE,
    HyperNodeSpec,
    Member,
    Problem,
    Requirement,
    Tree,
    parse_hypernode_spec,
    resolve,
    tier_of_name,
)
from volcano_monitor.core.model import PodGroup
from volcano_monitor.core.podrequests import res_get

__all__ = [
    "BAD_REGEX",
    "BAD_SELECTOR",
    "LOOP",
    "PROBLEM_KINDS",
    "UNKNOWN_HYPERNODE",
    "UNKNOWN_NODE",
    "Fragmentation",
    "GangShape",
    "HyperNodeRoom",
    "HyperNodeSpec",
    "Member",
    "NodeRoom",
    "Problem",
    "Requirement",
    "Tree",
    "Verdict",
    "fits_in_topology",
    "fragmentation",
    "gang_shape",
    "largest_gang",
    "node_usable_gpus",
    "parse_hypernode_spec",
    "resolve",
    "tier_of_name",
    "topology_verdict",
    "usable_gpus",
]

EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node's allocatable and what the pods bound to it (not finished) request, physical GPUs."""

    name: str
    gpus: float
    cpu: float
    memory: float
    used_gpus: float = 0.0
    used_cpu: float = 0.0
    used_memory: float = 0.0
    schedulable: bool = True  # Ready and not cordoned

    @property
    def free_gpus(self) -> float:
        return max(0.0, self.gpus - self.used_gpus) if self.schedulable else 0.0


def usable_gpus(free_gpus: float, free_cpu: float, free_memory: float, cpu_per_gpu: float, memory_per_gpu: float,
                granularity: float = 1.0) -> float:
    """The GPUs (in steps of `granularity`, 1: whole GPUs) a gang of pods needing `cpu_per_gpu` cores and
    `memory_per_gpu` bytes per GPU can still take from free amounts: GpuStranded's rule. A per-GPU amount of
    0 does not limit."""
    room = free_gpus
    if cpu_per_gpu > 0:
        room = min(room, free_cpu / cpu_per_gpu)
    if memory_per_gpu > 0:
        room = min(room, free_memory / memory_per_gpu)
    step = granularity if granularity > 0 else 1.0
    return max(0.0, math.floor(room / step + EPSILON) * step)


def node_usable_gpus(node: NodeRoom, cpu_per_gpu: float, memory_per_gpu: float, granularity: float = 1.0) -> float:
    """What `usable_gpus` gives of a node's free amounts (nothing on a node not Ready or cordoned)."""
    free_cpu, free_memory = node.cpu - node.used_cpu, node.memory - node.used_memory
    return usable_gpus(node.free_gpus, free_cpu, free_memory, cpu_per_gpu, memory_per_gpu, granularity) \
        if node.schedulable else 0.0


@dataclass(frozen=True, slots=True)
class HyperNodeRoom:  # one HyperNode in `Fragmentation`
    name: str
    tier: int
    tier_name: str
    nodes: int  # leaf nodes the cluster knows
    free_gpus: float  # free physical GPUs on its schedulable leaf nodes
    largest_gang: float  # GPUs a gang of the typical shape can take inside it


@dataclass(frozen=True, slots=True)
class Fragmentation:
    hypernodes: tuple[HyperNodeRoom, ...]  # by name
    largest_gang: Mapping[int, float]  # tier -> the most GPUs one HyperNode of that tier can take
    cluster_free_gpus: float
    cluster_largest_gang: float  # the gang spread over every node (no topology)
    problems: tuple[Problem, ...] = ()


def _inside(leaves: frozenset[str], nodes: Mapping[str, NodeRoom]) -> list[NodeRoom]:  # the ones known
    return [nodes[n] for n in leaves if n in nodes]


def fragmentation(tree: Tree, nodes: Iterable[NodeRoom], cpu_per_gpu: float, memory_per_gpu: float) -> Fragmentation:
    """Per HyperNode its free GPUs and the largest gang of the typical shape it takes; per tier the largest of
    these. A tier whose HyperNodes all lack GPUs says 0."""
    by_name = {n.name: n for n in nodes}
    usable = {n.name: node_usable_gpus(n, cpu_per_gpu, memory_per_gpu) for n in by_name.values()}
    rooms = []
    tiers: dict[int, float] = {}
    for name in sorted(tree.leaves):
        inside = _inside(tree.leaves[name], by_name)
        gang = sum(usable[n.name] for n in inside)
        rooms.append(HyperNodeRoom(name, tree.tiers[name], tree.tier_names[name], len(inside),
                                   sum(n.free_gpus for n in inside), gang))
        tiers[tree.tiers[name]] = max(tiers.get(tree.tiers[name], 0.0), gang)
    return Fragmentation(tuple(rooms), tiers, sum(n.free_gpus for n in by_name.values()), sum(usable.values()),
                         tree.problems)


def largest_gang(tree: Tree, nodes: Mapping[str, NodeRoom], highest_tier: int, cpu_per_gpu: float,
                 memory_per_gpu: float, granularity: float = 1.0) -> tuple[float, str]:
    """The most GPUs a gang of this per-GPU shape can take inside one HyperNode of tier <= `highest_tier`,
    and that HyperNode ("" when none is allowed)."""
    best, where = 0.0, ""
    usable: dict[str, float] = {}
    for name in sorted(tree.leaves):
        if tree.tiers[name] > highest_tier:
            continue
        gang = 0.0
        for node in _inside(tree.leaves[name], nodes):
            if node.name not in usable:
                usable[node.name] = node_usable_gpus(node, cpu_per_gpu, memory_per_gpu, granularity)
            gang += usable[node.name]
        if not where or gang > best + EPSILON:
            best, where = gang, name
    return best, where


def fits_in_topology(gang_gpus: float, cpu_per_gpu: float, memory_per_gpu: float, highest_tier_allowed: int,
                     tree: Tree, nodes: Mapping[str, NodeRoom]) -> bool:
    """Whether a hard-topology gang of `gang_gpus` GPUs, each needing `cpu_per_gpu` cores and `memory_per_gpu`
    bytes, fits inside one HyperNode of tier <= `highest_tier_allowed` now. A gang below one GPU is placed in
    steps of its own size (a fraction of a card), otherwise in whole GPUs."""
    granularity = min(1.0, gang_gpus) if gang_gpus > 0 else 1.0
    best, _ = largest_gang(tree, nodes, highest_tier_allowed, cpu_per_gpu, memory_per_gpu, granularity)
    return best + EPSILON >= gang_gpus


GangShape = tuple[float, float, float, int]  # (physical GPUs, cores, bytes, highest tier allowed)


def gang_shape(group: PodGroup, pods: tuple[float, float, float, int] | None, tree: Tree) -> GangShape | None:
    """What a hard-topology PodGroup asks, as the exporter and the watchdog both judge it: its unfinished
    pods' requests (`pods`: physical GPUs, cores, bytes summed, and how many pods) scaled to minMember of
    them; with no pod yet, its minResources, vGPUs read by `group_gpus` (the raw amounts are vGPU counts).
    None when no tier limit is given (by number or by a tier name the tree knows): any HyperNode will do."""
    topology = group.network_topology
    if topology is None or topology.mode != "hard":
        return None
    tier = topology.highest_tier_allowed
    if tier is None and topology.highest_tier_name:
        tier = tier_of_name(tree, topology.highest_tier_name)
    if tier is None:
        return None
    if pods is not None and pods[3] > 0:
        scale = min(1.0, group.min_member / pods[3]) if group.min_member > 0 else 1.0
        return pods[0] * scale, pods[1] * scale, pods[2] * scale, tier
    return (group_gpus(group.min_resources), res_get(group.min_resources, "cpu"),
            res_get(group.min_resources, "memory"), tier)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A hard-topology gang that would fit the cluster's free GPUs but no allowed HyperNode."""

    gang_gpus: float
    highest_tier: int
    largest_gang: float  # the most it could get inside one allowed HyperNode
    hypernode: str  # that HyperNode ("" when no HyperNode of an allowed tier exists)
    cluster_gpus: float  # what it could get spread over the whole cluster
    message: str = ""


def topology_verdict(gang_gpus: float, gang_cpu: float, gang_memory: float, highest_tier: int, tree: Tree,
                     nodes: Mapping[str, NodeRoom]) -> Verdict | None:
    """`topology_fragmented` or not, for a gang asking `gang_gpus` GPUs and `gang_cpu` cores and `gang_memory`
    bytes in all (its PodGroup's minResources; the per-GPU shape is their ratio): a Verdict when the gang
    would fit spread over all nodes but inside no HyperNode of tier <= `highest_tier`; None when it fits one,
    when the whole cluster cannot take it either (not a topology matter), or when it asks no GPU."""
    if gang_gpus <= EPSILON:
        return None
    cpu_per_gpu, memory_per_gpu = max(0.0, gang_cpu) / gang_gpus, max(0.0, gang_memory) / gang_gpus
    granularity = min(1.0, gang_gpus)
    everywhere = sum(node_usable_gpus(n, cpu_per_gpu, memory_per_gpu, granularity) for n in nodes.values())
    if everywhere + EPSILON < gang_gpus:
        return None
    best, where = largest_gang(tree, nodes, highest_tier, cpu_per_gpu, memory_per_gpu, granularity)
    if best + EPSILON >= gang_gpus:
        return None
    inside = f"the most one fits is {best:g} (HyperNode {where})" if where else "no HyperNode has such a tier"
    return Verdict(gang_gpus, highest_tier, best, where, everywhere,
                   f"needs {gang_gpus:g} GPUs inside one HyperNode of tier <= {highest_tier}: {inside}, "
                   f"while the cluster's nodes could take {everywhere:g}")

