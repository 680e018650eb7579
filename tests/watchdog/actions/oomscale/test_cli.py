"""The wiring of `volcano-watchdog run`: with `oom_scale_up` on, the process resubmits the opted-in
job until it completes, and serves the lineage on its API and the counter on its /metrics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from tests.watchdog.actions.oomscale.test_end_to_end import first, jobs, phase
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig


def test_the_watchdog_process_resubmits_and_reports(database_url: str, tmp_path: Path) -> None:
    sim = SimulatorThread(scenario="oom-scale-up", speed=8.0, tick_interval=0.1, bookmark_interval=1.0).start()
    kubeconfig, config = tmp_path / "k.yaml", tmp_path / "config.yaml"
    write_kubeconfig(kubeconfig, sim.url)
    config.write_text(yaml.safe_dump({"oom_scale_up": {"enabled": True, "mode": "apply",
                                                       "reconcile_interval_seconds": 1}}))
    port = free_port()
    log = tmp_path / "watchdog.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
         "--kubeconfig", str(kubeconfig), "--cluster-name", "default", "--database-url",
         database_url,
         "--listen", f"127.0.0.1:{port}", "--config", str(config)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: any(n.startswith("grows-") for n in jobs(sim)), timeout=20)
        grows = first(sim, "grows-")
        wait_for(lambda: phase(jobs(sim).get(f"{grows}-oom2", {})) == "Completed", timeout=90, interval=0.2)
        page = httpx.get(f"{base}/api/v1/oom-resubmissions", params={"lineage": grows}, timeout=5).json()
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        found = jobs(sim)
    finally:
        process.terminate()
        process.wait(30)
        sim.stop()
    assert process.returncode == 0, log.read_text()[-3000:]
    assert sorted((i["attempt"], i["outcome"]) for i in page["items"]) == [(1, "applied"), (2, "applied")]
    assert 'volcano_watchdog_oom_resubmissions_total{namespace="default",outcome="applied"} 2' in metrics
    assert "# TYPE volcano_watchdog_oom_resubmissions_total counter" in metrics
    assert not [n for n in found if n.startswith("stays-") and "-oom" in n]
