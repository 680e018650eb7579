"""The node and waste detectors on shared GPUs (issue 31): a node's capacity is its cards, not its vGPU slots;
pods hold their share of a card; the card no one uses is stranded when CPU-only pods hold the node's CPU, and
simply free (idle, usable) when they do not; JobIdle and NodeHot speak of shares."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from volcano_monitor.core.gpushare import reset_problems, share_problems
from volcano_monitor.core.model import parse_job, parse_node, parse_pod
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.findings.detectors.gpuidle import GPU_IDLE, GpuIdleDetector
from volcano_monitor.watchdog.findings.detectors.hot import NodeHotDetector
from volcano_monitor.watchdog.findings.detectors.settings import Detectors, GpuStrandedSettings, NodeHotSettings
from volcano_monitor.watchdog.findings.detectors.stranded import GpuStrandedDetector, node_load, stranded_gpus
from volcano_monitor.watchdog.findings.detectors.waste import WasteDetector
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.models import JobRun, UsageRollup
from volcano_monitor.watchdog.state.gpu_idle import GpuIdleTracker
from volcano_monitor.watchdog.state.nodes import NodeTable, NodeUsage, gpu_cards, pods_by_node
from volcano_monitor.watchdog.state.samples import UsageSample

GI = 2**30
HAMI_QUARTER = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem-percentage": "25"}
VGPU_QUARTER = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "25", "volcano.sh/vgpu-memory-percentage": "25"}


def hami_node(name: str, cards: int, split: int = 10, cpu: int = 16, labels: bool = True,
              resource: str = "nvidia.com/gpu") -> Any:
    """A node whose device plugin offers `cards` x `split` vGPUs of `resource`; GFD labels its card count."""
    allocatable = {"cpu": str(cpu), "memory": "64Gi", "pods": "110", resource: str(cards * split)}
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if labels:
        meta["labels"] = {"nvidia.com/gpu.count": str(cards), "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                          "nvidia.com/gpu.memory": "40960"}
    return parse_node({"metadata": meta, "status": {"allocatable": allocatable, "capacity": allocatable,
                                                    "conditions": [{"type": "Ready", "status": "True"}]}})


def pod(name: str, node_name: str, cpu: float, gpu: dict[str, str] | None = None) -> Any:
    resources: dict[str, Any] = {"requests": {"cpu": str(cpu), "memory": "1Gi"}}
    if gpu:
        resources["limits"] = dict(gpu)
    return parse_pod({
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}",
                     "labels": {"volcano.sh/job-name": name.rsplit("-", 1)[0], "volcano.sh/queue-name": "batch"}},
        "spec": {"nodeName": node_name, "schedulerName": "volcano",
                 "containers": [{"name": "main", "resources": resources}]},
        "status": {"phase": "Running"}})


def cluster(nodes: list[Any], pods: list[Any]) -> tuple[NodeTable, ClusterIndex]:
    table, index = NodeTable(), ClusterIndex()
    index.card_memory = table.card_memory_mib
    for n in nodes:
        table.on_node("ADDED", n)
    for p in pods:
        index.on_pod("ADDED", p)
    return table, index


def quarters(node_name: str, gpu: dict[str, str] = HAMI_QUARTER) -> list[Any]:
    """Four pods at 25 % of one card, one core each."""
    return [pod(f"infer-{i}", node_name, 1, gpu) for i in range(4)]


def test_a_hami_node_of_four_cards_split_ten_ways_has_four_gpus() -> None:
    table, index = cluster([hami_node("h1", cards=4)], quarters("h1"))
    gpus = table.gpus("h1")
    assert gpus is not None and (gpus.cards, gpus.vgpus) == (4, 40)
    load = node_load(hami_node("h1", cards=4), pods_by_node(index)["h1"])
    assert load.gpus == 4 and load.free_gpus == pytest.approx(3.0)  # four quarters hold one card


def test_a_volcano_vgpu_node_without_labels_falls_back_to_the_default_split_and_says_so() -> None:
    reset_problems()
    node = hami_node("v1", cards=4, labels=False, resource="volcano.sh/vgpu-number")
    assert gpu_cards(node) == 4  # 40 vGPUs / the plugins' default split of 10
    assert share_problems().get("node_without_annotations", 0) >= 1


@pytest.mark.parametrize("gpu", [HAMI_QUARTER, VGPU_QUARTER], ids=["hami", "volcano-vgpu"])
def test_the_card_no_one_uses_is_stranded_when_cpu_only_pods_hold_the_cpu(gpu: dict[str, str]) -> None:
    # 2 cards, 16 cores: four quarter pods (4 cores) share card 0; card 1 is free.
    resource = "nvidia.com/gpu" if "nvidia.com/gpu" in gpu else "volcano.sh/vgpu-number"
    node = hami_node("h2", cards=2, resource=resource)
    etl = [pod("etl-0", "h2", 12)]  # a CPU-only pod takes the other 12 cores
    settings = GpuStrandedSettings()  # 4 cores per GPU
    for pods, expected in ((quarters("h2", gpu) + etl, 1), (quarters("h2", gpu), 0)):
        _, index = cluster([node], pods)
        load = node_load(node, pods_by_node(index)["h2"])
        assert load.gpus == 2 and load.free_gpus == pytest.approx(1.0)
        # with the CPU-only pod: the free card is stranded; without it, the card is free and usable (idle)
        assert stranded_gpus(load, settings) == expected


def test_gpu_stranded_alert_counts_cards(engine: Engine) -> None:
    table, index = cluster([hami_node("h3", cards=2)], [*quarters("h3"), pod("etl-0", "h3", 12)])
    detector = GpuStrandedDetector(GpuStrandedSettings(), table, index)
    with Session(engine) as session:
        signals = detector.check(session, datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    assert detector.stranded == {"h3": 1}
    assert len(signals) == 1 and signals[0].details["gpus"] == 2 and signals[0].details["free_gpus"] == 1
    assert "1 of its 1 free GPUs" in signals[0].summary  # not "of its 16" (20 vGPU slots - 4)


def test_node_hot_lists_each_pods_share_of_a_card() -> None:
    table, index = cluster([hami_node("h4", cards=1)], quarters("h4"))
    now = time.time()
    table.set_usage({"h4": NodeUsage(now, 15.5, 8 * GI)}, now)
    signals = NodeHotDetector(NodeHotSettings(), table, index).check(now)
    assert len(signals) == 1
    assert [p["gpu_request"] for p in signals[0].details["pods"]] == [pytest.approx(0.25)] * 4


def test_job_idle_on_a_quarter_of_a_card_says_so(engine: Engine) -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with Session(engine) as session:
        session.add(JobRun(uid="q", namespace="team-a", name="infer", workload="infer", queue="batch",
                           phase="Running", updated_at=now))
        for minute in range(40):
            session.add(UsageRollup(
                bucket_start=now - timedelta(minutes=minute + 1), bucket_seconds=60, namespace="team-a", pod="infer-0",
                container="main", job_uid="q", workload="infer", task="worker", queue="batch", samples=6,
                cpu_cores_sum=6.0, cpu_cores_max=1.0, memory_bytes_sum=6e9, memory_bytes_max=1e9, gpu_samples=6,
                gpu_util_sum=6 * 2.0, gpu_util_max=2.0, cpu_request_cores=1.0, memory_request_bytes=2**30,
                gpu_request=0.25))
        session.commit()
    with Session(engine) as session:
        found = [s for s in WasteDetector(Detectors()).check(session, now) if s.details.get("resource") == "gpu"]
    assert len(found) == 1
    assert "25% of a GPU" in found[0].summary and found[0].details["gpus_per_pod"] == 0.25


def test_gpu_idle_fires_for_quarter_pods_whose_shares_are_idle(engine: Engine) -> None:
    """Four quarter pods at 2 % of their shares for 20 minutes: GpuIdle, counted on the pods' physical shares."""
    _, index = cluster([hami_node("h5", cards=1)], [*quarters("h5"), pod("busy-0", "h5", 1, HAMI_QUARTER)])
    for name in ("infer", "busy"):
        index.on_job("ADDED", parse_job({"metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
                                         "spec": {"queue": "batch"}, "status": {"state": {"phase": "Running"}}}))
    settings = GpuIdleSettings.model_validate({"idle_util_percent": 5, "default": {"gpu_idle_limit_seconds": 600}})
    tracker = GpuIdleTracker(settings, max_gap_seconds=90)
    for i in range(21):
        ts = 1000.0 + 60 * i
        tracker.observe([UsageSample(ts, "team-a", f"infer-{n}", "main", 0.5, GI, 2.0, 0.25) for n in range(4)]
                        + [UsageSample(ts, "team-a", "busy-0", "main", 0.5, GI, 90.0, 0.25)], index.pod_info)
    live = {info.job_uid for info in (index.pod_info("team-a", "infer-0"), index.pod_info("team-a", "busy-0"))
            if info is not None}
    with Session(engine) as session:
        signals = GpuIdleDetector(settings, tracker, lambda: live).check(session, datetime.now(UTC))
    assert [(s.kind, s.job_name) for s in signals] == [(GPU_IDLE, "infer")]
    assert signals[0].details["gpu_pods"] == 4


