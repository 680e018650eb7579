"""core.gpushare: physical GPUs behind HAMi / Volcano vGPU requests and nodes (docs/gpu-sharing.md)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from volcano_monitor.core import gpushare
from volcano_monitor.core.fields import EMPTY_OBJ
from volcano_monitor.core.gpushare import (
    PHYSICAL_GPU,
    configure,
    container_share,
    node_gpus,
    physical_gpus,
    share_problems,
)
from volcano_monitor.core.model import parse_job, parse_pod
from volcano_monitor.core.podrequests import Resources, res_dict, res_from
from volcano_monitor.core.quantity import resource_label_and_unit


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    gpushare.reset_problems()
    configure(basis="max", card_memory_mib=0)
    yield
    configure(basis="max", card_memory_mib=0)
    gpushare.reset_problems()


def test_name_label_and_unit() -> None:
    assert not PHYSICAL_GPU.endswith("/gpu")
    assert resource_label_and_unit(PHYSICAL_GPU) == ("physical_gpu", "gpu")


def test_physical_gpus_prefers_the_derived_entry() -> None:
    assert physical_gpus(res_from({"cpu": 4, "nvidia.com/gpu": 4, PHYSICAL_GPU: 1.0})) == 1.0
    assert physical_gpus(res_from({"cpu": 4, "nvidia.com/gpu": 2, "amd.com/gpu": 1})) == 3.0
    assert physical_gpus(res_from({"cpu": 4, "volcano.sh/vgpu-number": 2})) == 0.0


def test_hami_quarter_by_cores() -> None:
    r = container_share({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 25, "nvidia.com/gpumem-percentage": 25})
    assert (r.gpus, r.plugin, r.problem) == (0.25, "hami", "")


def test_hami_memory_mib_needs_the_card() -> None:
    req = {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 6144}
    assert container_share(req, card_memory_mib=24576).gpus == pytest.approx(0.5)  # 2 x 6 GiB of 24 GiB
    configure(card_memory_mib=12288)  # the configured default card
    assert container_share(req).gpus == pytest.approx(1.0)
    configure(card_memory_mib=0)
    unknown = container_share(req)  # no card size anywhere: whole cards, counted
    assert (unknown.gpus, unknown.problem) == (2.0, "card_memory_unknown")
    assert share_problems() == {"card_memory_unknown": 1}
    with_cores = container_share({**req, "nvidia.com/gpucores": 30})
    assert (with_cores.gpus, with_cores.assumption, with_cores.problem) == (pytest.approx(0.6), "cores", "")


def test_hami_cores_without_memory_hold_the_whole_memory() -> None:
    """HAMi gives a vGPU without a memory request the card's whole memory: nobody else fits on it."""
    r = container_share({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 20})
    assert (r.gpus, r.assumption) == (1.0, "memory_default_whole")
    assert container_share({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 20}, basis="cores").gpus == 0.2


@pytest.mark.parametrize(("basis", "expected"), [("max", 0.5), ("cores", 0.1), ("memory", 0.5)])
def test_basis(basis: gpushare.Basis, expected: float) -> None:
    req = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 8192, "volcano.sh/vgpu-cores": 10}
    assert container_share(req, card_memory_mib=16384, basis=basis).gpus == pytest.approx(expected)
    configure(basis=basis)
    assert container_share(req, card_memory_mib=16384).gpus == pytest.approx(expected)


def test_volcano_vgpu_in_limits_only() -> None:
    r = container_share({}, {"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory-percentage": 50})
    assert (r.gpus, r.plugin) == (1.0, "volcano-vgpu")


def test_zero_percent_memory_is_not_asked() -> None:
    r = container_share({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0, "nvidia.com/gpucores": 10})
    assert (r.gpus, r.assumption, r.problem) == (1.0, "memory_default_whole", "")


def test_whole_gpu_unchanged() -> None:
    r = container_share({"cpu": 8, "nvidia.com/gpu": 4})
    assert (r.gpus, r.plugin, r.assumption) == (4.0, "whole", "whole")
    assert container_share({"cpu": 8}).gpus == 0.0


@pytest.mark.parametrize(("req", "kind", "gpus"), [
    ({"volcano.sh/vgpu-memory-percentage": 25}, "vgpu_without_count", 0.0),  # Volcano allocates nothing
    ({"volcano.sh/vgpu-memory": 4096, "volcano.sh/vgpu-cores": 30}, "vgpu_without_count", 0.3),  # one vGPU
    ({"nvidia.com/gpumem-percentage": 50}, "vgpu_without_count", 0.5),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150, "nvidia.com/gpumem-percentage": 10},
     "percentage_over_100", 1.0),
    ({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory-percentage": 250}, "percentage_over_100", 1.0),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": -5}, "negative", 1.0),
])
def test_bad_input_is_counted_with_a_fallback(req: dict[str, float], kind: str, gpus: float,
                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="volcano_monitor.core.gpushare"):
        first = container_share(req)
        second = container_share(req)
    assert (first.gpus, first.problem) == (pytest.approx(gpus), kind)
    assert second == first
    assert share_problems() == {kind: 2}
    assert len([r for r in caplog.records if kind in r.getMessage()]) == 1  # logged once


