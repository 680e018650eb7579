"""The `volcano-watchdog` process as shipped (its CLI wiring): Prometheus as the usage source, GPU idle
limits and the abort action in apply mode, against the simulated cluster (`gpu-idle`) and a real
Prometheus. /metrics serves the GPU idle families, /api/v1/gpu-idle the job states, and the idle job is
aborted through exactly one Volcano Command."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.exporter.test_prometheus import Prometheus, free_port, poll, prometheus_binary
from volcano_monitor.simulator.resources import COMMANDS, JOBS
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.simulator.store import WatchEvent

BUDGET = 60.0
SCRAPE = ("    honor_labels: true\n    metric_relabel_configs:\n      - source_labels: [__name__]\n"
          "        regex: (container_.*|DCGM_.*)\n        action: keep\n")


def _phase(sim: SimulatorThread, prefix: str) -> str:
    def read() -> str:
        for job in sim.store.objects(JOBS, "default"):
            if job["metadata"]["name"].startswith(prefix):
                return str(job.get("status", {}).get("state", {}).get("phase", ""))
        return ""

    result: str = sim.call(read)
    return result


def test_the_watchdog_process_counts_reports_and_aborts(tmp_path: Path) -> None:
    binary = prometheus_binary()
    deadline = time.monotonic() + BUDGET
    created: list[dict[str, Any]] = []
    with SimulatorThread(scenario="gpu-idle", speed=10, tick_interval=0.2) as sim:
        def on_write(rtype: Any, event: WatchEvent) -> None:
            if rtype is COMMANDS and event.type == "ADDED":
                created.append(event.obj)

        sim.call(sim.store.listeners.append, on_write)
        (tmp_path / "prom").mkdir()
        prom = Prometheus(binary, tmp_path / "prom", {"cluster": sim.url.removeprefix("http://")},
                          job_config={"cluster": SCRAPE})
        kubeconfig, config, log = tmp_path / "k.yaml", tmp_path / "config.yaml", tmp_path / "watchdog.log"
        write_kubeconfig(kubeconfig, sim.url)
        config.write_text(yaml.safe_dump({
            "detectors": {"idle_window_seconds": 600},
            "sources": {"metrics_api": {"enabled": False},
                        "prometheus": {"enabled": True, "url": prom.url, "interval_seconds": 0.5,
                                       "rate_window": "5s"}},
            "gpu_idle": {"no_data_seconds": 1, "default": {"gpu_idle_limit_seconds": 3, "abort": True},
                         "abort": {"enabled": True, "mode": "apply", "grace_seconds": 1, "interval_seconds": 0.5}},
        }))
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
             "--kubeconfig", str(kubeconfig), "--cluster-name", "default", "--database-url",
             f"sqlite:///{tmp_path / 'w.db'}", "--listen", f"127.0.0.1:{port}", "--config", str(config)],
            stdout=log.open("ab"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            prom.wait_ready(timeout=10)

            def states() -> str | None:
                try:
                    jobs = httpx.get(f"{base}/api/v1/gpu-idle", timeout=2).json()["jobs"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return f"no answer yet; log: {log.read_text()[-500:]}"
                found = {j["job_name"].rsplit("-", 1)[0]: j["state"] for j in jobs}
                want = {"idle-gpu": "idle", "busy-gpu": "busy", "no-dcgm": "no_gpu_data"}
                return None if found == want else f"{found}"

            poll("/api/v1/gpu-idle knows the three jobs", deadline, states)
            metrics = httpx.get(f"{base}/metrics", timeout=5).text
            assert "# TYPE volcano_watchdog_job_gpu_idle_seconds_total counter" in metrics
            assert 'volcano_watchdog_job_gpu_state{namespace="default",job_name="no-dcgm-' in metrics
            assert 'volcano_watchdog_dcgm_label_style{style="namespace"} 1' in metrics  # detected (auto)
            assert 'volcano_watchdog_dcgm_label_style{style="unknown"} 0' in metrics
            poll("the idle job aborted", deadline,
                 lambda: None if _phase(sim, "idle-gpu") == "Aborted" else _phase(sim, "idle-gpu"))
            time.sleep(1.5)  # more abort passes: nothing more
            assert [c["target"]["name"].rsplit("-", 1)[0] for c in created] == ["idle-gpu"]
            assert _phase(sim, "busy-gpu") == "Running" and _phase(sim, "no-dcgm") == "Running"
            metrics = httpx.get(f"{base}/metrics", timeout=5).text
            assert 'volcano_watchdog_gpu_idle_aborts_total{queue="gpu",outcome="created"} 1' in metrics
        finally:
            process.terminate()
            process.wait(15)
            prom.stop()
