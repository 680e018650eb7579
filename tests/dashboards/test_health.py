"""The health dashboard on a Volcano release that lacks some CRDs (v1.9: no CronJob, no HyperNode, JobFlow
chart not installed): the panels' own queries, from the committed JSON, evaluated by the real promtool.
Kinds the API server does not serve are neither counted as not synced nor drawn as request errors, from
a current exporter (synced 1) or one from before (synced 0); a forbidden required kind and a failing
served kind still are. Informer states keep fixed colours, not_found a neutral one."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.promql import ROOT, substitute_grafana_variables
from volcano_monitor.core.kube import informer as inf
from volcano_monitor.dashboards.generate import panel_queries

DASHBOARD = "volcano-monitor health"
NOT_SERVED = ("cronjobs.batch.volcano.sh", "hypernodes.topology.volcano.sh", "jobflows.flow.volcano.sh")
REQUIRED = ("pods", "jobs.batch.volcano.sh", "podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh")
REPLICAS = {"old": 'instance="10.1.0.5:9746",pod="volcano-exporter-0"',  # synced 0 where not_found
            "new": 'instance="10.1.0.6:9746",pod="volcano-exporter-1"'}
TARGET = 'job="volcano-exporter",namespace="monitoring"'


def query(panel: str, contains: str = "") -> str:
    exprs = [e for d, p, e in panel_queries() if d == DASHBOARD and p == panel and contains in e]
    assert len(exprs) == 1, (panel, exprs)
    return substitute_grafana_variables(exprs[0], {"cluster": ".*"})  # All: series without the label


def exporter_series(pods_forbidden: bool) -> list[dict[str, str]]:
    """Both replicas on v1.9 for 30 minutes; request error counters grow by 60 a minute (rate 1/s)."""
    out = []

    def add(name: str, labels: str, values: str) -> None:
        out.append({"series": f"{name}{{{labels},{TARGET}}}", "values": values})

    for style, replica in REPLICAS.items():
        for resource in NOT_SERVED:
            r = f'resource="{resource}",{replica}'
            add("volcano_exporter_synced", r, "0x30" if style == "old" else "1x30")
            add("volcano_exporter_informer_state", f'{r},state="not_found"', "1x30")
            add("volcano_exporter_request_errors_total", f'{r},code="404"', "0+60x30")
        for resource in REQUIRED:
            r = f'resource="{resource}",{replica}'
            broken = pods_forbidden and style == "new" and resource == "pods"
            add("volcano_exporter_synced", r, "0x30" if broken else "1x30")
            add("volcano_exporter_informer_state", f'{r},state="{"forbidden" if broken else "watching"}"', "1x30")
            if broken:
                add("volcano_exporter_request_errors_total", f'{r},code="403"', "0+60x30")
    if pods_forbidden:  # and the Jobs' watch keeps failing on the old replica (served: counted)
        add("volcano_exporter_request_errors_total", f'resource="jobs.batch.volcano.sh",{REPLICAS["old"]},code="500"',
            "0+60x30")
    return out


def promtool_expr_test(tmp_path: Path, tests: list[dict[str, Any]]) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (Debian package prometheus)"
    rules = tmp_path / "none.rules.yml"
    rules.write_text("groups: []\n")
    path = tmp_path / "health.test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests},
                                   sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_kinds_not_served_are_not_drawn_as_broken(tmp_path: Path) -> None:
    not_synced = query("Informers not synced")
    request_errors = query("Errors", "request_errors_total")
    promtool_expr_test(tmp_path, [
        {"name": "v1.9, healthy", "interval": "1m", "input_series": exporter_series(pods_forbidden=False),
         "promql_expr_test": [{"expr": not_synced, "eval_time": "20m", "exp_samples": []},
                              {"expr": request_errors, "eval_time": "20m", "exp_samples": []}]},
        {"name": "v1.9, pods forbidden, Jobs failing", "interval": "1m",
         "input_series": exporter_series(pods_forbidden=True),
         "promql_expr_test": [
             {"expr": not_synced, "eval_time": "20m", "exp_samples": [{"labels": "{}", "value": 1}]},
             {"expr": request_errors, "eval_time": "20m", "exp_samples": [
                 {"labels": '{resource="pods",code="403"}', "value": 1},
                 {"labels": '{resource="jobs.batch.volcano.sh",code="500"}', "value": 1}]}]},
    ])


def test_informer_states_have_fixed_colours_not_found_neutral() -> None:
    model = json.loads((ROOT / "dashboards" / "volcano-monitor-health.json").read_text())
    panel = next(p for p in model["panels"] if p["title"] == "Informers by state")
    colours = {o["matcher"]["options"]: prop["value"]["fixedColor"] for o in panel["fieldConfig"]["overrides"]
               for prop in o["properties"] if prop["id"] == "color"}
    states = {inf.STARTING, inf.LISTING, inf.WATCHING, inf.BACKOFF, inf.FORBIDDEN, inf.NOT_FOUND, inf.STOPPED}
    assert set(colours) == states
    assert colours[inf.WATCHING] == "green" and colours[inf.FORBIDDEN] == "red"
    assert colours[inf.NOT_FOUND] not in {"red", "orange", "yellow"}
