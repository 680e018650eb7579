"""`volcano-exporter` as a user runs it: flags, errors, and the HTTP endpoints."""

from __future__ import annotations

import gzip
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.exporter.scrape import parse, select
from tests.simtools import wait_for
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "volcano_monitor.exporter.cli", *args], capture_output=True, text=True,
                          timeout=30, env=env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_help_names_every_flag_and_its_environment_variable() -> None:
    out = run("--help").stdout
    for flag in ("--kubeconfig", "--listen", "--namespaces", "--shard", "--total-shards"):
        assert flag in out
    assert "VOLCANO_EXPORTER_LISTEN" in out and "9746" in out


def test_bad_flags_and_config_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (["--shard", "2", "--total-shards", "2"], ["--listen", "nowhere"], ["--shard", "x"],
                 ["--kubeconfig", str(tmp_path / "missing")]):
        result = run(*args)
        assert result.returncode == 2, args
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [[[")
    result = run("--kubeconfig", str(bad))
    assert result.returncode == 2 and "cannot use kubeconfig" in result.stderr


def test_serves_metrics_gzip_health_and_readiness(scenario_sim: SimulatorThread, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "k.yaml"
    write_kubeconfig(kubeconfig, scenario_sim.url)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "volcano_monitor.exporter.cli", "--kubeconfig", str(kubeconfig),
                                "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return urllib.request.urlopen(base + "/readyz", timeout=2).status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    try:
        wait_for(ready, timeout=20, interval=0.1)
        assert urllib.request.urlopen(base + "/healthz").read() == b"ok\n"
        plain = urllib.request.urlopen(base + "/metrics")
        assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        samples = parse(plain.read())
        assert select(samples, "volcano_pod_info") and select(samples, "volcano_exporter_build_info")
        zipped = urllib.request.urlopen(urllib.request.Request(base + "/metrics",
                                                               headers={"Accept-Encoding": "gzip"}))
        assert zipped.headers["Content-Encoding"] == "gzip"
        assert select(parse(gzip.decompress(zipped.read())), "volcano_pod_info")
        try:
            urllib.request.urlopen(base + "/nope")
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as error:
            assert error.code == 404
    finally:
        process.terminate()
        assert process.wait(10) == 0
