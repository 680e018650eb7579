"""HyperNode fragmentation: free physical GPUs per HyperNode, the largest gang one HyperNode of each tier can
still take, and whether a hard-topology gang fits anywhere it is allowed to go. Pure, no I/O: the watchdog's
`findings/topology.py` feeds it.

Why: with topology-aware scheduling (Volcano v1.12+, `topology.volcano.sh` HyperNodes) a PodGroup with
`networkTopology: {mode: hard, highestTierAllowed: N}` must be placed inside ONE HyperNode of tier <= N. A
cluster with 16 free GPUs spread 4 to a tier-1 HyperNode takes no 8-GPU gang at tier 1, and nothing in
Volcano says so: the gang waits, looking like a plain "not enough resources".

The tree, as Volcano's scheduler resolves it (`GetMembers`): a HyperNode's members are `Node`s, picked by
`exactMatch` (a name), `regexMatch` (Go's `regexp.MatchString`: unanchored, so `re.search` here) or
`labelMatch` (a label selector; an empty one picks nothing), or `HyperNode`s, picked by `exactMatch`. Its
leaf nodes are its Node members and the leaves of its HyperNode members, whatever the tiers say.

A node's room for a gang is GpuStranded's rule (watchdog/findings/detectors/stranded.py): a gang spreads one
GPU-granular pod at a time, each GPU needing `cpu_per_gpu` cores and `memory_per_gpu` bytes, so a node takes
`floor(min(free GPUs, free cpu / cpu_per_gpu, free memory / memory_per_gpu))`, a HyperNode the sum over its
leaf nodes. Nodes not Ready or cordoned take nothing and count no free GPU.

Bad input never raises: a member naming an unknown node or HyperNode, a loop, a regex that does not compile,
a label operator Kubernetes does not know are each a `Problem` in the result (the caller counts and logs
them), and the member picks nothing (a loop's back edge is cut).
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from volcano_monitor.core.fields import arr, integer, istring, item_obj, obj, read_meta, root, string, string_map

__all__ = ["BAD_REGEX", "BAD_SELECTOR", "LOOP", "PROBLEM_KINDS", "UNKNOWN_HYPERNODE", "UNKNOWN_NODE", "Fragmentation",
           "HyperNodeRoom", "HyperNodeSpec", "Member", "NodeRoom", "Problem", "Requirement", "Tree", "Verdict",
           "fits_in_topology", "fragmentation", "largest_gang", "node_usable_gpus", "parse_hypernode_spec", "resolve",
           "tier_of_name", "topology_verdict", "usable_gpus"]

EPSILON = 1e-9

UNKNOWN_NODE = "unknown_node"  # an exactMatch Node member the cluster has no node of that name for
UNKNOWN_HYPERNODE = "unknown_hypernode"  # a HyperNode member naming no HyperNode
LOOP = "loop"  # a HyperNode reached again on the way down from itself
BAD_REGEX = "bad_regex"  # a regexMatch pattern that does not compile
BAD_SELECTOR = "bad_selector"  # no selector, an unknown label operator, In/NotIn without values
PROBLEM_KINDS = (UNKNOWN_NODE, UNKNOWN_HYPERNODE, LOOP, BAD_REGEX, BAD_SELECTOR)

LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})



@dataclass(frozen=True, slots=True)
class Requirement:
    """One `matchExpressions` entry of a labelMatch."""

    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Member:
    """One `spec.members[]` entry: its type and its selector (at most one of the three is set)."""

    type: str  # Node | HyperNode
    exact: str = ""
    regex: str = ""
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()
    has_labels: bool = False  # a labelMatch was given (an empty one picks nothing, as in Volcano)


@dataclass(frozen=True, slots=True)
class HyperNodeSpec:
    """A HyperNode with its members' selectors (core.kinds.HyperNode only counts them, for the exporter)."""

    name: str
    tier: int
    tier_name: str
    members: tuple[Member, ...]
    problems: tuple[str, ...] = ()