def test_a_node_is_read_once_per_change_so_its_bad_input_is_counted_once() -> None:
    """Node status heartbeats (same labels and allocatable) do not read the node again: a vGPU node without
    the device plugin's annotation or GFD's count is counted when it appears and when its GPUs change."""
    reset_problems()
    table = NodeTable()
    unlabelled = hami_node("v2", cards=2, labels=False, resource="volcano.sh/vgpu-number")
    for _ in range(5):
        table.on_node("MODIFIED", unlabelled)
    gpus = table.gpus("v2")
    assert gpus is not None and gpus.cards == 2 and share_problems().get("node_without_annotations") == 1
    table.on_node("MODIFIED", hami_node("v2", cards=3, labels=False, resource="volcano.sh/vgpu-number"))
    gpus = table.gpus("v2")
    assert gpus is not None and gpus.cards == 3 and share_problems().get("node_without_annotations") == 2
    assert table.card_memory_mib("v2") is None  # no label, no annotation: the card's memory is not known
    table.on_node("MODIFIED", hami_node("v2", cards=3))
    assert table.card_memory_mib("v2") == 40960 and table.card_memories() == {"v2": 40960}
    table.on_node("DELETED", unlabelled)
    assert table.gpus("v2") is None and table.card_memory_mib("v2") is None


