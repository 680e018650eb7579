"""core.topology against values computed by hand.

The pool (`POOL`): eight nodes of 8 GPUs, 64 cores, 512Gi; four tier-1 HyperNodes (racks) of two nodes each,
two tier-2 HyperNodes (spines) of two racks each. Every node runs a 6-GPU pod (24 cores, 96Gi), so 2 GPUs are
free per node: 4 per rack, 8 per spine, 16 in the cluster. On n8 a CPU-only pod also holds 36 cores: 4 cores
left, at the typical 4 cores per GPU 1 GPU usable there.

By hand:
- free GPUs: r1..r4 = 4 each; s1 = s2 = 8; cluster 16.
- largest gang (whole GPUs, 4 cores and 16Gi each): r1, r2, r3 = 2 + 2 = 4; r4 = 2 + 1 = 3;
  s1 = 4 + 4 = 8; s2 = 4 + 3 = 7. Tier 1: 4, tier 2: 8; the cluster spread: 15.
- an 8-GPU gang (32 cores, 128Gi: 4 cores and 16Gi per GPU) with highestTierAllowed 1 waits: the most one
  rack takes is 4 (r1) while the cluster takes 15; with tier 2 it fits (s1 takes 8).
- free r2's n3 (its 6-GPU pod ends): n3 has 8 usable, r2 = 8 + 2 = 10 >= 8, the gang fits at tier 1.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from volcano_monitor.core.pending import (
    REASONS,
    TOPOLOGY_FRAGMENTED,
    UNSCHEDULABLE,
    Explanation,
    with_topology,
)
from volcano_monitor.core.topology import (
    BAD_REGEX,
    BAD_SELECTOR,
    LOOP,
    UNKNOWN_HYPERNODE,
    UNKNOWN_NODE,
    NodeRoom,
    fits_in_topology,
    fragmentation,
    largest_gang,
    parse_hypernode_spec,
    resolve,
    tier_of_name,
    topology_verdict,
    usable_gpus,
)

GI = 2.0**30
CPU_PER_GPU, MEMORY_PER_GPU = 4.0, 16 * GI


def hypernode(name: str, tier: int, members: list[dict[str, Any]], tier_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"tier": tier, "members": members}
    if tier_name:
        spec["tierName"] = tier_name
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": spec}


def exact(name: str, kind: str = "Node") -> dict[str, Any]:
    return {"type": kind, "selector": {"exactMatch": {"name": name}}}


def regex(pattern: str) -> dict[str, Any]:
    return {"type": "Node", "selector": {"regexMatch": {"pattern": pattern}}}


def labels(**match: str) -> dict[str, Any]:
    return {"type": "Node", "selector": {"labelMatch": {"matchLabels": match}}}


NODE_LABELS = {f"n{i}": {"rack": f"r{(i + 1) // 2}"} for i in range(1, 9)}

# r1 by exact names, r2 by a regex, r3 and r4 by labels: every selector kind Volcano resolves.
POOL = [
    hypernode("r1", 1, [exact("n1"), exact("n2")], "rack"),
    hypernode("r2", 1, [regex("^n[34]$")], "rack"),
    hypernode("r3", 1, [labels(rack="r3")], "rack"),
    hypernode("r4", 1, [{"type": "Node", "selector": {"labelMatch": {
        "matchExpressions": [{"key": "rack", "operator": "In", "values": ["r4"]}]}}}], "rack"),
    hypernode("s1", 2, [exact("r1", "HyperNode"), exact("r2", "HyperNode")], "spine"),
    hypernode("s2", 2, [exact("r3", "HyperNode"), exact("r4", "HyperNode")], "spine"),
]


def rooms(free_n3: bool = False) -> dict[str, NodeRoom]:
    out = {}
    for i in range(1, 9):
        name = f"n{i}"
        gpus, cpu, memory = (0.0, 0.0, 0.0) if free_n3 and name == "n3" else (6.0, 24.0, 96 * GI)
        if name == "n8":
            cpu += 36.0
        out[name] = NodeRoom(name, 8.0, 64.0, 512 * GI, gpus, cpu, memory)
    return out


def tree_of(raws: list[dict[str, Any]], nodes: dict[str, dict[str, str]] | None = None) -> Any:
    return resolve([parse_hypernode_spec(r) for r in raws], NODE_LABELS if nodes is None else nodes)


def test_leaves_resolve_through_every_selector_and_tier() -> None:
    tree = tree_of(POOL)
    assert tree.problems == ()
    assert {name: sorted(leaves) for name, leaves in tree.leaves.items()} == {
        "r1": ["n1", "n2"], "r2": ["n3", "n4"], "r3": ["n5", "n6"], "r4": ["n7", "n8"],
        "s1": ["n1", "n2", "n3", "n4"], "s2": ["n5", "n6", "n7", "n8"]}
    assert tier_of_name(tree, "spine") == 2 and tier_of_name(tree, "nope") is None


def test_fragmented_pool_by_hand() -> None:
    found = fragmentation(tree_of(POOL), rooms().values(), CPU_PER_GPU, MEMORY_PER_GPU)
    assert {h.name: (h.tier, h.free_gpus, h.largest_gang) for h in found.hypernodes} == {
        "r1": (1, 4, 4), "r2": (1, 4, 4), "r3": (1, 4, 4), "r4": (1, 4, 3), "s1": (2, 8, 8), "s2": (2, 8, 7)}
    assert dict(found.largest_gang) == {1: 4, 2: 8}
    assert (found.cluster_free_gpus, found.cluster_largest_gang) == (16, 15)


def test_hard_gang_of_eight_waits_at_tier_one_and_fits_at_tier_two() -> None:
    tree, nodes = tree_of(POOL), rooms()
    assert not fits_in_topology(8, CPU_PER_GPU, MEMORY_PER_GPU, 1, tree, nodes)
    assert fits_in_topology(8, CPU_PER_GPU, MEMORY_PER_GPU, 2, tree, nodes)
    assert largest_gang(tree, nodes, 1, CPU_PER_GPU, MEMORY_PER_GPU) == (4, "r1")
    verdict = topology_verdict(8, 32, 128 * GI, 1, tree, nodes)
    assert verdict is not None
    assert (verdict.largest_gang, verdict.hypernode, verdict.cluster_gpus) == (4, "r1", 15)
    assert "8 GPUs inside one HyperNode of tier <= 1" in verdict.message and "r1" in verdict.message
    assert topology_verdict(8, 32, 128 * GI, 2, tree, nodes) is None
    # 16 GPUs do not fit the cluster's 15 usable at all: not a topology matter
    assert topology_verdict(16, 64, 256 * GI, 1, tree, nodes) is None
    # a gang asking no GPU is not judged
    assert topology_verdict(0, 32, 128 * GI, 1, tree, nodes) is None


def test_gone_once_a_rack_frees_up() -> None:
    tree, nodes = tree_of(POOL), rooms(free_n3=True)
    found = fragmentation(tree, nodes.values(), CPU_PER_GPU, MEMORY_PER_GPU)
    assert dict(found.largest_gang) == {1: 10, 2: 14}
    assert topology_verdict(8, 32, 128 * GI, 1, tree, nodes) is None


def test_the_gangs_own_shape_counts() -> None:
    """An 8-GPU gang needing 8 cores per GPU gets on each node min(2 GPUs, 40 / 8 cores) = 2, on n8 0
    (4 cores): r4 takes 2, s2 takes 6, and the cluster 14."""
    verdict = topology_verdict(8, 64, 0, 2, tree_of(POOL), rooms())
    assert verdict is None  # s1 still takes 8
    verdict = topology_verdict(8, 64, 0, 1, tree_of(POOL), rooms())
    assert verdict is not None and verdict.cluster_gpus == 14


def test_unready_nodes_count_nothing() -> None:
    nodes = rooms()
    nodes["n1"] = NodeRoom("n1", 8, 64, 512 * GI, schedulable=False)
    found = fragmentation(tree_of(POOL), nodes.values(), CPU_PER_GPU, MEMORY_PER_GPU)
    assert {h.name: h.free_gpus for h in found.hypernodes}["r1"] == 2


def test_usable_gpus_is_gpu_strandeds_rule() -> None:
    assert usable_gpus(3, 10, 100 * GI, 4, 16 * GI) == 2  # cores: 10 / 4
    assert usable_gpus(3, 100, 20 * GI, 4, 16 * GI) == 1  # memory: 20 / 16
    assert usable_gpus(-1, 100, 100 * GI, 4, 16 * GI) == 0
    assert usable_gpus(0.75, 100, 100 * GI, 4, 16 * GI, granularity=0.25) == 0.75


def test_a_fractional_gang_is_placed_in_its_own_steps() -> None:
    nodes = {"a": NodeRoom("a", 1, 64, 512 * GI, used_gpus=0.5)}
    tree = tree_of([hypernode("h", 1, [exact("a")])], {"a": {}})
    assert fits_in_topology(0.5, 1, 1, 1, tree, nodes)
    assert not fits_in_topology(0.75, 1, 1, 1, tree, nodes)


def test_bad_input_is_counted_never_raised() -> None:
    raws = [
        hypernode("ghosts", 1, [exact("n1"), exact("ghost")]),
        hypernode("broken", 1, [regex("(unclosed")]),
        hypernode("odd", 1, [{"type": "Node", "selector": {"labelMatch": {"matchExpressions": [
            {"key": "rack", "operator": "Near", "values": ["r1"]}]}}}, {"type": "Node", "selector": {}}]),
        hypernode("loop-a", 2, [exact("loop-b", "HyperNode"), exact("n2")]),
        hypernode("loop-b", 2, [exact("loop-a", "HyperNode"), exact("n3")]),
        hypernode("orphan", 3, [exact("missing", "HyperNode")]),
        {"metadata": {"name": "garbage"}, "spec": {"tier": "one", "members": "everything"}},
        "not even an object",
    ]
    specs = [parse_hypernode_spec(r) for r in raws]
    assert specs[6].problems and specs[6].tier == 0 and specs[6].members == ()
    tree = resolve(specs, NODE_LABELS)
    counts = Counter(p.kind for p in tree.problems)
    assert counts == {UNKNOWN_NODE: 1, UNKNOWN_HYPERNODE: 1, LOOP: 1, BAD_REGEX: 1, BAD_SELECTOR: 2}
    assert tree.leaves["ghosts"] == {"n1"} and tree.leaves["broken"] == frozenset()
    assert tree.leaves["loop-a"] == {"n2", "n3"} and tree.leaves["loop-b"] == {"n2", "n3"}
    loop = next(p for p in tree.problems if p.kind == LOOP)
    assert "loop-a -> loop-b -> loop-a" in loop.detail
    found = fragmentation(tree, rooms().values(), CPU_PER_GPU, MEMORY_PER_GPU)
    assert {h.name: h.free_gpus for h in found.hypernodes}["loop-a"] == 4


def test_regex_is_unanchored_like_gos_match_string() -> None:
    tree = tree_of([hypernode("h", 1, [regex("n[12]")])], {"n1": {}, "gpu-n2-x": {}, "n3": {}})
    assert tree.leaves["h"] == {"n1", "gpu-n2-x"}


def test_with_topology_takes_the_place_of_lower_reasons_only() -> None:
    assert list(REASONS).index(TOPOLOGY_FRAGMENTED) == list(REASONS).index(UNSCHEDULABLE) - 1
    base = Explanation(UNSCHEDULABLE, "q", "", "NotEnoughResources: x", "NotEnoughResources", "x")
    moved = with_topology(base, "needs 8 GPUs")
    assert (moved.reason, moved.message, moved.scheduler_reason) == (TOPOLOGY_FRAGMENTED, "needs 8 GPUs",
                                                                     "NotEnoughResources")
    assert with_topology(base, "") is base
    full = Explanation("cluster_full", "root", "nvidia.com/gpu", "cluster: ...")
    assert with_topology(full, "needs 8 GPUs") is full


@pytest.mark.parametrize("tier", [0, 1])
def test_no_allowed_tier_means_no_hypernode(tier: int) -> None:
    """A gang allowed only below every tier finds no HyperNode: fragmented (tier 0 here), while tier 1 has r1."""
    verdict = topology_verdict(4, 16, 64 * GI, tier, tree_of(POOL), rooms())
    if tier == 0:
        assert verdict is not None and verdict.hypernode == "" and "no HyperNode" in verdict.message
    else:
        assert verdict is None


def test_label_selectors_as_kubernetes_reads_them() -> None:
    nodes = {"a": {"rack": "r1", "gpu": "a100"}, "b": {"rack": "r1"}, "c": {"rack": "r2", "gpu": "h100"}, "d": {}}

    def picked(selector: dict[str, Any]) -> set[str]:
        tree = tree_of([hypernode("h", 1, [{"type": "Node", "selector": {"labelMatch": selector}}])], nodes)
        assert tree.problems == ()
        return set(tree.leaves["h"])

    expr = [{"key": "gpu", "operator": "Exists"}]
    assert picked({"matchLabels": {"rack": "r1"}, "matchExpressions": expr}) == {"a"}
    assert picked({"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["r1"]}]}) == {"c", "d"}
    assert picked({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}) == {"b", "d"}
    assert picked({"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]},
                                        {"key": "gpu", "operator": "In", "values": ["h100"]}]}) == {"c"}
    assert picked({"matchLabels": {"rack": "r3"}}) == set()
    assert picked({}) == set()  # Volcano: an empty labelMatch picks nothing


def test_a_deep_chain_and_a_long_loop_do_not_recurse() -> None:
    """3000 HyperNodes each holding the next (and the last the first): no RecursionError, one loop reported."""
    n = 3000
    raws = [hypernode(f"h{i}", 1 + i // 1000, [exact(f"h{(i + 1) % n}", "HyperNode")]) for i in range(n)]
    raws.append(hypernode("leaf", 1, [exact("n1")]))
    raws[-2]["spec"]["members"].append(exact("leaf", "HyperNode"))
    tree = tree_of(raws)
    assert [p.kind for p in tree.problems] == [LOOP]
    assert tree.leaves["h0"] == {"n1"} and tree.leaves["h1234"] == {"n1"}
