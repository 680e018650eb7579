"""`make demo` shows what the watchdog is for within five minutes: every alert kind fires at least once
(issue 13: in 23 minutes JobIdle and OverRequested never fired). The demo as a user starts it (its own
configuration, the `demo` scenario — the default one plus a GPU node held hostage — at 10x), with
Prometheus and Alertmanager when installed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.exporter.test_cli import free_port
from volcano_monitor.watchdog.runtime.tasks import ALERT_KINDS, FLEET_KINDS

KINDS = set(ALERT_KINDS - FLEET_KINDS)  # `make demo` is one cluster: ClusterStale needs another beside it
BUDGET_SECONDS = 300
CHAT_BUDGET = 20  # one message per alert kind and a few capability notices, then updates every 5 minutes


def fired(watchdog: str) -> set[str]:
    kinds: set[str] = set()
    for state in ("firing", "resolved"):  # a pending alert has not fired
        with urllib.request.urlopen(f"{watchdog}/api/v1/alerts?state={state}&limit=1000", timeout=10) as response:
            kinds.update(item["kind"] for item in json.load(response)["items"])
    return kinds


@pytest.mark.slow(200)
def test_every_alert_kind_fires_within_five_minutes_of_make_demo(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("sim", "exporter", "watchdog", "chat", "prometheus", "alertmanager")}
    process = subprocess.Popen(
        [sys.executable, "-m", "volcano_monitor.simulator.demo", "--dir", str(tmp_path),
         *(arg for name, port in ports.items() for arg in (f"--{name}-port", str(port)))],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    started = time.monotonic()
    watchdog = f"http://127.0.0.1:{ports['watchdog']}"
    seen: set[str] = set()
    try:
        assert process.stdout is not None
        for line in process.stdout:  # the banner comes once everything is up
            if "Grafana dashboards" in line:
                break
        while time.monotonic() - started < BUDGET_SECONDS and seen != KINDS:
            assert process.poll() is None, f"the demo exited; see {tmp_path}"
            seen = fired(watchdog)
            time.sleep(1)  # two small API reads a round: a kind that fires is seen within a second
        took = time.monotonic() - started
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['chat']}/messages", timeout=10) as response:
            messages = len(json.load(response))
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(60)
    assert seen == KINDS, f"after {took:.0f} s, never fired: {sorted(KINDS - seen)}"
    assert messages <= CHAT_BUDGET, f"{messages} chat messages in {took:.0f} s: a channel people would mute"