@pytest.mark.parametrize("key", ["hami.io/node-nvidia-register", "volcano.sh/node-vgpu-register"])
def test_a_node_without_gpu_feature_discovery_counts_the_cards_its_register_annotation_lists(key: str) -> None:
    """The Node view keeps the device plugins' register annotations (and no other), so a node whose
    allocatable offers 40 vGPUs but whose plugin registered 3 cards has 3, not 40 nor 40 / 10."""
    reset_problems()
    devices = [{"id": f"GPU-{i}", "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100-SXM4-40GB",
                "health": True} for i in range(3)]
    resource = "nvidia.com/gpu" if key.startswith("hami") else "volcano.sh/vgpu-number"
    allocatable = {"cpu": "16", "memory": "64Gi", resource: "40"}
    node = parse_node({"metadata": {"name": "r1", "uid": "uid-r1", "annotations": {
        key: json.dumps(devices), "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd.sock"}},
        "status": {"allocatable": allocatable, "capacity": allocatable}})
    assert dict(node.annotations) == {key: json.dumps(devices)}  # only the register annotation is kept
    table = NodeTable()
    table.on_node("ADDED", node)
    gpus = table.gpus("r1")
    assert gpus is not None and gpus.cards == 3 and gpus.memory_mib == 40960
    assert share_problems().get("node_without_annotations", 0) == 0