def test_configure_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="basis"):
        configure(basis="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="MiB"):
        configure(card_memory_mib=-1)


HAMI_JSON = json.dumps([
    {"id": f"GPU-{i}", "count": 10, "devmem": 24576, "devcore": 100, "type": "NVIDIA-NVIDIA A10", "numa": 0,
     "health": True, "index": i, "mode": "hami-core"} for i in range(2)])


def test_node_hami_json_annotation() -> None:
    n = node_gpus({}, {"hami.io/node-nvidia-register": HAMI_JSON}, {"nvidia.com/gpu": 20})
    assert (n.cards, n.memory_mib, n.product, n.plugin, n.vgpus, n.problem) == (
        2.0, 24576.0, "NVIDIA-NVIDIA A10", "hami", 20.0, "")


def test_node_hami_legacy_annotation() -> None:
    text = "GPU-a,10,16384,100,NVIDIA-Tesla T4,0,true:GPU-b,10,16384,100,NVIDIA-Tesla T4,0,true:"
    n = node_gpus({}, {"hami.io/node-nvidia-register": text}, {"nvidia.com/gpu": 20})
    assert (n.cards, n.memory_mib, n.product) == (2.0, 16384.0, "NVIDIA-Tesla T4")


def test_node_volcano_annotation_and_gfd_labels() -> None:
    text = "GPU-a,10,40960,NVIDIA-A100-SXM4-40GB,true,hami-core:" * 4
    labels = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
              "nvidia.com/gpu.memory": "40960"}
    n = node_gpus(labels, {"volcano.sh/node-vgpu-register": text}, {"volcano.sh/vgpu-number": 40})
    assert (n.cards, n.memory_mib, n.plugin, n.vgpus) == (4.0, 40960.0, "volcano-vgpu", 40.0)
    no_labels = node_gpus({}, {"volcano.sh/node-vgpu-register": text}, {"volcano.sh/vgpu-number": 40})
    assert (no_labels.cards, no_labels.memory_mib) == (4.0, 40960.0)


def test_node_whole_gpus() -> None:
    n = node_gpus({}, {}, {"cpu": 64, "nvidia.com/gpu": 8})
    assert (n.cards, n.plugin, n.problem) == (8.0, "whole", "")
    assert node_gpus({}, {}, {"cpu": 64}).plugin == "none"


def test_node_without_annotations() -> None:
    n = node_gpus({}, {}, {"volcano.sh/vgpu-number": 40})
    assert (n.cards, n.plugin, n.problem) == (4.0, "volcano-vgpu", "node_without_annotations")
    shared = node_gpus({"nvidia.com/gpu.count": "2"}, {}, {"nvidia.com/gpu": 20})
    assert (shared.cards, shared.plugin, shared.problem) == (2.0, "hami", "node_without_annotations")
    bad = node_gpus({}, {"hami.io/node-nvidia-register": "[{"}, {"nvidia.com/gpu": 20})
    assert (bad.cards, bad.problem) == (2.0, "bad_node_annotation")
    assert share_problems() == {"node_without_annotations": 2, "bad_node_annotation": 1}


def test_node_memory_from_volcano_allocatable() -> None:
    """Volcano's plugin also offers `volcano.sh/vgpu-memory`: the MiB of all its cards."""
    n = node_gpus({"nvidia.com/gpu.count": "2"}, {}, {"volcano.sh/vgpu-number": 20, "volcano.sh/vgpu-memory": 49152})
    assert (n.cards, n.memory_mib, n.problem) == (2.0, 24576.0, "node_without_annotations")


def test_allocated_devices() -> None:
    annotations = {"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,3000,30:GPU-b,NVIDIA,3000,30:;GPU-c,NVIDIA,x,1:;"}
    devices = gpushare.allocated_devices(annotations)
    assert [(d.container, d.uuid, d.memory_mib, d.cores) for d in devices] == [
        (0, "GPU-a", 3000.0, 30.0), (0, "GPU-b", 3000.0, 30.0)]
    assert share_problems() == {"bad_pod_annotation": 1}
    volcano = gpushare.allocated_devices({"volcano.sh/vgpu-ids-new": "GPU-v,NVIDIA,8192,25:"})
    assert [(d.uuid, d.memory_mib) for d in volcano] == [("GPU-v", 8192.0)]
    assert gpushare.allocated_devices({}) == ()


