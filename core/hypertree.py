"""The HyperNode tree (`topology.volcano.sh`, Volcano v1.12+) resolved to its nodes, for `core.topology`.

As Volcano's scheduler resolves it (`GetMembers`): a HyperNode's members are `Node`s, picked by `exactMatch` (a
name), `regexMatch` (Go's `regexp.MatchString`: unanchored, so `re.search` here) or `labelMatch` (a label
selector; an empty one picks nothing), or `HyperNode`s, picked by `exactMatch`. Its leaf nodes are its Node
members and the leaves of its HyperNode members, whatever the tiers say. `core.kinds.HyperNode` only counts
the members (the exporter's families); this module keeps their selectors.

Bad input never raises: a member naming an unknown node or HyperNode, a loop, a regex that does not compile,
a label operator Kubernetes does not know are each a `Problem` in the result (the caller counts and logs
them), and the member picks nothing (a loop's back edge is cut). Pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from volcano_monitor.core.fields import arr, integer, istring, item_obj, obj, read_meta, root, string, string_map

__all__ = ["BAD_REGEX", "BAD_SELECTOR", "LOOP", "PROBLEM_KINDS", "UNKNOWN_HYPERNODE", "UNKNOWN_NODE", "HyperNodeSpec",
           "Member", "Problem", "Requirement", "Tree", "parse_hypernode_spec", "resolve", "tier_of_name"]

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


class _Nodes:
    """The nodes' labels, and an index (key, value) -> nodes built on first use: a labelMatch is checked
    against the nodes carrying its matchLabels (or an In's values) only, not all (625 racks x 5000 nodes
    took 2.2 s, 20 ms with the index)."""

    def __init__(self, labels: Mapping[str, Mapping[str, str]]) -> None:
        self.labels = labels
        self._index: dict[tuple[str, str], set[str]] | None = None

    def having(self, key: str, value: str) -> set[str]:
        if self._index is None:
            self._index = {}
            for name, labels in self.labels.items():
                for pair in labels.items():
                    self._index.setdefault(pair, set()).add(name)
        return self._index.get((key, value), set())

    def candidates(self, member: Member) -> Iterable[str]:
        if member.match_labels:
            return set.intersection(*(self.having(k, v) for k, v in member.match_labels))
        ins = [r for r in member.match_expressions if r.operator == "In"]
        if ins:
            return set().union(*(self.having(ins[0].key, v) for v in ins[0].values))
        return self.labels


def _node_members(spec: HyperNodeSpec, member: Member, known: _Nodes, problems: list[Problem]) -> set[str]:
    nodes = known.labels
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
        return {name for name in known.candidates(member) if _label_match(member, nodes[name])}
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
    known = _Nodes(nodes)
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
                mine |= _node_members(spec, member, known, problems)
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
