"""The usage model and how it is published: PodMetrics/NodeMetrics objects and Prometheus text."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.simtools import FakeClock
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.resources import NODE_METRICS, NODES, POD_METRICS, PODS
from volcano_monitor.simulator.store import Store
from volcano_monitor.simulator.usage import IDLE_GPU, ContainerUsage, GpuDevice, UsageProfile, render_prometheus

T0 = 1_700_000_000.0
STEP = 15.0
GIB = 2**30
Obj = dict[str, Any]
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]

CADVISOR_LABELS = {"namespace", "pod", "container"}
DCGM_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname", "namespace", "pod", "container"}


@dataclass
class Sample:
    t: float
    text: str
    series: Series
    pod_metrics: dict[str, Obj]
    running: set[str]  # pods whose container is running (Running, not being deleted)
    pods: dict[str, Obj]


@dataclass
class Run:
    store: Store
    driver: Driver
    samples: list[Sample] = field(default_factory=list)

    def values(self, metric: str, pod_prefix: str) -> list[tuple[float, float]]:
        """(time, value) of the single series of `metric` for the first pod matching pod_prefix."""
        out = []
        for sample in self.samples:
            for (name, labels), value in sample.series.items():
                if name == metric and dict(labels)["pod"].startswith(pod_prefix):
                    out.append((sample.t, value))
                    break
        return out


def parse(text: str) -> Series:
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            series[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return series


@pytest.fixture(scope="module")
def run() -> Run:
    store = Store()
    clock = FakeClock(T0)
    driver = Driver(store, "default", speed=1.0, clock=clock)
    assert driver.metrics_interval == 15.0
    driver.setup()
    result = Run(store, driver)
    while clock.t - T0 < 25 * 60:
        clock.t += STEP
        driver.tick()
        text = driver.prometheus_metrics().decode()
        pods = {p["metadata"]["name"]: p for p in store.objects(PODS)}
        running = {n for n, p in pods.items()
                   if p["status"]["phase"] == "Running" and "deletionTimestamp" not in p["metadata"]}
        result.samples.append(Sample(clock.t, text, parse(text),
                                     {m["metadata"]["name"]: m for m in store.objects(POD_METRICS)}, running, pods))
    return result


def test_pod_metrics_follow_running_pods(run: Run) -> None:
    checked = 0
    for sample in run.samples[4:]:
        assert set(sample.pod_metrics) == sample.running
        for name, metrics in sample.pod_metrics.items():
            pod = sample.pods[name]
            assert metrics["metadata"]["namespace"] == pod["metadata"]["namespace"]
            assert metrics["metadata"]["labels"] == pod["metadata"]["labels"]
            assert re.fullmatch(r"\d+(\.\d+)?s", metrics["window"])
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", metrics["timestamp"])
            (container,) = metrics["containers"]
            assert container["name"] == pod["spec"]["containers"][0]["name"]
            assert re.fullmatch(r"\d+n", container["usage"]["cpu"])
            assert re.fullmatch(r"\d+Ki", container["usage"]["memory"])
            assert int(container["usage"]["memory"][:-2]) > 0
            checked += 1
    assert checked > 200


def test_pod_metrics_go_away_when_the_pod_stops(run: Run) -> None:
    oom = [s for s in run.samples if any(n.startswith("embed-features-") and p["status"]["phase"] == "Failed"
                                          for n, p in s.pods.items())]
    assert oom
    before = [s for s in run.samples if any(n.startswith("embed-features-") for n in s.pod_metrics)]
    assert before and before[-1].t < oom[0].t
    assert not any(n.startswith("embed-features-") for n in oom[0].pod_metrics)
    assert not any(dict(labels)["pod"].startswith("embed-features-") for _, labels in oom[0].series)


def test_metrics_api_usage_matches_the_profile(run: Run) -> None:
    sample = next(s for s in run.samples if s.t - T0 >= 600)  # batch-score runs from 15 s to 20 min
    (scorer,) = [m for n, m in sample.pod_metrics.items() if n.startswith("batch-score-")]
    cores = int(scorer["containers"][0]["usage"]["cpu"][:-1]) / 1e9
    assert 0.9 <= cores <= 1.1  # 1/16 of a 16-core request
    (idle,) = [m for n, m in sample.pod_metrics.items() if n.startswith("bert-finetune-")]
    assert int(idle["containers"][0]["usage"]["cpu"][:-1]) / 1e9 < 0.25  # ~2 % of 8 cores


def test_node_metrics_exist_for_every_node(run: Run) -> None:
    metrics = {m["metadata"]["name"]: m for m in run.store.objects(NODE_METRICS)}
    assert set(metrics) == {n["metadata"]["name"] for n in run.store.objects(NODES)}
    busy = metrics["gpu-node-01"]["usage"]
    assert int(busy["cpu"][:-1]) / 1e9 > 1 and int(busy["memory"][:-2]) * 1024 > GIB


def test_text_format_is_valid(run: Run) -> None:
    text = run.samples[-1].text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["container_cpu_usage_seconds"].type == "counter"
    assert families["container_memory_working_set_bytes"].type == "gauge"
    assert families["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    for name in ("container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
                 "DCGM_FI_DEV_GPU_UTIL"):
        assert text.count(f"# HELP {name} ") == 1 and text.count(f"# TYPE {name} ") == 1
    assert text.endswith("\n")
    for (name, labels), value in run.samples[-1].series.items():
        keys = {k for k, _ in labels}
        assert keys == (DCGM_LABELS if name == "DCGM_FI_DEV_GPU_UTIL" else CADVISOR_LABELS), name
        assert math.isfinite(value) and value >= 0


def test_series_only_for_running_containers(run: Run) -> None:
    for sample in run.samples:
        pods = {dict(labels)["pod"] for (name, labels) in sample.series
                if name == "container_memory_working_set_bytes"}
        assert pods == sample.running


def test_cpu_counter_integrates_cores_over_time(run: Run) -> None:
    for prefix, cores, wobble in (("batch-score-", 1.0, 0.05), ("etl-daily-", 0.2, 0.1),
                                  ("bert-finetune-", 0.16, 0.2)):
        values = run.values("container_cpu_usage_seconds_total", prefix)
        assert len(values) > 20
        for (t1, v1), (t2, v2) in itertools.pairwise(values):
            if v2 < v1:  # a new run of the workload: a new container
                continue
            rate = (v2 - v1) / (t2 - t1)
            assert cores * (1 - wobble) - 1e-9 <= rate <= cores * (1 + wobble) + 1e-9, (prefix, rate)


def test_counter_is_the_exact_integral() -> None:
    usage = ContainerUsage("ns", "pod", "main", "node", started=100.0, speed=4.0,
                           profile=UsageProfile(cpu=0.5, cpu_wobble=0.3, period=60.0), cpu_request=2.0)
    assert usage.cpu_seconds(100.0) == 0.0
    steps = 20_000
    t1, t2 = 103.0, 151.0
    dt = (t2 - t1) / steps
    numeric = sum(usage.cpu_cores(t1 + (i + 0.5) * dt) * dt for i in range(steps))
    assert usage.cpu_seconds(t2) - usage.cpu_seconds(t1) == pytest.approx(numeric, rel=1e-6)
    assert usage.cpu_seconds(t2) > usage.cpu_seconds(t1) > 0


def test_gpu_utilisation_per_profile(run: Run) -> None:
    series = run.samples[-1].series
    pods = run.samples[-1].pods
    per_pod: dict[str, list[dict[str, str]]] = {}
    values: dict[str, list[float]] = {}
    for (name, labels), value in series.items():
        if name == "DCGM_FI_DEV_GPU_UTIL":
            label_map = dict(labels)
            per_pod.setdefault(label_map["pod"], []).append(label_map)
            values.setdefault(label_map["pod"].rsplit("-", 3)[0], []).append(value)
    assert all(0 <= v <= 2 for v in values["bert-finetune"])  # idle
    assert len(values["bert-finetune"]) == 2
    assert all(75 <= v <= 95 for v in values["llama-pretrain"]) and len(values["llama-pretrain"]) == 8
    assert all(50 <= v <= 70 for v in values["mnist-ddp"])
    assert all(v == 0 for v in values["ddp-resnet"])  # the broken gang waits for its peers
    assert not [p for p in per_pod if p.startswith(("batch-score-", "etl-daily-"))]  # no GPU, no series
    for pod, devices in per_pod.items():
        assert len({d["gpu"] for d in devices}) == len(devices) == len({d["UUID"] for d in devices})
        assert all(d["Hostname"] == pods[pod]["spec"]["nodeName"] for d in devices)
        assert all(d["device"] == f"nvidia{d['gpu']}" and d["modelName"].startswith("NVIDIA A100") for d in devices)
    uuids = [d["UUID"] for devices in per_pod.values() for d in devices]
    assert len(uuids) == len(set(uuids))  # no GPU is handed out twice


def test_memory_of_the_oom_job_climbs_to_its_limit(run: Run) -> None:
    values = run.values("container_memory_working_set_bytes", "embed-features-")
    assert len(values) >= 15
    memory = [v for _, v in values]
    assert memory == sorted(memory)
    assert memory[0] < 0.5 * 8 * GIB and 0.9 * 8 * GIB <= memory[-1] <= 8 * GIB


def test_idle_and_over_requested_memory(run: Run) -> None:
    idle = [v for _, v in run.values("container_memory_working_set_bytes", "bert-finetune-")]
    assert idle and all(0.05 * 64 * GIB < v < 0.15 * 64 * GIB for v in idle)
    scorer = [v for _, v in run.values("container_memory_working_set_bytes", "batch-score-")]
    assert scorer and all(v < 0.2 * 32 * GIB for v in scorer)


def test_label_values_are_escaped() -> None:
    namespace = 'we"ird\\name\nspace'
    usage = ContainerUsage(namespace, "p", "c", "node-1", 0.0, 1.0, IDLE_GPU, cpu_request=1.0,
                           gpus=(GpuDevice(0, "GPU-1", 'model "x"'),))
    text = render_prometheus([usage], 60.0).decode()
    assert '\\"' in text and "\\\\" in text and "\\n" in text
    series = parse(text)
    namespaces = {dict(labels)["namespace"] for _, labels in series}
    assert namespaces == {namespace}
    models = {dict(labels).get("modelName") for _, labels in series} - {None}
    assert models == {'model "x"'}


def test_empty_output_is_still_valid() -> None:
    text = render_prometheus([], 0.0).decode()
    families = list(text_string_to_metric_families(text))
    assert len(families) == 3 and all(not f.samples for f in families)
