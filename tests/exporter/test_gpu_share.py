"""Physical GPUs in `volcano_pod_resource_requests` / `volcano_job_resource_requests` (docs/gpu-sharing.md):
four HAMi pods at 25 % of one card are one card, not four; Volcano vGPU pods count at all; whole GPUs stay."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.exporter import objects
from tests.exporter.harness import start_exporter
from tests.exporter.scrape import parse, select, value
from tests.simtools import FakeClock
from volcano_monitor.core import gpushare
from volcano_monitor.core.model import parse_job
from volcano_monitor.exporter import selfmetrics
from volcano_monitor.exporter.app import pod_transform
from volcano_monitor.exporter.cardinality import DEFAULTS
from volcano_monitor.exporter.cli import parse_args
from volcano_monitor.exporter.store import ExporterStore
from volcano_monitor.simulator import vgpu_scenarios as vs
from volcano_monitor.simulator.runtime import SimulatorThread

POD = "volcano_pod_resource_requests"
JOB = "volcano_job_resource_requests"
PARSE = pod_transform(DEFAULTS, compat=False)  # what the exporter's pod informer runs on every event


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    gpushare.reset_problems()
    gpushare.configure(basis="max", card_memory_mib=0)
    yield
    gpushare.configure(basis="max", card_memory_mib=0)
    gpushare.reset_problems()


def pod(name: str, resources: dict[str, str], annotations: dict[str, str] | None = None,
        job: str = "share") -> dict[str, Any]:
    raw = objects.volcano_pod()
    raw["metadata"].update(name=name, uid=f"uid-{name}")
    raw["metadata"]["labels"]["volcano.sh/job-name"] = job
    raw["metadata"]["annotations"].update(annotations or {})
    raw["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "4Gi"},
                                                 "limits": dict(resources)}
    return raw


def job(name: str, replicas: int, resources: dict[str, str]) -> dict[str, Any]:
    raw = objects.waiting_job(name, "research", replicas, {"cpu": "1"})
    raw["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] = dict(resources)
    return raw


def scrape(pods: list[dict[str, Any]], jobs: list[dict[str, Any]] = ()) -> dict[Any, float]:  # type: ignore[assignment]
    store = ExporterStore()
    for raw in jobs:
        store.on_job("ADDED", parse_job(copy.deepcopy(raw)))
    for raw in pods:
        store.on_pod("ADDED", PARSE(raw))
    out: list[bytes] = []
    store.write(out)
    return parse(b"".join(out))


HAMI_QUARTER = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem-percentage": "25"}


def test_four_hami_pods_at_a_quarter_are_one_card() -> None:
    samples = scrape([pod(f"w-{i}", HAMI_QUARTER) for i in range(4)], [job("share", 4, HAMI_QUARTER)])
    for i in range(4):
        assert value(samples, POD, pod=f"w-{i}", resource="physical_gpu", unit="gpu") == 0.25
        assert value(samples, POD, pod=f"w-{i}", resource="nvidia_com_gpu", unit="integer") == 1  # raw, beside
        assert value(samples, POD, pod=f"w-{i}", resource="nvidia_com_gpucores") == 25
    assert value(samples, JOB, job_name="share", resource="physical_gpu", unit="gpu") == 1.0
    assert value(samples, JOB, job_name="share", resource="nvidia_com_gpu") == 4
    queue_sum = select(samples, "volcano_queue_pod_requests", queue="research", resource="physical_gpu")
    assert list(queue_sum.values()) == [1.0]


def test_volcano_vgpu_pod_counts_cards() -> None:
    """Before, `volcano.sh/vgpu-number` counted as no GPU at all. 4 GiB of a 16 GiB card with 10 % of its
    cores: a quarter of the card (the larger share); with --gpu-card-memory-mib."""
    args = parse_args(["--gpu-card-memory-mib", "16384"])
    gpushare.configure(basis=args.gpu_share_basis, card_memory_mib=args.gpu_card_memory_mib)
    vgpu = {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "4096", "volcano.sh/vgpu-cores": "10"}
    samples = scrape([pod("v", vgpu, job="vjob")], [job("vjob", 3, vgpu)])
    assert value(samples, POD, pod="v", resource="physical_gpu", unit="gpu") == 0.5  # 2 vGPUs x 1/4
    assert value(samples, POD, pod="v", resource="volcano_sh_vgpu_number") == 2
    assert value(samples, JOB, job_name="vjob", resource="physical_gpu") == 1.5


def test_volcano_vgpu_without_card_memory_uses_the_cores_share() -> None:
    vgpu = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "4096", "volcano.sh/vgpu-cores": "30"}
    samples = scrape([pod("v", vgpu)])
    assert value(samples, POD, pod="v", resource="physical_gpu") == 0.3
    assert gpushare.share_problems() == {}


def test_whole_gpu_pod_unchanged() -> None:
    whole = {"nvidia.com/gpu": "2"}
    samples = scrape([pod("whole", whole, job="wjob")], [job("wjob", 2, whole)])
    assert value(samples, POD, pod="whole", resource="nvidia_com_gpu", unit="integer") == 2
    assert value(samples, POD, pod="whole", resource="physical_gpu", unit="gpu") == 2
    assert value(samples, JOB, job_name="wjob", resource="physical_gpu") == 4


def test_pod_without_gpu_has_no_physical_gpu() -> None:
    samples = scrape([pod("cpu-only", {"cpu": "2"})])
    assert select(samples, POD, pod="cpu-only", resource="physical_gpu") == {}
    assert value(samples, POD, pod="cpu-only", resource="cpu") == 1


def share_problem_counts() -> dict[str, float]:
    text = selfmetrics.render([], {}, 0.0, 0, settled=lambda i: True)
    return {dict(labels)["problem"]: v
            for labels, v in select(parse(text), "volcano_exporter_gpu_share_problems_total").items()}


def test_bad_input_is_counted_with_a_fallback_and_no_crash() -> None:
    assert set(share_problem_counts()) == set(gpushare.PROBLEM_KINDS)  # every kind, from 0
    assert set(share_problem_counts().values()) == {0.0}
    bad = [
        pod("no-count", {"volcano.sh/vgpu-memory": "8192"}),  # no vgpu-number: one vGPU, as Volcano does
        pod("over", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150", "nvidia.com/gpumem-percentage": "10"}),
        pod("over-mem", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory-percentage": "400"}),
        pod("junk", {"nvidia.com/gpu": "1"}, {"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,x"}),
    ]
    gpushare.configure(card_memory_mib=16384)
    samples = scrape(bad)
    assert value(samples, POD, pod="no-count", resource="physical_gpu") == 0.5
    assert value(samples, POD, pod="over", resource="physical_gpu") == 1.0  # 150 % taken as 100 %
    assert value(samples, POD, pod="over-mem", resource="physical_gpu") == 1.0
    assert value(samples, POD, pod="junk", resource="physical_gpu") == 1.0
    # a node without the device plugin's annotation (the watchdog's nodes): counted in the same counter
    node = gpushare.node_gpus({}, {}, {"volcano.sh/vgpu-number": 20})
    assert (node.cards, node.problem) == (2.0, "node_without_annotations")
    counts = share_problem_counts()
    assert counts["vgpu_without_count"] == 1
    assert counts["percentage_over_100"] == 2
    assert counts["node_without_annotations"] == 1
    assert counts["negative"] == 0


def test_basis_flag() -> None:
    assert parse_args([]).gpu_share_basis == "max"
    assert parse_args(["--gpu-share-basis", "cores"]).gpu_share_basis == "cores"
    with pytest.raises(SystemExit):
        parse_args(["--gpu-share-basis", "median"])
    with pytest.raises(SystemExit):
        parse_args(["--gpu-card-memory-mib", "-3"])


def test_env_basis_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLCANO_EXPORTER_GPU_SHARE_BASIS", "median")
    with pytest.raises(SystemExit):
        parse_args([])


# ---- end to end: the exporter against the simulator's API server playing vgpu-hami / vgpu-volcano ---------

@pytest.mark.parametrize("scenario", ["vgpu-hami", "vgpu-volcano"])
@pytest.mark.parametrize("card_mib", [0, vs.CARD_MIB])
def test_exporter_counts_the_shared_scenarios_in_cards(scenario: str, card_mib: int, tmp_path: Path) -> None:
    """Four pods at 25 % of one card are 1.0 in the pods' and the job's physical_gpu, on both device plugins;
    every job matches the scenario's hand-computed physical GPUs. Without the card size the shared pods
    (MiB and 25 % cores) count their cores share and the idle notebook (a whole card's MiB) whole cards."""
    gpushare.configure(card_memory_mib=card_mib)
    clock = FakeClock(1_800_000_000.0)
    sim = SimulatorThread(scenario=scenario, auto_tick=False, clock=clock).start()
    exporter = None
    try:
        for _ in range(24):  # two scenario minutes: everything placed, the gang waiting
            clock.t += 5
            sim.tick()
        exporter = start_exporter(sim, tmp_path)
        samples = parse(exporter.scrape())
    finally:
        if exporter is not None:
            exporter.stop()
        sim.stop()

    def job_of(labels: frozenset[tuple[str, str]]) -> str:
        return dict(labels)["job_name"].rsplit("-", 1)[0]

    pods: dict[str, list[float]] = {}
    for labels, v in select(samples, POD, resource="physical_gpu", unit="gpu").items():
        pods.setdefault(job_of(labels), []).append(v)
    assert sorted(pods[vs.SHARED_JOB]) == [0.25] * 4
    assert {job: sum(v) for job, v in pods.items()} == pytest.approx(dict(vs.PHYSICAL_GPUS))
    jobs = {job_of(labels): v for labels, v in select(samples, JOB, resource="physical_gpu").items()}
    assert jobs == pytest.approx(dict(vs.PHYSICAL_GPUS))
    raw = "nvidia_com_gpu" if scenario == "vgpu-hami" else "volcano_sh_vgpu_number"
    vgpus: dict[str, float] = {}
    for labels, v in select(samples, POD, resource=raw).items():
        vgpus[job_of(labels)] = vgpus.get(job_of(labels), 0.0) + v
    assert vgpus == pytest.approx(dict(vs.VGPUS))  # the raw vGPU counts are still served beside
