"""The ledger counts physical GPUs on shared cards (issue 31): four pods at 25 % of one card for an hour are
one GPU-hour requested, on HAMi and on Volcano's vGPU, priced per physical GPU-hour; a whole-GPU job is what it
was. Driven through the real chain: parsed Job and pods -> cluster index -> usage recorder -> job_runs on
SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from volcano_monitor.core.model import parse_job, parse_node, parse_pod, parse_podgroup
from volcano_monitor.watchdog.state.cluster import ClusterIndex, gpu_resource
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.state.ledger import Ledger, efficiency
from volcano_monitor.watchdog.state.nodes import NodeTable
from volcano_monitor.watchdog.state.prices import PriceBook, run_cost
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.samples import UsageSample

T0 = 1_699_999_800.0
HOUR = 3600.0
CARD_MIB = 40960  # an A100-40GB as GPU feature discovery labels it
COSTS = Costs.model_validate({"prices": {"cpu": 0.0, "nvidia.com/gpu": 2.0},
                              "gpu_models": {"NVIDIA-A100-SXM4-80GB": 8.0}})

# One container's resources per device plugin: a quarter of one card.
QUARTER: dict[str, dict[str, dict[str, str]]] = {
    # HAMi: nvidia.com/gpu counts vGPUs, cores and memory in percent of the card (limits, as HAMi's docs write them)
    "hami": {"requests": {"cpu": "1", "memory": "2Gi"},
             "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem-percentage": "25"}},
    # Volcano's vGPU: cores in percent, memory in MiB (a quarter of the node's 40 GiB cards)
    "volcano-vgpu": {"requests": {"cpu": "1", "memory": "2Gi"},
                     "limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "25",
                                "volcano.sh/vgpu-memory": str(CARD_MIB // 4)}},
    # memory in MiB only: the share needs the card's memory (the node's GFD label)
    "vgpu-memory-only": {"requests": {"cpu": "1", "memory": "2Gi"},
                         "limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(CARD_MIB // 4)}},
    "whole": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"nvidia.com/gpu": "1"}},
}


def gpu_node(name: str, product: str = "NVIDIA-A100-SXM4-40GB", cards: int = 4, vgpus: int = 40) -> Any:
    return parse_node({
        "metadata": {"name": name, "uid": f"uid-{name}",
                     "labels": {"nvidia.com/gpu.count": str(cards), "nvidia.com/gpu.product": product,
                                "nvidia.com/gpu.memory": str(CARD_MIB)}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(vgpus)},
                   "conditions": [{"type": "Ready", "status": "True"}]}})


def job(uid: str, plugin: str, replicas: int = 4) -> Any:
    return parse_job({
        "metadata": {"name": uid, "namespace": "ml", "uid": uid, "creationTimestamp": "2023-11-14T22:00:00Z"},
        "spec": {"queue": "research", "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {
            "containers": [{"name": "main", "resources": QUARTER[plugin]}]}}}]},
        "status": {"state": {"phase": "Running"},
                   "conditions": [{"status": "Running", "lastTransitionTime": "2023-11-14T22:10:00Z"}]}})


def pod(name: str, job_name: str, plugin: str, node: str) -> Any:
    return parse_pod({
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                     "labels": {"volcano.sh/job-name": job_name, "volcano.sh/queue-name": "research",
                                "volcano.sh/task-spec": "worker"}},
        "spec": {"nodeName": node, "schedulerName": "volcano",
                 "containers": [{"name": "main", "resources": QUARTER[plugin]}]},
        "status": {"phase": "Running"}})


class NoBook:
    def add_usage(self, *_: object) -> None:
        pass


def an_hour(pod_names: list[str], util: float | None) -> list[UsageSample]:
    """A sample every 30 s for an hour per pod (the first stands for its 30 s window)."""
    return [UsageSample(T0 + i * 30, "ml", name, "main", 0.5, 2**30, util, 0, window=30.0)
            for name in pod_names for i in range(120)]


def run_for_an_hour(engine: Engine, plugin: str, node_name: str = "gpu-a", util: float | None = 60.0,
                    product: str = "NVIDIA-A100-SXM4-40GB") -> JobRun:
    """Four pods of one Job on one node for an hour, recorded and flushed; the Job's row as stored."""
    index, nodes, ledger = ClusterIndex(), NodeTable(), Ledger()
    index.card_memory = nodes.card_memory_mib  # as the runtime wires it
    nodes.on_node("ADDED", gpu_node(node_name, product))
    the_job = job(f"run-{plugin}", plugin)
    index.on_job("ADDED", the_job)
    names = [f"{the_job.name}-worker-{i}" for i in range(4)]
    for name in names:
        index.on_pod("ADDED", pod(name, the_job.name, plugin, node_name))
    recorder = UsageRecorder(NoBook(), expected_interval_seconds=30, prices=PriceBook(COSTS, nodes.labels))
    assert recorder.ingest(an_hour(names, util), index.pod_info) == 4 * 120
    now = datetime.fromtimestamp(T0 + HOUR, UTC)
    with Session(engine) as session:
        ledger.on_job("ADDED", the_job, session, now)
        recorder.flush(session, now, final=True)
        session.commit()
    with Session(engine) as session:
        stored = session.scalars(select(JobRun).where(JobRun.uid == the_job.uid)).one()
        session.expunge(stored)
        return stored