def parse_hypernode_spec(raw: object) -> HyperNodeSpec:
    """A `topology.volcano.sh/v1alpha1` HyperNode (v1.12+; `tierName` v1.14+). Never raises: a field of the
    wrong type is its default and a line in `problems` (core.model's rule)."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    members = []
    for i, raw_member in enumerate(arr(spec, "members", "spec.", probs)):
        path = f"spec.members[{i}]"
        m = item_obj(raw_member, path, probs)
        sel = obj(m, "selector", path + ".", probs)
        p = path + ".selector."
        exact = string(obj(sel, "exactMatch", p, probs), "name", p + "exactMatch.", probs)
        regex = string(obj(sel, "regexMatch", p, probs), "pattern", p + "regexMatch.", probs)
        labels = obj(sel, "labelMatch", p, probs)
        lp = p + "labelMatch."
        exprs = []
        for j, raw_expr in enumerate(arr(labels, "matchExpressions", lp, probs)):
            ep = f"{lp}matchExpressions[{j}]"
            e = item_obj(raw_expr, ep, probs)
            values = tuple(v for v in arr(e, "values", ep + ".", probs) if isinstance(v, str))
            exprs.append(Requirement(string(e, "key", ep + ".", probs), string(e, "operator", ep + ".", probs),
                                     values))
        members.append(Member(
            type=istring(m, "type", path + ".", probs) or "Node", exact=exact, regex=regex,
            match_labels=tuple(sorted(string_map(labels, "matchLabels", lp, probs).items())),
            match_expressions=tuple(exprs), has_labels=isinstance(sel.get("labelMatch"), Mapping)))
    return HyperNodeSpec(name=meta[1], tier=integer(spec, "tier", "spec.", probs),
                         tier_name=istring(spec, "tierName", "spec.", probs), members=tuple(members),
                         problems=tuple(probs))



@dataclass(frozen=True, slots=True)
class Problem:
    kind: str  # one of PROBLEM_KINDS
    hypernode: str
    detail: str

    def __str__(self) -> str:
        return f"HyperNode {self.hypernode}: {self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Tree:
    """The HyperNodes resolved down to their leaf nodes."""

    tiers: Mapping[str, int]  # HyperNode -> tier
    tier_names: Mapping[str, str]  # HyperNode -> tierName ("" when absent)
    leaves: Mapping[str, frozenset[str]]  # HyperNode -> the nodes under it
    problems: tuple[Problem, ...] = ()


def _label_match(member: Member, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in member.match_labels):
        return False
    for req in member.match_expressions:
        present = req.key in labels
        if req.operator == "In" and not (present and labels[req.key] in req.values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in req.values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
    return True


def _selector_problem(member: Member) -> str:  # why Kubernetes would reject a labelMatch ("" if well formed)
    for req in member.match_expressions:
        if req.operator not in LABEL_OPERATORS:
            return f"label operator {req.operator!r} (In, NotIn, Exists, DoesNotExist)"
        if req.operator in ("In", "NotIn") and not req.values:
            return f"label operator {req.operator} on {req.key!r} without values"
    return ""


def _node_members(spec: HyperNodeSpec, member: Member, nodes: Mapping[str, Mapping[str, str]],
                  problems: list[Problem]) -> set[str]:
    if member.exact:
        if member.exact not in nodes:
            problems.append(Problem(UNKNOWN_NODE, spec.name, f"node {member.exact} does not exist"))
            return set()
        return {member.exact}
    if member.regex:
        try:
            pattern = re.compile(member.regex)
        except (re.error, RecursionError, OverflowError) as exc:
            problems.append(Problem(BAD_REGEX, spec.name, f"regexMatch {member.regex!r}: {exc}"))
            return set()
        return {name for name in nodes if pattern.search(name)}
    if member.has_labels:
        bad = _selector_problem(member)
        if bad:
            problems.append(Problem(BAD_SELECTOR, spec.name, bad))
            return set()
        if not member.match_labels and not member.match_expressions:
            return set()  # Volcano: an empty labelMatch picks nothing
        return {name for name, labels in nodes.items() if _label_match(member, labels)}
    problems.append(Problem(BAD_SELECTOR, spec.name, "a Node member without exactMatch, regexMatch or labelMatch"))
    return set()


def _loops(children: Mapping[str, list[str]]) -> list[Problem]:
    """One Problem per back edge of a depth-first walk (iterative: a long chain cannot hit the recursion
    limit), naming the cycle."""
    problems = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(children):
        if start in state:
            continue
        path, stack = [start], [iter(children[start])]
        state[start] = 1
        while stack:
            kid = next(stack[-1], None)
            if kid is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(kid) == 1:
                problems.append(Problem(LOOP, path[-1], " -> ".join([*path[path.index(kid):], kid])))
            elif kid not in state:
                state[kid] = 1
                path.append(kid)
                stack.append(iter(children[kid]))
    return problems


def resolve(hypernodes: Iterable[HyperNodeSpec], nodes: Mapping[str, Mapping[str, str]]) -> Tree:
    """Each HyperNode's leaf nodes. `nodes`: every node's name and labels. A HyperNode listed twice keeps the
    last; one without a name is skipped."""
    specs = {spec.name: spec for spec in hypernodes if spec.name}
    problems: list[Problem] = []
    direct: dict[str, set[str]] = {}
    children: dict[str, list[str]] = {}
    for spec in specs.values():
        mine: set[str] = set()
        kids: list[str] = []
        for member in spec.members:
            if member.type == "HyperNode":
                name = member.exact
                if not name:
                    problems.append(Problem(BAD_SELECTOR, spec.name, "a HyperNode member without exactMatch"))
                elif name not in specs:
                    problems.append(Problem(UNKNOWN_HYPERNODE, spec.name, f"HyperNode {name} does not exist"))
                else:
                    kids.append(name)
            else:
                mine |= _node_members(spec, member, nodes, problems)
        direct[spec.name] = mine
        children[spec.name] = kids
    problems.extend(_loops(children))
    leaves: dict[str, frozenset[str]] = {}
    for name in sorted(specs):  # each HyperNode's subtree walked on its own: a loop cannot make it partial
        found, seen, todo = set(direct[name]), {name}, list(children[name])
        while todo:
            kid = todo.pop()
            if kid not in seen:
                seen.add(kid)
                found |= direct[kid]
                todo.extend(children[kid])
        leaves[name] = frozenset(found)
    return Tree(tiers={n: s.tier for n, s in specs.items()}, tier_names={n: s.tier_name for n, s in specs.items()},
                leaves=leaves, problems=tuple(problems))


def tier_of_name(tree: Tree, tier_name: str) -> int | None:
    """The tier a `highestTierName` (v1.14+) stands for: the tier of the HyperNodes carrying that tierName."""
    tiers = [tree.tiers[n] for n, name in tree.tier_names.items() if name == tier_name]
    return min(tiers) if tiers else None



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

