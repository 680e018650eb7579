"""The DCGM label styles against a real Prometheus scraping the simulated cluster's cAdvisor and DCGM
series (`gpu-idle` scenario: an idle GPU, a busy one, and a GPU no DCGM exporter reports).

`namespace`: the DCGM job scraped with honor_labels, the series keep namespace/pod/container.
`exported`: the DCGM job's target carries namespace/pod/container of its own (the exporter's pod), so
Prometheus renames the GPU's to exported_namespace/exported_pod/exported_container — as a default
ServiceMonitor does. The collector must find the style (`auto`) and read the GPUs of the right pods;
the other style's queries find nothing; the dashboards' both-styles selector finds the same pods, and
the VolcanoGPUIdle rule's expression (joined with the exporter's volcano_pod_info) the idle job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.exporter.test_prometheus import Prometheus, poll, prometheus_binary
from tests.promql import ROOT
from tests.simtools import serving_exporter
from volcano_monitor.dashboards.common import GPU_UTIL
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.sources.prometheus import EXPORTED_STYLE, NAMESPACE_STYLE, PrometheusCollector
from volcano_monitor.watchdog.sources.settings import PrometheusSource

BUDGET = 40.0
GPU_IDLE_RULE = next(rule["expr"] for group in yaml.safe_load((ROOT / "alerts" / "volcano-monitor.rules.yml")
                                                                .read_text())["groups"]
                     for rule in group["rules"] if rule.get("alert") == "VolcanoGPUIdle")
KEEP_CADVISOR = ("    honor_labels: true\n    metric_relabel_configs:\n      - source_labels: [__name__]\n"
                 "        regex: container_.*\n        action: keep\n")
KEEP_DCGM = ("    metric_relabel_configs:\n      - source_labels: [__name__]\n        regex: DCGM_.*\n"
             "        action: keep\n")
# The DCGM exporter's own pod, as a ServiceMonitor's target labels name it.
EXPORTER_POD = ("    relabel_configs:\n"
                + "".join(f"      - target_label: {name}\n        replacement: {value}\n"
                          for name, value in (("namespace", "gpu-operator"), ("pod", "nvidia-dcgm-exporter-x7k2p"),
                                              ("container", "nvidia-dcgm-exporter"))))
DCGM_JOB = {NAMESPACE_STYLE: "    honor_labels: true\n" + KEEP_DCGM, EXPORTED_STYLE: EXPORTER_POD + KEEP_DCGM}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(scenario="gpu-idle", speed=10, tick_interval=0.2) as running:
        yield running


@pytest.fixture(scope="module")
def exporter(sim: SimulatorThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The exporter watching the simulated cluster (volcano_pod_info for the rule's join), host:port."""
    with serving_exporter(sim, tmp_path_factory.mktemp("exporter")) as target:
        yield target


def _prefix(pod: str) -> str:
    return pod.split("-")[0]  # idle-gpu-xxxx-trainer-0 -> idle


@pytest.mark.parametrize("style", [NAMESPACE_STYLE, EXPORTED_STYLE])
def test_collector_detects_the_style_and_reads_the_gpus_of_the_right_pods(
        tmp_path: Path, sim: SimulatorThread, exporter: str, style: str) -> None:
    binary = prometheus_binary()
    deadline = time.monotonic() + BUDGET
    target = sim.url.removeprefix("http://")
    prom = Prometheus(binary, tmp_path, {"cadvisor": target, "dcgm": target, "volcano-exporter": exporter},
                      job_config={"cadvisor": KEEP_CADVISOR, "dcgm": DCGM_JOB[style]})
    try:
        prom.wait_ready(timeout=10)
        other = EXPORTED_STYLE if style == NAMESPACE_STYLE else NAMESPACE_STYLE
        wanted = 'DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}' if style == EXPORTED_STYLE else \
            'DCGM_FI_DEV_GPU_UTIL{pod!="", exported_pod=""}'
        poll("two DCGM series scraped", deadline,
             lambda: None if len(prom.query(wanted)) == 2 else f"{prom.query('DCGM_FI_DEV_GPU_UTIL')}")
        poll("three containers' CPU rated", deadline,
             lambda: None if len(prom.query('rate(container_cpu_usage_seconds_total[5s])')) >= 3 else "not yet")

        auto = PrometheusCollector(PrometheusSource(url=prom.url, enabled=True, rate_window="5s"))
        samples = auto.collect(time.time())
        assert auto.dcgm_style == style
        assert not auto.errors, auto.last_error
        gpu = {_prefix(s.pod): s for s in samples if s.gpu_util_percent is not None}
        cpu = {_prefix(s.pod) for s in samples if s.cpu_cores is not None}
        assert set(gpu) == {"idle", "busy"}, samples  # never the exporter's own pod, never no-dcgm
        assert {s.namespace for s in gpu.values()} == {"default"}
        assert gpu["idle"].gpu_util_percent is not None and gpu["idle"].gpu_util_percent < 5
        assert gpu["busy"].gpu_util_percent is not None and gpu["busy"].gpu_util_percent > 50
        assert gpu["idle"].gpus == gpu["busy"].gpus == 1
        assert {"idle", "busy", "no"} <= cpu  # the GPU without DCGM data still has CPU usage

        configured = PrometheusCollector(PrometheusSource.model_validate({"url": prom.url, "enabled": True,
                                                                       "dcgm_labels": style}))
        assert {_prefix(s.pod) for s in configured.collect(time.time()) if s.gpu_util_percent is not None} == \
            {"idle", "busy"}
        wrong = PrometheusCollector(PrometheusSource.model_validate({"url": prom.url, "enabled": True,
                                                                  "dcgm_labels": other}))
        wrong_gpu = {(s.namespace, s.pod) for s in wrong.collect(time.time()) if s.gpu_util_percent is not None}
        assert not {pod for _, pod in wrong_gpu if _prefix(pod) in ("idle", "busy")}

        # The dashboards' and alert rules' selector reads either style as namespace/pod of the GPU's pod.
        # ($cluster as Grafana's "All" sends it: the series carry no cluster label here)
        gpu_util = GPU_UTIL.replace("$cluster", ".*")
        found = {(r["metric"]["namespace"], _prefix(r["metric"]["pod"])) for r in prom.query(gpu_util)}
        assert found == {("default", "idle"), ("default", "busy")}

        # The VolcanoGPUIdle rule's expression (15-minute averages over the few seconds there are) finds the
        # idle job and only it, in this style too.
        poll("volcano_pod_info scraped", deadline,
             lambda: None if len(prom.query('volcano_pod_info{queue="gpu"}')) == 3 else "not yet")
        firing = {(r["metric"]["namespace"], _prefix(r["metric"]["job_name"]), r["metric"]["queue"])
                  for r in prom.query(GPU_IDLE_RULE)}
        assert firing == {("default", "idle", "gpu")}
    finally:
        prom.stop()