def pod_raw(containers: list[dict[str, object]], node: str = "", **spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": containers, "nodeName": node, **spec}}


def ctr(limits: dict[str, str], name: str = "c", **extra: object) -> dict[str, object]:
    return {"name": name, "resources": {"limits": limits}, **extra}


def test_parse_pod_sums_containers_and_takes_the_init_maximum() -> None:
    quarter = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem-percentage": "25"}
    two = parse_pod(pod_raw([ctr(quarter, "a"), ctr(quarter, "b")]))
    assert res_dict(two.requests)[PHYSICAL_GPU] == 0.5
    assert res_dict(two.requests)["nvidia.com/gpucores"] == 50  # the raw sums stay as they were
    init = parse_pod(pod_raw([ctr(quarter)], initContainers=[ctr({"nvidia.com/gpu": "2"}, "warm")]))
    assert res_dict(init.requests)[PHYSICAL_GPU] == 2.0  # the init container runs alone with 2 cards
    sidecar = parse_pod(pod_raw([ctr(quarter)], initContainers=[ctr(quarter, "side", restartPolicy="Always")]))
    assert res_dict(sidecar.requests)[PHYSICAL_GPU] == 0.5
    cpu = parse_pod(pod_raw([ctr({"cpu": "1"})]))
    assert PHYSICAL_GPU not in res_dict(cpu.requests)


def test_parse_pod_card_memory_lookup() -> None:
    mib = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240"}
    cards = {"n40": 40960.0, "n80": 81920.0}
    on40 = parse_pod(pod_raw([ctr(mib)], node="n40"), card_memory=lambda node: cards.get(node, 0.0))
    on80 = parse_pod(pod_raw([ctr(mib)], node="n80"), card_memory=lambda node: cards.get(node, 0.0))
    assert (physical_gpus(on40.requests), physical_gpus(on80.requests)) == (0.25, 0.125)
    unbound = parse_pod(pod_raw([ctr(mib)]), card_memory=lambda node: cards[node])  # not asked: no node
    assert physical_gpus(unbound.requests) == 1.0
    assert share_problems() == {"card_memory_unknown": 1}


def test_memoised_pods_still_count_bad_input() -> None:
    bad = pod_raw([ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "300"})])
    for _ in range(3):
        assert physical_gpus(parse_pod(bad).requests) == 1.0
    assert share_problems() == {"percentage_over_100": 3}


def test_job_tasks_keep_raw_requests_and_the_job_sums_cards() -> None:
    """A task's per-replica request is compared with nodes' allocatable (a gang's largest pod must fit a
    node), so the derived resource stays out of it; the job's total carries it."""
    quarter = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "25", "volcano.sh/vgpu-memory-percentage": "25"}
    raw = {"metadata": {"name": "j"}, "spec": {"tasks": [
        {"name": "w", "replicas": 4, "template": {"spec": {"containers": [ctr(quarter)]}}},
        {"name": "ps", "replicas": 1, "template": {"spec": {"containers": [ctr({"cpu": "2"})]}}}]}}
    job = parse_job(raw)
    assert [t.physical_gpus for t in job.tasks] == [0.25, 0.0]
    assert PHYSICAL_GPU not in res_dict(job.tasks[0].requests)
    assert res_dict(job.requests)[PHYSICAL_GPU] == 1.0
    assert physical_gpus(job.requests) == 1.0
    cpu_only = parse_job({"metadata": {"name": "c"}, "spec": {"tasks": [raw["spec"]["tasks"][1]]}})  # type: ignore[index]
    assert PHYSICAL_GPU not in res_dict(cpu_only.requests)


def test_init_containers_and_sidecars_follow_kubernetes_rule() -> None:
    """A run-to-completion init container runs beside the sidecars started *before* it only; sidecars
    started after it add to the running total, not to the init container's peak (Kubernetes' rule)."""
    quarter = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem-percentage": "25"}
    half = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/gpumem-percentage": "50"}
    init = ctr({"nvidia.com/gpu": "1"}, "init")
    side = ctr(half, "side", restartPolicy="Always")
    init_first = parse_pod(pod_raw([ctr(quarter)], initContainers=[init, side]))
    assert res_dict(init_first.requests)[PHYSICAL_GPU] == pytest.approx(1.0)  # max(0.25 + 0.5, 1)
    side_first = parse_pod(pod_raw([ctr(quarter)], initContainers=[side, init]))
    assert res_dict(side_first.requests)[PHYSICAL_GPU] == pytest.approx(1.5)  # max(0.75, 0.5 + 1)
    # whole cards: the physical share and pod_resources' raw sum are the same algorithm
    for order in ([init, ctr({"nvidia.com/gpu": "2"}, "s", restartPolicy="Always")],
                  [ctr({"nvidia.com/gpu": "2"}, "s", restartPolicy="Always"), init]):
        pod = parse_pod(pod_raw([ctr({"nvidia.com/gpu": "1"})], initContainers=order))
        assert res_dict(pod.requests)[PHYSICAL_GPU] == res_dict(pod.requests)["nvidia.com/gpu"]


