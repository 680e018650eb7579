"""HyperNode fragmentation in the watchdog: the families on its /metrics, `topology_fragmented` in `/why` and in
GangUnschedulable, and bad HyperNodes counted and logged.

The pool is tests/core/test_topology.py's (hand-computed values there): eight nodes of 8 GPUs, 64 cores,
512Gi in four tier-1 racks (r1..r4, two nodes each) under two tier-2 spines (s1: r1+r2, s2: r3+r4); each node
runs a 6-GPU pod (24 cores, 96Gi), n8 also a CPU-only pod of 36 cores. Free GPUs: 4 per rack, 8 per spine,
16 in all; largest gang: tier 1 = 4, tier 2 = 8. The gang `train` asks 8 GPUs (32 cores, 128Gi) with
networkTopology hard, highestTierAllowed 1: it fits the cluster (15 usable) but no rack. Once n3's pod ends,
r2 has 10 usable GPUs and the gang fits.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.core.test_topology import POOL, exact, hypernode, regex
from tests.exporter.objects import job_podgroup, queue, waiting_job
from tests.exporter.test_prometheus import parse_text
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.model import parse_job, parse_node, parse_podgroup, parse_queue
from volcano_monitor.core.topology import parse_hypernode_spec
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.why import why_router
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.signals import GANG_UNSCHEDULABLE
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health

GPU = "nvidia.com/gpu"
T1 = 1_800_000_000.0


def node(i: int) -> Any:
    allocatable = {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}
    return parse_node({"metadata": {"name": f"n{i}", "uid": f"uid-n{i}", "labels": {"rack": f"r{(i + 1) // 2}"}},
                       "status": {"allocatable": allocatable, "capacity": allocatable,
                                  "conditions": [{"type": "Ready", "status": "True"}]}})


def pod(name: str, node_name: str, cpu: str, memory: str, gpus: int) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory, **({GPU: str(gpus)} if gpus else {})}
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "labels": {"volcano.sh/job-name": name.rsplit("-", 1)[0], "volcano.sh/queue-name": "default"}},
            "spec": {"nodeName": node_name, "schedulerName": "volcano",
                     "containers": [{"name": "main", "resources": {"requests": requests}}]},
            "status": {"phase": "Running"}}


RUNNING = [pod(f"busy{i}-0", f"n{i}", "24", "96Gi", 6) for i in range(1, 9)] + [pod("etl-0", "n8", "36", "1Gi", 0)]


def topology_gang(tier: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    job = waiting_job("train", "default", 8, {"cpu": "4", "memory": "16Gi", GPU: "1"})
    group = job_podgroup(job, {"cpu": "32", "memory": "128Gi", GPU: "8"}, phase="Inqueue",
                         conditions=[{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                                      "message": "0/8 tasks in gang unschedulable",
                                      "lastTransitionTime": "2027-01-15T08:00:00Z"}])
    group["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": tier}
    return job, group


class Cluster:
    """A watchdog (no informers) fed events by hand; its API with `/why` and the topology families."""

    def __init__(self, engine: Engine, ttl: float = 10.0) -> None:
        self.now = T1
        self.watchdog = Watchdog(Settings(), engine, api=None, clock=lambda: self.now)
        self.watchdog.topology.ttl_seconds = ttl
        view = self.watchdog.topology
        health = Health(ready=lambda: True, collectors=dict, extra_metrics=view.render_metrics)
        self.client = TestClient(create_app(engine, Settings(), health, routers=[why_router(view.why)]))

    def start(self, hypernodes: list[dict[str, Any]], job: dict[str, Any], group: dict[str, Any]) -> None:
        for i in range(1, 9):
            self.watchdog.nodes.on_node(ADDED, node(i))
        for raw in hypernodes:
            self.watchdog.hypernodes.on_hypernode(ADDED, parse_hypernode_spec(raw))
        batch: list[tuple[str, str, Any]] = [("queues", ADDED, parse_queue(queue("root", parent=None))),
                                             ("queues", ADDED, parse_queue(queue("default")))]
        batch += [("pods", ADDED, self.watchdog.pod_view(p)) for p in RUNNING]
        batch += [("podgroups", ADDED, parse_podgroup(group)), ("jobs", ADDED, parse_job(job))]
        self.watchdog.apply(batch, [])

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        response = self.client.get("/metrics")
        assert response.status_code == 200
        return {(name, tuple(sorted(labels.items()))): value for name, labels, value in parse_text(response.text)
                if name.startswith(("volcano_hypernode_", "volcano_watchdog_hypernode_"))}

    def why(self, uid: str = "uid-train") -> dict[str, Any]:
        response = self.client.get(f"/api/v1/jobs/{uid}/why")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def free(name: str, tier: int) -> tuple[str, tuple[tuple[str, str], ...]]:
    return "volcano_hypernode_free_gpus", (("hypernode", name), ("tier", str(tier)))


def gang(tier: int) -> tuple[str, tuple[tuple[str, str], ...]]:
    return "volcano_hypernode_largest_gang_gpus", (("tier", str(tier)),)


def test_metrics_why_and_gang_alert_until_a_rack_frees_up(engine: Engine) -> None:
    cluster = Cluster(engine)
    job, group = topology_gang()
    cluster.start(POOL, job, group)

    got = cluster.metrics()
    assert {k: v for k, v in got.items() if k[0] != "volcano_watchdog_hypernode_problems"} == {
        free("r1", 1): 4, free("r2", 1): 4, free("r3", 1): 4, free("r4", 1): 4, free("s1", 2): 8, free("s2", 2): 8,
        gang(1): 4, gang(2): 8}
    assert {k[1][0][1]: v for k, v in got.items() if k[0] == "volcano_watchdog_hypernode_problems"} == {
        "unknown_node": 0, "unknown_hypernode": 0, "loop": 0, "bad_regex": 0, "bad_selector": 0}

    why = cluster.why()
    assert (why["reason"], why["scheduler_reason"]) == ("topology_fragmented", "NotEnoughResources")
    assert why["message"] == ("needs 8 GPUs inside one HyperNode of tier <= 1: the most one fits is 4 (HyperNode r1), "
                              "while the cluster's nodes could take 15")
    assert cluster.why("pg-uid-train")["reason"] == "topology_fragmented"  # by its PodGroup's UID too

    signals = [s for s in cluster.watchdog.detectors.gangs.check(T1) if s.kind == GANG_UNSCHEDULABLE]
    assert len(signals) == 1
    summary, details = signals[0].summary, signals[0].details
    assert "topology_fragmented: needs 8 GPUs inside one HyperNode of tier <= 1" in summary
    assert "(scheduler: 0/8 tasks in gang unschedulable)" in summary
    assert details["topology"]["largest_gang_gpus"] == 4 and details["topology"]["hypernode"] == "r1"
    assert details["reason"] == "NotEnoughResources"  # the scheduler's own word stays in the details

    # n3's 6-GPU pod ends: r2 has 8 + 2 usable. Within the TTL the snapshot stands; after it, all three change.
    cluster.watchdog.apply([("pods", DELETED, cluster.watchdog.pod_view(RUNNING[2]))], [])
    assert cluster.why()["reason"] == "topology_fragmented"
    cluster.now += 11
    got = cluster.metrics()
    assert (got[free("r2", 1)], got[gang(1)], got[free("s1", 2)], got[gang(2)]) == (10, 10, 14, 14)
    why = cluster.why()
    assert (why["reason"], why["scheduler_reason"]) == ("unschedulable", "NotEnoughResources")
    signals = [s for s in cluster.watchdog.detectors.gangs.check(T1 + 11) if s.kind == GANG_UNSCHEDULABLE]
    assert signals and "topology_fragmented" not in signals[0].summary and "topology" not in signals[0].details


def test_soft_mode_tier_two_and_no_hypernodes_are_not_fragmented(engine: Engine) -> None:
    cluster = Cluster(engine, ttl=0)
    job, group = topology_gang(tier=2)
    cluster.start(POOL, job, group)
    assert cluster.why()["reason"] == "unschedulable"  # s1 takes 8
    group["spec"]["networkTopology"] = {"mode": "soft", "highestTierAllowed": 1}
    cluster.watchdog.apply([("podgroups", MODIFIED, parse_podgroup(group))], [])
    assert cluster.why()["reason"] == "unschedulable"
    group["spec"]["networkTopology"] = {"mode": "hard", "highestTierName": "rack"}  # v1.14: by tier name
    cluster.watchdog.apply([("podgroups", MODIFIED, parse_podgroup(group))], [])
    assert cluster.why()["reason"] == "topology_fragmented"
    for raw in POOL:  # the HyperNodes go (a cluster before v1.12): nothing to say, no series
        cluster.watchdog.hypernodes.on_hypernode(DELETED, parse_hypernode_spec(raw))
    assert cluster.why()["reason"] == "unschedulable"
    assert cluster.metrics() == {}


def test_bad_hypernodes_are_counted_and_logged_once(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(engine, ttl=0)
    job, group = topology_gang()
    bad = [*POOL,
           hypernode("ghosts", 1, [exact("n1"), exact("ghost")]),
           hypernode("broken", 1, [regex("(unclosed")]),
           hypernode("loop-a", 3, [exact("loop-b", "HyperNode")]),
           hypernode("loop-b", 3, [exact("loop-a", "HyperNode")])]
    with caplog.at_level(logging.WARNING, logger="volcano_monitor.watchdog.findings.topology"):
        cluster.start(bad, job, group)
        first = cluster.metrics()
        again = cluster.metrics()  # computed again (TTL 0): the same problems, not logged twice
    problems = {k[1][0][1]: v for k, v in first.items() if k[0] == "volcano_watchdog_hypernode_problems"}
    assert problems == {"unknown_node": 1, "unknown_hypernode": 0, "loop": 1, "bad_regex": 1, "bad_selector": 0}
    assert again == first
    assert first[free("ghosts", 1)] == 2 and first[free("broken", 1)] == 0 and first[gang(1)] == 4
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3 and any("ghost does not exist" in m for m in logged)
    assert any("loop-a -> loop-b -> loop-a" in m for m in logged) and any("(unclosed" in m for m in logged)
    assert cluster.why()["reason"] == "topology_fragmented"  # the rest of the tree still judges the gang


def test_a_follower_serves_no_series(engine: Engine) -> None:
    cluster = Cluster(engine)
    job, group = topology_gang()
    cluster.start(POOL, job, group)
    cluster.watchdog.topology.leading = lambda: False
    assert cluster.metrics() == {}
    assert cluster.why()["reason"] == "topology_fragmented"  # every replica answers /why


def test_the_gang_is_counted_from_its_pods_physical_gpus(engine: Engine) -> None:
    """Volcano vGPU: the PodGroup's minResources say `volcano.sh/vgpu-number: 8`, no `*/gpu` at all; its 8
    pending pods each ask one whole vGPU (no memory or cores: the whole card), 1 physical GPU each. Counted from
    the pods the gang is 8 GPUs and fragmented; from minResources it would be 0 and never judged."""
    cluster = Cluster(engine)
    job, group = topology_gang()
    group["spec"]["minResources"] = {"requests.cpu": "32", "requests.memory": "128Gi", "volcano.sh/vgpu-number": "8",
                                     "count/pods": "8"}
    waiting = []
    for i in range(8):
        raw = pod(f"train-{i}", "", "4", "16Gi", 0)
        raw["spec"]["containers"][0]["resources"]["requests"]["volcano.sh/vgpu-number"] = "1"
        raw["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": group["metadata"]["name"]}
        raw["status"]["phase"] = "Pending"
        waiting.append(raw)
    cluster.start(POOL, job, group)
    cluster.watchdog.apply([("pods", ADDED, cluster.watchdog.pod_view(p)) for p in waiting], [])
    cluster.now += 11
    why = cluster.why()
    assert why["reason"] == "topology_fragmented" and why["message"].startswith("needs 8 GPUs")
    for raw in waiting[4:]:  # the gang shrinks to 4 pods of 1 GPU (minMember 4): r1 takes 4
        cluster.watchdog.apply([("pods", DELETED, cluster.watchdog.pod_view(raw))], [])
    group["spec"]["minMember"] = 4
    cluster.watchdog.apply([("podgroups", MODIFIED, parse_podgroup(group))], [])
    cluster.now += 11
    assert cluster.why()["reason"] == "unschedulable"


def test_a_vgpu_pod_asking_memory_in_mib_holds_its_share_of_the_nodes_card(engine: Engine) -> None:
    """Free GPUs read a MiB-only vGPU request against the card memory of the node it runs on (GPU feature
    discovery's label): 10 GiB of a 40 GiB card is a quarter, not the whole card of the no-node fallback."""
    cluster = Cluster(engine, ttl=0)
    job, group = topology_gang()
    cluster.start(POOL, job, group)
    raw = node(1)
    labelled = parse_node({"metadata": {"name": "n1", "uid": "uid-n1", "labels": {
        **raw.labels, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "40960"}},
        "status": {"allocatable": dict(raw.allocatable), "capacity": dict(raw.allocatable),
                   "conditions": [{"type": "Ready", "status": "True"}]}})
    cluster.watchdog.nodes.on_node(MODIFIED, labelled)
    vgpu = pod("infer-0", "n1", "1", "1Gi", 0)
    vgpu["spec"]["containers"][0]["resources"]["limits"] = {"volcano.sh/vgpu-number": "1",
                                                            "volcano.sh/vgpu-memory": "10240"}
    cluster.watchdog.apply([("pods", ADDED, cluster.watchdog.pod_view(vgpu))], [])
    cluster.now += 1
    assert cluster.metrics()[free("r1", 1)] == pytest.approx(3.75)


@pytest.mark.parametrize("vgpus", [
    {"volcano.sh/vgpu-number": "8"},  # 8 whole Volcano vGPUs: 8 cards (was 0: never judged)
    {GPU: "32", "nvidia.com/gpucores": "800", "nvidia.com/gpumem-percentage": "800"},  # 32 HAMi quarters (was 32)
])
def test_a_gang_without_pods_reads_vgpus_in_min_resources(engine: Engine, vgpus: dict[str, str]) -> None:
    """No pod yet: the gang is its minResources, whose vGPU counts and per-vGPU resources are sums over its pods
    (`core.gpushare.group_gpus`, as the ledger reads them): 8 physical GPUs either way, fragmented at tier 1."""
    cluster = Cluster(engine)
    job, group = topology_gang()
    group["spec"]["minResources"] = {"cpu": "32", "memory": "128Gi", **vgpus}
    cluster.start(POOL, job, group)
    why = cluster.why()
    assert why["reason"] == "topology_fragmented" and why["message"].startswith("needs 8 GPUs")
