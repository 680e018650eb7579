"""GPU usage on shared cards against a real Prometheus: HAMi's vGPU monitor series (both naming schemes) and
DCGM's per-card series as scraped (instance/job labels, one card scraped by two jobs), written as TSDB blocks
by promtool; the collector detects the styles, builds its queries and turns the answers into physical GPUs.

The cluster, hand-computed:
- card GPU-q at 80 %, DCGM names q0..q3 on it, a quarter each: 0.2 GPUs used each (80 % of the share);
- card GPU-i at 0 %, i0 and i1 at half each: 0 % (idle: the card is idle);
- card GPU-h at 35 %, h0 and h1 at half each, HAMi: h0 30 % of the card (0.3 GPUs, 60 % of its half), h1 0;
- card GPU-w at 60 %, w holds it whole: 60 % of one GPU;
- HAMi's two-vGPU container m (on GPU-m1 at 50 %, GPU-m2 at 10 % of the card) holding 0.5 of each: 0.6 GPUs
  used of 1.0, 60 %;
- card GPU-v at 60 %, as on a Volcano vGPU node: DCGM names no pod (the series carries the DCGM exporter's own
  namespace/pod, as a ServiceMonitor with honorLabels leaves it), the vGPU monitor has memory series only; v0
  holds 0.25, v1 0.5: the card's 0.6 GPUs split 1:2, 0.2 and 0.4, 80 % of each share.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.watchdog.promhistory import PrometheusServer, create_blocks
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.sources import hami
from volcano_monitor.watchdog.sources.prometheus import NAMESPACE_STYLE, PrometheusCollector
from volcano_monitor.watchdog.sources.settings import PrometheusSource
from volcano_monitor.watchdog.state.gpu_idle import BUSY, IDLE, GpuIdleTracker
from volcano_monitor.watchdog.state.samples import PodInfo

END = 1_700_000_000  # the instant queried; the series run for the 10 minutes before it
SHARES = {"q0": 0.25, "q1": 0.25, "q2": 0.25, "q3": 0.25, "i0": 0.5, "i1": 0.5, "h0": 0.5, "h1": 0.5,
          "w": 1.0, "m": 1.0, "v0": 0.25, "v1": 0.5}
EXPECTED = {**{f"q{i}": (80.0, 0.25) for i in range(4)}, "i0": (0.0, 0.5), "i1": (0.0, 0.5),
            "h0": (60.0, 0.5), "h1": (0.0, 0.5), "w": (60.0, 1.0), "m": (60.0, 1.0),
            "v0": (80.0, 0.25), "v1": (80.0, 0.5)}

DCGM = [("q0", "GPU-q", 80), ("q1", "GPU-q", 80), ("q2", "GPU-q", 80), ("q3", "GPU-q", 80),
        ("i0", "GPU-i", 0), ("i1", "GPU-i", 0), ("h0", "GPU-h", 35), ("h1", "GPU-h", 35), ("w", "GPU-w", 60)]
HAMI = [("h0", "GPU-h", 0, 30), ("h1", "GPU-h", 0, 0), ("m", "GPU-m1", 0, 50), ("m", "GPU-m2", 1, 10),
        ("v0", "GPU-v", 0, None), ("v1", "GPU-v", 0, None)]  # None: memory series only (Volcano's monitor)


def _series(name: str, labels: dict[str, str], value: float) -> list[str]:
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return [f"{name}{{{text}}} {value} {t}" for t in range(END - 600, END + 1, 30)]


def openmetrics(style: str) -> str:
    lines: dict[str, list[str]] = {"DCGM_FI_DEV_GPU_UTIL": []}
    for pod, uuid, util in DCGM:
        # dcgm-exporter with pod mapping, scraped with honorLabels; two scrape jobs see the same card
        for job in ("dcgm", "dcgm-copy"):
            lines["DCGM_FI_DEV_GPU_UTIL"] += _series("DCGM_FI_DEV_GPU_UTIL", {
                "namespace": "team-a", "pod": pod, "container": "main", "UUID": uuid, "gpu": "0",
                "Hostname": "node-1", "instance": "10.0.0.9:9400", "job": job}, util)
    lines["DCGM_FI_DEV_GPU_UTIL"] += _series("DCGM_FI_DEV_GPU_UTIL", {
        "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "container": "nvidia-dcgm-exporter",
        "UUID": "GPU-v", "gpu": "3",
        "Hostname": "node-2", "instance": "10.0.0.10:9400", "job": "dcgm"}, 60)
    names = hami.STYLES[style]
    for metric in (names.util, names.memory_used, names.memory_limit):
        lines[metric] = []
    for pod, uuid, index, util in HAMI:
        labels = {names.labels[0]: "team-a", names.labels[1]: pod, names.labels[2]: "main", names.device: uuid,
                  "vdeviceid" if style == hami.LEGACY else "vdevice_index": str(index), "zone": "vGPU",
                  "instance": "10.0.0.9:31992", "job": "hami-device-plugin"}
        if style == hami.EXPORTED:  # the monitor's own pod, as a ServiceMonitor without honorLabels leaves it
            labels |= {"namespace": "kube-system", "pod": "hami-device-plugin-7x2kq", "container": "monitor"}
        if util is not None:
            lines[names.util] += _series(names.util, labels, util)
        lines[names.memory_used] += _series(names.memory_used, labels, 2**30)
        lines[names.memory_limit] += _series(names.memory_limit, labels, 4 * 2**30)
    out: list[str] = []
    for metric, series in lines.items():
        out += [f"# TYPE {metric} gauge", *series]
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture(scope="module", params=[hami.LEGACY, hami.EXPORTED])
def prometheus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    workdir = tmp_path_factory.mktemp(f"shared-{request.param}")
    (workdir / "history.om").write_text(openmetrics(request.param))
    create_blocks(workdir / "history.om", workdir / "data")
    server = PrometheusServer(workdir / "data", workdir).wait_ready()
    try:
        yield server.url, request.param
    finally:
        server.stop()


def test_collector_reads_shared_cards_in_physical_gpus(prometheus: tuple[str, str]) -> None:
    url, style = prometheus
    collector = PrometheusCollector(PrometheusSource(url=url, enabled=True), shares=lambda ns, pod: SHARES.get(pod))
    samples = collector.collect(float(END))
    assert not collector.errors, collector.last_error
    assert collector.hami_style == style and collector.dcgm_style == NAMESPACE_STYLE
    got = {s.pod: (s.gpu_util_percent, s.gpus) for s in samples}
    assert set(got) == set(EXPECTED)
    for pod, (util, gpus) in EXPECTED.items():
        assert got[pod][0] == pytest.approx(util) and got[pod][1] == pytest.approx(gpus), pod
    used = sum((u or 0.0) / 100 * g for u, g in got.values())
    # the cards' busy GPUs, each once although two jobs scrape DCGM: q 0.8, h 0.3 (HAMi), w 0.6, m 0.6, v 0.6
    assert used == pytest.approx(0.8 + 0.3 + 0.6 + 0.6 + 0.6)


def test_namespace_filter_applies_to_hami_and_dcgm(prometheus: tuple[str, str]) -> None:
    url, _ = prometheus
    collector = PrometheusCollector(PrometheusSource(url=url, enabled=True), namespaces=("team-b",))
    assert collector.collect(float(END)) == []
    assert not collector.errors, collector.last_error


def test_gpu_idle_on_shared_cards(prometheus: tuple[str, str]) -> None:
    """GpuIdle fed by the collector: i0/i1 (DCGM only) are idle because their card is; h1 is idle because HAMi
    says it used nothing, although its card is busy with h0; the quarter-card job q is busy."""
    url, _ = prometheus
    collector = PrometheusCollector(PrometheusSource(url=url, enabled=True), shares=lambda ns, pod: SHARES.get(pod))
    jobs = {pod: "q" if pod.startswith("q") else pod for pod in SHARES}
    infos = {pod: PodInfo(f"uid-{job}", job, "team-a", job, "main", "gpu", "Running", 1.0, 2**30, SHARES[pod])
             for pod, job in jobs.items()}
    tracker = GpuIdleTracker(GpuIdleSettings(idle_util_percent=5), max_gap_seconds=180)
    for at in (END - 60, END):
        tracker.observe(collector.collect(float(at)), lambda ns, pod: infos.get(pod) if ns == "team-a" else None)
    states = {job.job_name: (job.state, job.idle_seconds) for job in tracker.snapshot()}
    assert states == {"q": (BUSY, 0.0), "i0": (IDLE, 60.0), "i1": (IDLE, 60.0), "h0": (BUSY, 0.0),
                      "h1": (IDLE, 60.0), "w": (BUSY, 0.0), "m": (BUSY, 0.0), "v0": (BUSY, 0.0),
                      "v1": (BUSY, 0.0)}
    q = next(job for job in tracker.snapshot() if job.job_name == "q")
    assert q.gpu_pods == 4 and q.gpu_util_percent == pytest.approx(80.0)  # of each pod's quarter
