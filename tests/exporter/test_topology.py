"""`topology_fragmented` in the exporter's `volcano_job_pending_reason` (exporter/topology.py).

End to end against the simulator's `vgpu-hami` scenario (simulator/vgpu_scenarios.py computes the values by
hand): allreduce-8 (8 GPUs, hard topology, tier <= 1) fits the cluster's 11 free GPUs but no rack (7 at most),
so an unsharded exporter says `topology_fragmented` until bert-sweep is deleted and rack-2 frees up. A sharded
exporter does not say it (a shard does not see every pod), and a cluster without HyperNodes (v1.11) starts no
Nodes informer and counts no pod per node. The sums kept per node and per group are checked against a fresh
recount after a run of pod events.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.exporter.harness import start_exporter
from tests.exporter.scrape import parse, select
from tests.simtools import client_for, wait_for
from volcano_monitor.core.model import Pod, PodGroup, parse_pod, parse_podgroup
from volcano_monitor.core.podrequests import res_from
from volcano_monitor.core.topology import HyperNodeSpec, Member
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.topology import NANO, NodeView, Topology, _amounts
from volcano_monitor.simulator import vgpu_scenarios as scenario
from volcano_monitor.simulator.runtime import SimulatorThread

REASON = "volcano_job_pending_reason"


def gang_reasons(exporter: Exporter) -> set[str]:
    """The reasons the exporter's /metrics gives allreduce-8 (its run is named allreduce-8-<suffix>)."""
    rows = select(parse(exporter.scrape()), REASON)
    return {dict(labels)["reason"] for labels in rows if dict(labels)["job_name"].startswith(scenario.GANG + "-")}


def node_informers(exporter: Exporter) -> list[str]:
    return [i.name for i in exporter.informers if i.kind.plural == "nodes"]


def free_per_hypernode(exporter: Exporter) -> dict[str, float]:
    """Free physical GPUs under each HyperNode from the exporter's per-node sums."""
    topology = exporter.store.topology
    with exporter.store.lock:
        rooms = topology._rooms()
        tree = topology._tree
    if tree is None:  # a HyperNode or node event since the last verdict: resolved at the next one
        return {}
    return {name: sum(rooms[n].free_gpus for n in leaves if n in rooms) for name, leaves in tree.leaves.items()}


def test_fragmented_gang_until_a_hypernode_frees_up(tmp_path: Path) -> None:
    sim = SimulatorThread(scenario="vgpu-hami", speed=60).start()
    exporter = start_exporter(sim, tmp_path / "kube")
    exporter.store.topology.interval_seconds = 0.1
    try:
        wait_for(lambda: gang_reasons(exporter) == {"topology_fragmented"}, timeout=60)
        assert node_informers(exporter) == ["nodes"]
        wait_for(lambda: free_per_hypernode(exporter) == scenario.HYPERNODE_FREE_GPUS, timeout=30)  # by hand
        rows = select(parse(exporter.scrape()), REASON, reason="topology_fragmented")
        assert {dict(labels)["resource"] for labels in rows} == {""}
        assert {dict(labels)["queue"] for labels in rows} == {"gpu"}

        api = client_for(sim, tmp_path / "kube")
        jobs = client.CustomObjectsApi(api).list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default",
                                                                          "jobs")["items"]
        blocker = next(j["metadata"]["name"] for j in jobs if j["metadata"]["name"].startswith(scenario.BLOCKER + "-"))
        client.CustomObjectsApi(api).delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default",
                                                                     "jobs", blocker)
        wait_for(lambda: "topology_fragmented" not in gang_reasons(exporter), timeout=60)
        wait_for(lambda: free_per_hypernode(exporter) == scenario.HYPERNODE_FREE_GPUS_AFTER, timeout=60)
    finally:
        exporter.stop()
        sim.stop()


def test_sharded_exporter_does_not_say_it(tmp_path: Path) -> None:
    """Both shards of two: the gang's row (in whichever shard owns it) keeps the reason below
    topology_fragmented, and no shard watches Nodes or counts pods per node."""
    sim = SimulatorThread(scenario="vgpu-hami", speed=60).start()
    shards = [start_exporter(sim, tmp_path / f"kube-{i}", shard=i, total_shards=2) for i in range(2)]
    try:
        for exporter in shards:
            exporter.store.topology.interval_seconds = 0.0

        def reasons() -> set[str]:
            return set().union(*(gang_reasons(e) for e in shards))

        wait_for(lambda: bool(reasons()), timeout=60)
        time.sleep(2)  # an unsharded exporter judging every scrape has said it by then (test above)
        assert reasons() and "topology_fragmented" not in reasons(), reasons()
        for exporter in shards:
            assert node_informers(exporter) == []
            assert not exporter.store.topology.active
    finally:
        for exporter in shards:
            exporter.stop()
        sim.stop()


@pytest.mark.parametrize("release", ["v1.9", "v1.11"])
def test_no_hypernodes_no_nodes_informer(release: str, tmp_path: Path) -> None:
    """Volcano before v1.12 serves no HyperNode (the informer idles on the 404): no Nodes informer is started
    and no pod is counted per node."""
    sim = SimulatorThread(scenario="default", speed=60, volcano_release=release).start()
    exporter = start_exporter(sim, tmp_path / "kube")
    try:
        wait_for(lambda: len(exporter.store._pod_state) > 0, timeout=30)
        hypernodes = next(i for i in exporter.informers if i.kind.plural == "hypernodes")
        wait_for(lambda: exporter.settled(hypernodes), timeout=30)
        assert node_informers(exporter) == []
        topology = exporter.store.topology
        assert topology.enabled and not topology.active
        assert topology._node_used == {} and topology._group_used == {}
    finally:
        exporter.stop()
        sim.stop()


