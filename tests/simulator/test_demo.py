"""`make demo` runs `python -m volcano_monitor.simulator.demo`: it must come up, say where to look with commands that
run as printed, and stop cleanly."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from volcano_monitor.simulator.demo import PROD_COST_PER_SECOND, forecast_budget


def free_ports(names: tuple[str, ...]) -> dict[str, int]:
    """A free port per name, each with the port 100 above it free too (where `--clusters 2` puts cluster west's)."""
    ports: dict[str, int] = {}
    while len(ports) < len(names):
        port = free_port()
        taken = {*ports.values(), *(p + 100 for p in ports.values())}  # west's ports are taken too
        if port + 100 > 65535 or port in taken or port + 100 in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 100))
            except OSError:
                continue
        ports[names[len(ports)]] = port
    return ports


def start_demo(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], dict[str, int], list[str]]:
    """The demo on free ports, and what it printed up to its summary's last part."""
    ports = free_ports(("sim", "exporter", "watchdog", "chat", "prometheus", "alertmanager"))
    process = subprocess.Popen(
        [sys.executable, "-m", "volcano_monitor.simulator.demo", "--dir", str(tmp_path), "--speed", "60", *extra,
         *(arg for name, port in ports.items() for arg in (f"--{name}-port", str(port)))],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    lines: list[str] = []
    assert process.stdout is not None
    out = process.stdout
    wait_for(lambda: bool(lines.append(out.readline()) or "Grafana dashboards" in lines[-1]), timeout=120)
    return process, ports, lines


def run_printed(lines: list[str]) -> None:
    """The watchdog commands the summary prints, from another directory, exactly as printed."""
    printed = [line.strip() for line in lines if "volcano-watchdog " in line and line.strip().startswith("/")]
    assert len(printed) == 2, "".join(lines)  # recommend and notify-test, with the venv's path
    for command in printed:
        done = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == 0, (command, done.stderr)


def stop_demo(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
    assert process.wait(60) == 0


@pytest.mark.slow(45)
def test_demo_starts_everything_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    process, ports, lines = start_demo(tmp_path)
    try:
        text = "".join(lines)
        assert f"http://127.0.0.1:{ports['exporter']}/metrics" in text and "kubectl --kubeconfig" in text
        urls = [word for word in text.split() if word.startswith("http://")]
        ui = f"http://127.0.0.1:{ports['watchdog']}/"
        assert urls[0] == ui, text  # the first page a newcomer should open
        page = urllib.request.urlopen(ui, timeout=5)
        assert page.status == 200 and "text/html" in page.headers["Content-Type"]
        body = urllib.request.urlopen(f"http://127.0.0.1:{ports['exporter']}/metrics", timeout=5).read()
        assert b"volcano_pod_info{" in body
        assert (tmp_path / "kubeconfig").exists()
        run_printed(lines)
    finally:
        stop_demo(process)
    for name in ("volcano-exporter", "volcano-watchdog"):  # the simulator stopped last: nobody lost it
        assert "cannot reach the API server" not in (tmp_path / f"{name}.log").read_text(), name


@pytest.mark.slow(60)
def test_demo_with_two_clusters_shows_the_fleet(tmp_path: Path) -> None:
    """`--clusters 2`: east and west write one database, either watchdog's UI opens on the fleet page with both
    clusters and their jobs, and the printed commands work (recommend reads east, as named)."""
    process, ports, lines = start_demo(tmp_path, "--clusters", "2")
    try:
        text = "".join(lines)
        assert "second cluster      west" in text and (tmp_path / "kubeconfig-west").exists()

        def fleet_rows(port: int) -> dict[str, str]:
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
            assert "<title>Fleet" in page
            return {row.split("</td>")[0].rsplit(">", 1)[1]: row for row in page.split("<tr>")[2:]}

        wait_for(lambda: set(fleet_rows(ports["watchdog"])) == {"east", "west"}, timeout=60)
        west = fleet_rows(ports["watchdog"] + 100)  # west's own UI shows the same fleet
        assert set(west) == {"east", "west"} and "stale" not in west["east"] + west["west"]
        jobs = urllib.request.urlopen(f"http://127.0.0.1:{ports['watchdog']}/api/v1/jobs?cluster=west",
                                      timeout=5).read()
        assert b'"cluster":"west"' in jobs and b'"cluster":"east"' not in jobs
        run_printed(lines)
    finally:
        stop_demo(process)
    assert "cannot reach the API server" not in (tmp_path / "volcano-watchdog-west.log").read_text()


@pytest.mark.parametrize("at", ["2026-11-30T00:30:00", "2026-12-06T06:16:00", "2026-12-06T23:30:00",
                                "2027-01-31T20:00:00", "2027-02-28T23:00:00"])
def test_the_demo_budget_forecasts_on_any_day(at: str) -> None:
    """prod's budget is passed by its demo rate before the period ends but not within the demo's first five
    minutes, on a Monday morning as on a Sunday night (a fixed weekly 20 USD stopped forecasting on Sundays)."""
    now = datetime.fromisoformat(at).replace(tzinfo=UTC)
    budget = forecast_budget("prod", now)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    ends = {"week": midnight + timedelta(days=7 - now.weekday()),
            "month": (midnight.replace(day=28) + timedelta(days=4)).replace(day=1)}
    projected = PROD_COST_PER_SECOND * (ends[budget["period"]] - now).total_seconds()
    assert PROD_COST_PER_SECOND * 300 < budget["amount"] < projected
