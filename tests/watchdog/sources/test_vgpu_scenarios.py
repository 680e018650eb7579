"""GPU usage on shared cards end to end: the simulator's `vgpu-hami` and `vgpu-volcano` clusters (four pods at a
quarter of card 0 of gpu-11, an idle whole card, whole-card jobs), a real Prometheus scraping their cAdvisor,
DCGM (per card, no pod labels, as on real vGPU nodes) and vGPU monitor series, and the watchdog collecting from
it, its pods' physical shares from its own informer caches.

- vgpu-hami: HAMi's per-container utilisation says what each of the four pods used (servers ~20 % of the card,
  the cache ~10 %: ~80 % and ~40 % of a quarter);
- vgpu-volcano: Volcano's monitor has no utilisation, only which container holds a vGPU on which card; DCGM's
  card 0 is split across the four by share (each the card's utilisation, of its quarter).
Either way the four add up to what DCGM says card 0 did (and the ledger's GPU efficiency of their job is that
card's ~70 %), the idle card's job is idle and the others busy. And
the VolcanoVGPUMemoryNearLimit rule's expression, joined with the exporter's volcano_pod_info, finds the job whose
cache pod keeps its vGPU at ~97 % of its memory limit, in HAMi's names and in Volcano's monitor's; VolcanoGPUIdle's
finds the idle card's job.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import Engine

from tests.exporter.test_prometheus import Prometheus, poll, prometheus_binary
from tests.promql import ROOT
from tests.simtools import serving_exporter
from tests.watchdog.harness import fast_settings, runs, start_watchdog
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.sources.prometheus import PrometheusCollector
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.gpu_idle import BUSY, IDLE

BUDGET = 90.0
RULES = {rule["alert"]: rule["expr"] for group in yaml.safe_load((ROOT / "alerts" / "volcano-monitor.rules.yml")
                                                                 .read_text())["groups"]
         for rule in group["rules"] if "alert" in rule}
SCRAPE = ("    honor_labels: true\n    metric_relabel_configs:\n      - source_labels: [__name__]\n"
          "        regex: (container_.*|DCGM_.*|vGPU_.*|Device_.*|hami_.*|Host.*)\n        action: keep\n")


@pytest.fixture(params=["vgpu-hami", "vgpu-volcano"])
def scenario(request: pytest.FixtureRequest) -> Iterator[tuple[str, SimulatorThread]]:
    with SimulatorThread(scenario=request.param, speed=10, tick_interval=0.2) as running:
        yield request.param, running


@pytest.fixture
def exporter(scenario: tuple[str, SimulatorThread], tmp_path: Path) -> Iterator[str]:
    """The exporter watching the simulated cluster (volcano_pod_info for the alert rule's join), host:port."""
    with serving_exporter(scenario[1], tmp_path / "exporter") as target:
        yield target


def _job(name: str) -> str:
    return re.sub(r"-[0-9a-z]{4,}$", "", name)  # shared-infer-x7k2p -> shared-infer


def test_shared_card_usage_and_idle_from_the_scenarios(tmp_path: Path, scenario: tuple[str, SimulatorThread],
                                                       exporter: str) -> None:
    # SQLite only: what is read from Prometheus does not depend on the database (the ledger's tests run both)
    database_url = f"sqlite:///{tmp_path / 'watchdog.db'}"
    name, sim = scenario
    deadline = time.monotonic() + BUDGET
    (tmp_path / "prom").mkdir()
    prom = Prometheus(prometheus_binary(), tmp_path / "prom",
                      {"cluster": sim.url.removeprefix("http://"), "volcano-exporter": exporter},
                      job_config={"cluster": SCRAPE})
    watchdog = None
    try:
        prom.wait_ready(timeout=10)
        poll("vGPU monitor and DCGM scraped", deadline,
             lambda: None if prom.query("vGPU_device_memory_limit_in_bytes") and len(prom.query(
                 "DCGM_FI_DEV_GPU_UTIL")) >= 32 else "not yet")
        settings = fast_settings(
            database_url,
            sources={"metrics_api": {"interval_seconds": 0.25}, "rollup_seconds": 1,
                     "prometheus": {"enabled": True, "url": prom.url, "interval_seconds": 0.5, "rate_window": "5s"}},
            gpu_idle={"idle_util_percent": 5})
        engine: Engine = make_engine(database_url)
        watchdog = start_watchdog(sim, engine, tmp_path, settings)
        collector = next(src for source, _, src in watchdog._sources if source == "prometheus")
        assert isinstance(collector, PrometheusCollector)

        def states() -> dict[str, str]:
            return {_job(job.job_name): job.state for job in watchdog.gpu_idle.snapshot()} if watchdog else {}

        poll("the idle card's job idle, the shared and whole-card jobs busy", deadline,
             lambda: None if {k: v for k, v in states().items() if k in ("shared-infer", "notebook-idle",
                                                                           "train-whole")} ==
             {"shared-infer": BUSY, "notebook-idle": IDLE, "train-whole": BUSY}
             else f"{states()}; {collector.errors} {collector.last_error!r}")

        at = time.time()
        samples = [s for s in collector.collect(at) if s.gpu_util_percent is not None]
        assert not collector.errors, collector.last_error
        assert collector.hami_style == ("legacy" if name == "vgpu-volcano" else collector.hami_style)
        infos = {s.pod: watchdog.index.pod_info(s.namespace, s.pod) for s in samples}
        shared = [s for s in samples if (info := infos[s.pod]) is not None and _job(info.job_name) == "shared-infer"]
        assert len(shared) == 4 and {s.gpus for s in shared} == {0.25}, shared
        # card 0 of gpu-11 as DCGM saw it at the same instant: the four pods used exactly that, together
        card = [r for r in prom.query('DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-11", gpu="0"}', at=at)]
        assert len(card) == 1
        card_used = float(card[0]["value"][1]) / 100
        used = sum((s.gpu_util_percent or 0.0) / 100 * s.gpus for s in shared)
        utils = sorted(s.gpu_util_percent or 0.0 for s in shared)
        if name == "vgpu-hami":
            # HAMi's own readings: the cache ~10 % of the card (40 % of its quarter), the servers ~20 % (80 %);
            # the card's sum is rounded per vGPU by the monitor, so within a point of DCGM's
            assert utils[0] < 60 < utils[1], utils
            assert used == pytest.approx(card_used, abs=0.01)
        else:
            # DCGM only: each pod is credited the card's utilisation of its quarter, whoever did the work
            assert utils == pytest.approx([card_used * 100] * 4)
            assert used == pytest.approx(card_used)
        # The vGPU memory alert's expression (without its 5 minutes): the cache pod of shared-infer keeps its vGPU
        # at ~97 % of its limit, the servers at ~60 %: only shared-infer, in either plugin's names.
        poll("volcano_pod_info scraped", deadline,
             lambda: None if prom.query('volcano_pod_info{job_name=~"shared-infer.*"}') else "not yet")
        near = {(r["metric"]["namespace"], _job(r["metric"]["job_name"]), r["metric"]["queue"])
                for r in prom.query(RULES["VolcanoVGPUMemoryNearLimit"])}
        assert near == {("default", "shared-infer", "gpu")}
        # VolcanoGPUIdle's expression: the idle card's job only (HAMi: its own reading; Volcano: its card's), not
        # the quarter-card pods nor the whole-card jobs. It needs the exporter's physical_gpu requests.
        poll("physical_gpu requests scraped", deadline,
             lambda: None if prom.query('volcano_pod_resource_requests{resource="physical_gpu"}') else "not yet")
        idle_jobs = {_job(r["metric"]["job_name"]) for r in prom.query(RULES["VolcanoGPUIdle"])}
        assert idle_jobs == {"notebook-idle"}
        # The ledger adds these up (the recorder is the watchdog's): shared-infer requests one physical GPU (four
        # quarters) and uses what card 0 did, ~70 % of it (servers ~20 % each, the cache ~10 %).
        def efficiency() -> str | None:
            run = next((r for r in runs(engine) if r.workload == "shared-infer"), None)
            if run is None or run.gpu_seconds_requested < 3.0:
                return f"not yet: {run and (run.gpu_seconds_requested, run.gpu_seconds_used)}"
            assert run.requested_gpus == pytest.approx(1.0)
            ratio = run.gpu_seconds_used / run.gpu_seconds_requested
            return None if 0.55 < ratio < 0.85 else f"used/requested {ratio:.3f}"

        poll("shared-infer's GPU efficiency from the shared card", deadline, efficiency)
        idle = next(s for s in samples if (info := infos[s.pod]) is not None and _job(info.job_name) == "notebook-idle")
        assert idle.gpus == 1.0 and (idle.gpu_util_percent or 0.0) < 5
    finally:
        if watchdog is not None:
            watchdog.stop()
        prom.stop()