# ---- the sums, against a recount ---------------------------------------------------------------------------


def pod(name: str, node: str, phase: str, gpus: int, group: str) -> Pod:
    return parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": name,
                     "annotations": {"scheduling.k8s.io/group-name": group}},
        "spec": {"nodeName": node, "schedulerName": "volcano", "containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1500m", "memory": "3Gi", "nvidia.com/gpu": str(gpus)},
            "limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": phase}})


def recount(pods: dict[str, Pod]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in pods.values():
        if p.node_name and p.phase not in ("Succeeded", "Failed"):
            entry = out.setdefault(p.node_name, [0, 0, 0, 0])
            for i, amount in enumerate(_amounts(p)):
                entry[i] += amount
            entry[3] += 1
    return out


def test_per_node_sums_follow_pod_events() -> None:
    rng = random.Random(7)
    topology = Topology(enabled=True)
    pods: dict[str, Pod] = {}
    assert topology.on_hypernode(HyperNodeSpec("rack", 1, "", (Member("Node", regex="n"),)), False,
                                 lambda: list(pods.values()))
    for _ in range(2000):
        name = f"p{rng.randrange(50)}"
        old = pods.get(name)
        if old is not None and rng.random() < 0.2:
            del pods[name]
            topology.on_pod(old, None)
            continue
        new = pod(name, rng.choice(["", "n1", "n2", "n3"]), rng.choice(["Pending", "Running", "Succeeded"]),
                  rng.randrange(3), f"g{rng.randrange(5)}")
        pods[name] = new
        topology.on_pod(old, new)
    assert topology._node_used == recount(pods)
    assert sum(entry[3] for entry in topology._group_used.values()) == \
        sum(1 for p in pods.values() if p.phase != "Succeeded")
    assert any(entry[0] >= 2 * NANO for entry in topology._node_used.values())


def test_judge_against_hand_made_cluster() -> None:
    """Two racks of 4 free GPUs each: an 8-GPU gang at tier 1 is fragmented (with the watchdog's message),
    one of 4 is not, and the verdict is not made again within the interval."""
    now = [100.0]
    topology = Topology(enabled=True, clock=lambda: now[0])
    topology.nodes_listed = lambda: True
    specs = [HyperNodeSpec("rack-1", 1, "", (Member("Node", exact="a"),)),
             HyperNodeSpec("rack-2", 1, "", (Member("Node", exact="b"),))]
    for spec in specs:
        topology.on_hypernode(spec, False, list)
    for name in ("a", "b"):
        allocatable = res_from({"cpu": 96.0, "memory": 768.0 * 2**30, "nvidia.com/gpu": 4.0})
        topology.on_node(NodeView(name, {}, {}, allocatable, True), False)

    def group(name: str, gpus: int) -> PodGroup:
        return parse_podgroup({"metadata": {"name": name, "namespace": "ns", "uid": name},
                               "spec": {"queue": "q", "minMember": gpus,
                                        "minResources": {"nvidia.com/gpu": str(gpus), "cpu": str(gpus)},
                                        "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
                               "status": {"phase": "Pending"}})

    found = topology.judge([(("ns", "big"), group("big", 8)), (("ns", "small"), group("small", 4))])
    assert found == {("ns", "big"): "needs 8 GPUs inside one HyperNode of tier <= 1: the most one fits is 4 "
                                    "(HyperNode rack-1), while the cluster's nodes could take 8"}
    assert topology.judge([(("ns", "big"), group("big", 8))]) is None  # within the interval
    now[0] += 10
    assert topology.judge([(("ns", "big"), group("big", 8))]) == found


@pytest.mark.parametrize("vgpus", [
    {"volcano.sh/vgpu-number": "8"},  # 8 whole Volcano vGPUs: 8 cards (read as 0 before)
    {"nvidia.com/gpu": "32", "nvidia.com/gpucores": "800", "nvidia.com/gpumem-percentage": "800"},  # 32 quarters
])
def test_a_gang_without_pods_reads_vgpus_in_min_resources(vgpus: dict[str, str]) -> None:
    """No pod yet: minResources sums the gang's vGPU counts and per-vGPU resources, read by
    `core.gpushare.group_gpus` as the watchdog and the ledger read them: 8 cards, too many for one rack of 4."""
    topology = Topology(enabled=True, clock=lambda: 100.0)
    topology.nodes_listed = lambda: True
    for rack, name in (("rack-1", "a"), ("rack-2", "b")):
        topology.on_hypernode(HyperNodeSpec(rack, 1, "", (Member("Node", exact=name),)), False, list)
        allocatable = res_from({"cpu": 96.0, "memory": 768.0 * 2**30, "nvidia.com/gpu": 4.0})
        topology.on_node(NodeView(name, {}, {}, allocatable, True), False)
    group = parse_podgroup({"metadata": {"name": "big", "namespace": "ns", "uid": "big"},
                            "spec": {"queue": "q", "minMember": 8, "minResources": {"cpu": "8", **vgpus},
                                     "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
                            "status": {"phase": "Pending"}})
    found = topology.judge([(("ns", "big"), group)])
    assert found is not None and found[("ns", "big")].startswith("needs 8 GPUs inside one HyperNode")
