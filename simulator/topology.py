"""Hard network topology as the simulated scheduler plays it (Volcano v1.12+): a gang whose PodGroup says
`networkTopology: {mode: hard, highestTierAllowed: N}` is placed inside ONE HyperNode of tier <= N, or not at
all, however many GPUs the cluster has free elsewhere.

The simulator's own reading of the HyperNode tree (kept apart from core.topology, which the monitor under test
uses, so the two check each other): a HyperNode's leaf nodes are its `Node` members, picked by `exactMatch`
(a name) or `regexMatch` (unanchored, as Go's regexp.MatchString), and the leaves of its `HyperNode` members
(`exactMatch`). Members that name nothing, loops and patterns that do not compile pick nothing. HyperNodes are
tried lowest tier first, then by name (Volcano's own order among equals is not modelled), and the gang's pods
are first-fit within the chosen HyperNode's nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
DEFAULT_HIGHEST_TIER = 1  # Volcano's default for highestTierAllowed in hard mode


@dataclass(frozen=True)
class Group:
    name: str
    tier: int
    nodes: frozenset[str]


def _members(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = obj.get("spec")
    members = spec.get("members") if isinstance(spec, dict) else None
    return [m for m in members if isinstance(m, dict)] if isinstance(members, list) else []


def _selector(member: Mapping[str, Any]) -> Mapping[str, Any]:
    selector = member.get("selector")
    return selector if isinstance(selector, dict) else {}


def _exact(member: Mapping[str, Any]) -> str | None:
    exact = _selector(member).get("exactMatch")
    name = exact.get("name") if isinstance(exact, dict) else None
    return name if isinstance(name, str) else None


def _regex(member: Mapping[str, Any]) -> re.Pattern[str] | None:
    match = _selector(member).get("regexMatch")
    pattern = match.get("pattern") if isinstance(match, dict) else None
    if not isinstance(pattern, str):
        return None
    try:
        return re.compile(pattern)
    except re.error:
        return None


def resolve(hypernodes: Iterable[Mapping[str, Any]], node_names: Iterable[str]) -> list[Group]:
    """Every HyperNode with its tier and leaf nodes, lowest tier first, then by name."""
    by_name: dict[str, Mapping[str, Any]] = {}
    for obj in hypernodes:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if isinstance(name, str):
            by_name[name] = obj
    nodes = sorted(node_names)
    leaves: dict[str, frozenset[str]] = {}

    def walk(name: str, path: tuple[str, ...]) -> frozenset[str]:
        if name in leaves:
            return leaves[name]
        found: set[str] = set()
        for member in _members(by_name[name]):
            if member.get("type") == "HyperNode":
                child = _exact(member)
                if child is not None and child in by_name and child not in path:
                    found |= walk(child, (*path, child))
                continue
            exact = _exact(member)
            if exact is not None:
                found |= {exact} & set(nodes)
            else:
                pattern = _regex(member)
                found |= {n for n in nodes if pattern is not None and pattern.search(n)}
        leaves[name] = frozenset(found)
        return leaves[name]

    groups = []
    for name, obj in by_name.items():
        spec = obj.get("spec")
        tier = spec.get("tier") if isinstance(spec, dict) else None
        if isinstance(tier, int):
            groups.append(Group(name, tier, walk(name, (name,))))
    return sorted(groups, key=lambda g: (g.tier, g.name))


def hard_tier(network_topology: Mapping[str, Any] | None) -> int | None:
    """highestTierAllowed of a hard-mode networkTopology; None when the gang is not bound to one HyperNode."""
    if not network_topology or network_topology.get("mode") != "hard":
        return None
    tier = network_topology.get("highestTierAllowed", DEFAULT_HIGHEST_TIER)
    return tier if isinstance(tier, int) else DEFAULT_HIGHEST_TIER


def allowed_groups(groups: Iterable[Group], highest_tier: int, holding: set[str]) -> list[Group]:
    """The HyperNodes the gang may go to: tier <= highest, holding every node its placed pods already run on."""
    return [g for g in groups if g.tier <= highest_tier and holding <= g.nodes]


def unplaced_message(nodes: int, highest_tier: int, groups: list[Group]) -> str:
    """The pods' FailedScheduling when no allowed HyperNode takes the gang."""
    where = f"none of {len(groups)} HyperNode(s) of tier <= {highest_tier} ({', '.join(g.name for g in groups)})" \
        if groups else f"no HyperNode of tier <= {highest_tier}"
    return (f"0/{nodes} nodes are unavailable: network topology mode hard: {where} can hold the whole gang.")
