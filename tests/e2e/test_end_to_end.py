"""The whole product at once, each part started with its real command: the simulated cluster, the
exporter, the watchdog, a real Prometheus loading alerts/, a real Alertmanager routing to the
watchdog's receiver, and a local chat server.

- A job that fails in the simulator reaches the chat server twice: through the watchdog's own
  detector (JobFailed) and through Prometheus's VolcanoJobFailed rule -> Alertmanager -> the watchdog.
- Every dashboard panel's query returns data from that Prometheus, except the panels listed in
  NO_DATA_EXPECTED with the reason.

The rule files are loaded with their `for:` durations cut to 1s (the expressions are unchanged): the
scenario runs compressed, real time does not.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.exporter.test_cli import free_port
from tests.promql import substitute_grafana_variables
from tests.simtools import wait_for
from tests.watchdog.harness import FAST_DETECTORS
from volcano_monitor.dashboards.generate import panel_queries
from volcano_monitor.simulator.chatinbox import ChatInbox, InboxMessage
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.simulator.stack import Stack, alertmanager_config, prometheus_config

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "e2e-token"
SPEED = 300

# (dashboard title, panel title) -> why the simulated stack has no data for it.
NO_DATA_EXPECTED: dict[tuple[str, str], str] = {
    ("volcano-monitor health", "Informers not synced"): "counts unsynced informers: none in a healthy run",
    ("volcano-monitor health", "Errors"): "API request errors by code: none in a healthy run",
    ("Volcano efficiency and recommendations", "Wasted core-hours by namespace, time range"):
        "a subquery with 5-minute steps: no step has data within the test's first minutes",
    ("Volcano efficiency and recommendations", "Wasted GPU-hours by namespace, time range"):
        "a subquery with 5-minute steps: no step has data within the test's first minutes",
    ("Volcano efficiency and recommendations", "Idle jobs (watchdog)"):
        "JobIdle needs a full idle window plus the watchdog's 60-second waste pass: later than this test looks",
    ("Volcano efficiency and recommendations", "Idle alerts by severity (watchdog)"):
        "JobIdle needs a full idle window plus the watchdog's 60-second waste pass: later than this test looks",
}
NO_DATA_PATTERNS = {
    "kube_pod_container_status": "kube-state-metrics is not part of the simulated stack",
}


def short_rules(tmp: Path) -> list[Path]:
    out = []
    for source in sorted((ROOT / "alerts").glob("*.rules.yml")):
        data = yaml.safe_load(source.read_text())
        for group in data["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "1s"
        target = tmp / source.name
        target.write_text(yaml.safe_dump(data, sort_keys=False))
        out.append(target)
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("e2e")
    inbox = ChatInbox().start()
    ports = {name: free_port() for name in ("exporter", "watchdog", "prometheus", "alertmanager")}
    watchdog_url = f"http://127.0.0.1:{ports['watchdog']}"
    procs = Stack(tmp / "logs")
    # `demo`: the default scenario plus a GPU node held hostage and run hot, so every dashboard panel has data.
    # Volcano v1.12, the release the recordings are of: it serves HyperNodes, so the fragmentation row has data.
    with SimulatorThread(scenario="demo", speed=SPEED, tick_interval=0.05, volcano_release="v1.12") as sim:
        kubeconfig = tmp / "kubeconfig"
        write_kubeconfig(kubeconfig, sim.url)
        sim_target = sim.url.split("://", 1)[1]
        try:
            prom = procs.start_prometheus(ports["prometheus"], prometheus_config(
                {"volcano-exporter": f"127.0.0.1:{ports['exporter']}",
                 "volcano-watchdog": f"127.0.0.1:{ports['watchdog']}", "cadvisor-dcgm": sim_target},
                short_rules(tmp), f"127.0.0.1:{ports['alertmanager']}", interval="1s"))
            procs.start_alertmanager(ports["alertmanager"], alertmanager_config(watchdog_url, TOKEN, "1s"))
            procs.start_python("exporter", "volcano_monitor.exporter.cli", "--kubeconfig", str(kubeconfig), "--listen",
                               f"127.0.0.1:{ports['exporter']}", ready_url=f"http://127.0.0.1:{ports['exporter']}/readyz")
            config = procs.write_yaml("watchdog.yaml", {
                "api_token": TOKEN, "grafana_url": "http://grafana.example",
                "detectors": {**FAST_DETECTORS, "gpu_stranded": {"window_seconds": 1},
                              "node_hot": {"window_seconds": 1, "interval_seconds": 0.5}},
                "sources": {"metrics_api": {"interval_seconds": 0.5}, "rollup_seconds": 1, "flush_interval_seconds": 1,
                            "prometheus": {"enabled": True, "url": prom, "interval_seconds": 2, "rate_window": "30s"}},
                "notifications": {
                    "receivers": [{"name": "inbox", "webhook": {"url": f"{inbox.url}/webhook/e2e"}}],
                    "route": {"receiver": "inbox", "group_by": ["source", "alertname", "namespace", "job_name"],
                              "group_wait": 0, "group_interval": "1s"},
                    "api_url": watchdog_url, "delivery": {"poll_interval_seconds": 0.2}},
                # dry-run: plans and notices, no patches
                "capability": {"enabled": True, "mode": "dry-run", "reconcile_interval_seconds": 2, "policies": {
                    "research": {"share": {"fraction": 0.5, "node_selector": {"nvidia.com/gpu.present": "true"}}}}}})
            procs.start_python("watchdog", "volcano_monitor.watchdog.runtime.cli", "--kubeconfig", str(kubeconfig),
                               "--database-url",
                               f"sqlite:///{tmp / 'watchdog.db'}", "--listen", f"127.0.0.1:{ports['watchdog']}",
                               "--config", str(config), ready_url=f"{watchdog_url}/readyz")
            yield {"inbox": inbox, "prometheus": prom, "procs": procs, "sim": sim}
        finally:
            codes = procs.stop()
            inbox.stop()
    assert codes.get("watchdog") == 0 and codes.get("exporter") == 0, codes


def alerts_in(message: InboxMessage) -> list[dict[str, Any]]:
    return list(message.body["alerts"])


def test_a_failed_job_reaches_chat_through_the_watchdog_and_through_alertmanager(stack: dict[str, Any]) -> None:
    inbox: ChatInbox = stack["inbox"]

    def delivered(source: str, kind: str) -> list[dict[str, Any]]:
        return [a for m in inbox.messages() for a in alerts_in(m) if a["source"] == source and a["kind"] == kind]

    def both_ways() -> set[tuple[str, str]]:
        def jobs(source: str, kind: str) -> set[tuple[str, str]]:
            return {(a["namespace"], a["job_name"]) for a in delivered(source, kind)}
        return jobs("watchdog", "JobFailed") & jobs("alertmanager", "VolcanoJobFailed")

    # Polled until one job has come both ways: the first to arrive by each way can be different jobs (at
    # 300x several fail within a few seconds, and the Prometheus -> Alertmanager way lags by its intervals).
    try:
        wait_for(lambda: bool(both_ways()), timeout=120, interval=0.5)
    except AssertionError:
        raise AssertionError(("no failed job reached chat both ways", delivered("watchdog", "JobFailed"),
                              delivered("alertmanager", "VolcanoJobFailed"))) from None
    own = delivered("watchdog", "JobFailed")
    assert any(a["status"] == "firing" for a in own) and all(a["url"].startswith("http") for a in own)


def query(prometheus: str, expr: str, path: str = "query", **params: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/{path}?{urllib.parse.urlencode({'query': expr, **params})}"
    with urllib.request.urlopen(url, timeout=10) as response:
        reply = json.load(response)
    assert reply["status"] == "success", reply
    result = reply["data"]["result"]
    return result if isinstance(result, list) else [result]


def shows_data(prometheus: str, expr: str, seconds: int = 600) -> bool:
    """What a time-series panel shows: any point over the last `seconds`, not only at this instant (an
    alert episode of the demo, e.g. a hot node, is drawn while it lasted and stays on the graph)."""
    if query(prometheus, expr):
        return True
    end = time.time()
    return any(series.get("values") for series in query(prometheus, expr, "query_range", start=f"{end - seconds:.3f}",
                                                         end=f"{end:.3f}", step="5"))


@pytest.mark.slow(80)
def test_every_dashboard_panel_has_data(stack: dict[str, Any]) -> None:
    prometheus = stack["prometheus"]
    panels = panel_queries()
    assert len(panels) >= 25
    values = {"cluster": ".*", "queue": ".*", "namespace": ".*", "job_name": ".*", "datasource": "prometheus",
              "task": ".*", "__rate_interval": "30s", "exporter_scrape_job": "volcano-exporter",
              "watchdog_scrape_job": "volcano-watchdog"}
    # A panel shows data when one of its queries returns some (a panel of capability, guarantee and
    # allocated still shows with no guarantee set).
    by_panel: dict[tuple[str, str], list[str]] = {}
    for dashboard, panel, expr in panels:
        if (dashboard, panel) not in NO_DATA_EXPECTED and not any(p in expr for p in NO_DATA_PATTERNS):
            by_panel.setdefault((dashboard, panel), []).append(expr)
    # A panel that showed data keeps showing it (shows_data looks 10 minutes back): each round asks again only
    # for the panels still empty, so a round is short and a late panel is seen soon after its data comes.
    # The last is usually "Over-requested runs": the watchdog's waste pass runs every 60 s, and the first one
    # often comes before a finished run's usage is flushed, so it shows after the second, ~120 s in. The
    # deadline leaves a third pass for a busy machine; the loop ends as soon as the data has come.
    empty = {key: " | ".join(exprs) for key, exprs in by_panel.items()}
    started = time.monotonic()
    while True:
        for key in list(empty):
            if any(shows_data(prometheus, substitute_grafana_variables(e, values)) for e in by_panel[key]):
                del empty[key]
        if not empty or time.monotonic() - started > 200:
            break
        time.sleep(1)
    assert not empty, "panels without data:\n" + "\n".join(f"{d} / {p}: {e}" for (d, p), e in empty.items())
    unexplained = [key for key in NO_DATA_EXPECTED if key not in {(d, p) for d, p, _ in panels}]
    assert not unexplained, f"NO_DATA_EXPECTED names panels that do not exist: {unexplained}"


def test_demo_config_generators_are_valid_yaml_for_the_tools(tmp_path: Path) -> None:
    """The Prometheus and Alertmanager configurations the stack writes pass the tools' own checks."""
    import subprocess

    from volcano_monitor.simulator.stack import alertmanager_binary

    prom = tmp_path / "prometheus.yml"
    prom.write_text(yaml.safe_dump(prometheus_config({"x": "127.0.0.1:1"}, short_rules(tmp_path), "127.0.0.1:2")))
    checked = subprocess.run(["promtool", "check", "config", str(prom)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    am = tmp_path / "alertmanager.yml"
    am.write_text(yaml.safe_dump(alertmanager_config("http://127.0.0.1:9747", TOKEN)))
    binary = alertmanager_binary()
    assert binary, "Alertmanager is not installed"
    amtool = re.sub(r"(prometheus-)?alertmanager$", "amtool", binary)
    checked = subprocess.run([amtool, "check-config", str(am)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
