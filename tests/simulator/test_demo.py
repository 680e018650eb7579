"""`make demo` runs `python -m simulator.demo`: it must come up, say where to look, and stop cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for


def test_demo_starts_everything_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    sim_port, exporter_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator.demo", "--dir", str(tmp_path), "--sim-port", str(sim_port),
         "--exporter-port", str(exporter_port), "--speed", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        wait_for(lambda: bool(lines.append(process.stdout.readline()) or "| grep" in lines[-1]), timeout=60)
        text = "".join(lines)
        assert f"http://127.0.0.1:{exporter_port}/metrics" in text and "kubectl --kubeconfig" in text
        body = urllib.request.urlopen(f"http://127.0.0.1:{exporter_port}/metrics", timeout=5).read()
        assert b"volcano_pod_info{" in body
        assert (tmp_path / "kubeconfig").exists()
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