def test_job_task_share_reads_the_template_annotations(monkeypatch: pytest.MonkeyPatch) -> None:
    """The share takes a pod's annotations (where the device plugins write), not its whole metadata."""
    from volcano_monitor.core import jobview

    seen: list[object] = []
    real = jobview.with_physical_gpu

    def spy(requests: Resources, spec: Mapping[str, Any], annotations: Mapping[str, Any] = EMPTY_OBJ,
            card_memory_mib: float = 0.0) -> Resources:
        seen.append(annotations)
        return real(requests, spec, annotations, card_memory_mib)

    monkeypatch.setattr(jobview, "with_physical_gpu", spy)
    notes = {"hami.io/resource-pool": "a"}
    template = {"metadata": {"name": "w", "annotations": notes},
                "spec": {"containers": [ctr({"nvidia.com/gpu": "1"})]}}
    task = {"name": "w", "replicas": 1, "template": template}
    job = parse_job({"metadata": {"name": "j"}, "spec": {"tasks": [task]}})
    assert job.tasks[0].physical_gpus == 1.0
    assert seen == [notes]


def test_node_whole_cards_are_at_most_allocatable() -> None:
    """GFD counts cards present; the device plugin offers only the healthy ones (none when it is down)."""
    gfd = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920"}
    unhealthy = node_gpus(gfd, {}, {"cpu": 64, "nvidia.com/gpu": 7})
    assert (unhealthy.cards, unhealthy.plugin) == (7.0, "whole")
    plugin_down = node_gpus(gfd, {}, {"cpu": 64})
    assert plugin_down.cards == 0.0
    assert node_gpus(gfd, {}, {"nvidia.com/gpu": 8}).cards == 8.0


def test_mig_node_is_not_guessed_as_hami() -> None:
    """MIG "single" mode offers more `nvidia.com/gpu` (slices) than cards: whole devices, no HAMi guess."""
    by_product = node_gpus({"nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb"},
                           {}, {"nvidia.com/gpu": 7})
    assert (by_product.cards, by_product.plugin, by_product.problem) == (7.0, "whole", "")
    by_strategy = node_gpus({"nvidia.com/gpu.count": "2", "nvidia.com/mig.strategy": "single"}, {},
                            {"nvidia.com/gpu": 14})
    assert (by_strategy.cards, by_strategy.plugin) == (14.0, "whole")
    assert share_problems() == {}


def test_group_gpus_reads_summed_vgpus_of_min_resources() -> None:
    """minResources sums its pods: 4 x {gpu 1, gpucores 25, gpumem-percentage 25} is one card, not 4."""
    from volcano_monitor.core.gpushare import group_gpus

    hami = res_from({"cpu": 4, "nvidia.com/gpu": 4, "nvidia.com/gpucores": 100, "nvidia.com/gpumem-percentage": 100})
    assert group_gpus(hami) == pytest.approx(1.0)
    assert group_gpus(res_from({"volcano.sh/vgpu-number": 8})) == 8.0  # no memory asked: whole cards
    assert group_gpus(res_from({"volcano.sh/vgpu-number": 4, "volcano.sh/vgpu-cores": 200,
                                "volcano.sh/vgpu-memory-percentage": 200})) == pytest.approx(2.0)
    assert group_gpus(res_from({"nvidia.com/gpu": 3, "cpu": 1})) == 3.0
    assert group_gpus(()) == 0.0


def test_mib_pod_on_unknown_card_is_memoised_and_still_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A HAMi pod asking MiB without cores, no card memory anywhere (the exporter without
    --gpu-card-memory-mib): whole cards, `card_memory_unknown` counted on each event, computed once."""
    calls: list[object] = []
    real = gpushare.container_share

    def counting(*args: Any, **kwargs: Any) -> gpushare.ShareResult:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(gpushare, "container_share", counting)
    raw = pod_raw([ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240"})])
    first, again = parse_pod(raw), parse_pod(raw)
    assert res_dict(first.requests)[PHYSICAL_GPU] == res_dict(again.requests)[PHYSICAL_GPU] == 1.0
    assert len(calls) == 1
    assert share_problems() == {"card_memory_unknown": 2}
    configure(card_memory_mib=40960)  # the settings change the share: the memo is not reused
    assert res_dict(parse_pod(raw).requests)[PHYSICAL_GPU] == pytest.approx(0.25)