@pytest.mark.parametrize("plugin", ["hami", "volcano-vgpu"])
def test_four_pods_at_a_quarter_of_one_card_for_an_hour_are_one_gpu_hour(engine: Engine, plugin: str) -> None:
    run = run_for_an_hour(engine, plugin)
    assert run.requested_gpus == pytest.approx(1.0)  # 4 replicas x 0.25, not 4 vGPUs
    assert run.gpu_seconds_requested / HOUR == pytest.approx(1.0)
    # 60 % of each share used: 0.6 physical GPU-hours, the efficiency of the shared usage
    assert run.gpu_seconds_used / HOUR == pytest.approx(0.6)
    assert efficiency(run)["gpu"] == pytest.approx(0.6)
    # priced per physical GPU-hour: one card-hour at 2.0, not four
    cost = run_cost(run, COSTS)
    assert cost.requested["gpu"] == pytest.approx(2.0)
    assert cost.used["gpu"] == pytest.approx(1.2)
    assert cost.idle["gpu"] == pytest.approx(0.8)


def test_a_whole_gpu_job_is_counted_as_before(engine: Engine) -> None:
    run = run_for_an_hour(engine, "whole")
    assert run.requested_gpus == pytest.approx(4.0)
    assert run.gpu_seconds_requested / HOUR == pytest.approx(4.0)
    assert run.gpu_seconds_used / HOUR == pytest.approx(2.4)
    assert run_cost(run, COSTS).requested["gpu"] == pytest.approx(8.0)


def test_the_gpu_model_of_the_node_prices_a_share_of_its_card(engine: Engine) -> None:
    run = run_for_an_hour(engine, "hami", product="NVIDIA-A100-SXM4-80GB")
    assert run_cost(run, COSTS).requested["gpu"] == pytest.approx(8.0)  # one card-hour at the model's 8.0


def test_vgpu_memory_in_mib_is_a_share_of_the_card_its_node_has(engine: Engine) -> None:
    """Parsed alone, a Volcano vGPU pod asking 10 GiB of a card of unknown size cannot be a quarter; on its
    node (GFD says 40 GiB cards) it is, and so are the GPU-hours the ledger integrates. The Job's own
    `requested_gpus` (its spec, no node) keeps core.gpushare's fallback."""
    run = run_for_an_hour(engine, "vgpu-memory-only")
    assert run.gpu_seconds_requested / HOUR == pytest.approx(1.0)
    assert run.requested_gpus == pytest.approx(4.0)
    index, nodes = ClusterIndex(), NodeTable()
    index.card_memory = nodes.card_memory_mib
    index.on_job("ADDED", job("run-v", "vgpu-memory-only"))
    index.on_pod("ADDED", pod("run-v-worker-0", "run-v", "vgpu-memory-only", "gpu-a"))
    nodes.on_node("ADDED", gpu_node("gpu-a"))
    info = index.pod_info("ml", "run-v-worker-0")
    assert info is not None and info.gpus == pytest.approx(0.25)
    assert info.gpu_resource == "nvidia.com/gpu"  # Volcano's vGPU pays nvidia.com/gpu's price
    nodes.on_node("DELETED", gpu_node("gpu-a"))
    unknown = index.pod_info("ml", "run-v-worker-0")
    assert unknown is not None and unknown.gpus > 0.25  # the fallback of core.gpushare: not a quarter


def test_gpu_resource_names_the_priced_resource() -> None:
    assert gpu_resource(pod("p", "j", "hami", "n").requests) == "nvidia.com/gpu"
    assert gpu_resource(pod("p", "j", "volcano-vgpu", "n").requests) == "nvidia.com/gpu"
    assert gpu_resource((("amd.com/gpu", 1.0),)) == "amd.com/gpu"
    assert gpu_resource((("cpu", 1.0),)) == ""


def test_a_kubeflow_gang_on_hami_requests_its_cards_not_its_vgpus(engine: Engine) -> None:
    """A PodGroup's minResources sum its pods' requests: four vGPUs of 25 % cores and memory are one card."""
    group = parse_podgroup({
        "metadata": {"name": "bert", "namespace": "ml", "uid": "pg-hami", "creationTimestamp": "2023-11-14T22:00:00Z",
                     "ownerReferences": [{"kind": "PyTorchJob", "name": "bert", "uid": "o", "controller": True}]},
        "spec": {"queue": "research", "minMember": 4, "minResources": {
            "cpu": "4", "nvidia.com/gpu": "4", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}},
        "status": {"phase": "Running"}})
    whole = parse_podgroup({
        "metadata": {"name": "gpt", "namespace": "ml", "uid": "pg-whole", "creationTimestamp": "2023-11-14T22:00:00Z",
                     "ownerReferences": [{"kind": "PyTorchJob", "name": "gpt", "uid": "o2", "controller": True}]},
        "spec": {"queue": "research", "minMember": 2, "minResources": {"cpu": "4", "nvidia.com/gpu": "2"}},
        "status": {"phase": "Running"}})
    now = datetime.fromtimestamp(T0, UTC)
    with Session(engine) as session:
        Ledger().on_podgroup("ADDED", group, session, now)
        Ledger().on_podgroup("ADDED", whole, session, now)
        session.commit()
    with Session(engine) as session:
        gpus = {uid: value for uid, value in session.execute(select(JobRun.uid, JobRun.requested_gpus))}
    assert gpus == {"pg-hami": pytest.approx(1.0), "pg-whole": pytest.approx(2.0)}
