"""Every metric the alert rules and the dashboards read is documented: in docs/metrics.md (generated from
the exporter's and the watchdog's families) or in docs/external-metrics.md (cAdvisor, DCGM,
kube-state-metrics, Prometheus). A renamed metric or a typo would otherwise give a rule that never fires
or a panel that stays empty, silently. The rules' annotation templates run PromQL too: those queries are
checked the same way, and parsed by promtool."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.promql import ROOT, documented_labels, documented_metrics, metric_names, promtool_check, vector_selectors

RULE_FILES = sorted((ROOT / "alerts").glob("*.rules.yml"))
DASHBOARD_DIR = ROOT / "dashboards"
DOCUMENTED = documented_metrics()

# `printf "<PromQL>" args... | query` in an annotation; the PromQL is a Go string with \" escapes.
TEMPLATE_QUERY = re.compile(r'printf\s+"((?:[^"\\]|\\.)*)"[^|}]*\|\s*query')
# label_values(<selector>, label) and query_result(<expr>) in Grafana's query variables.
LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.DOTALL)
QUERY_RESULT = re.compile(r"^\s*query_result\((.*)\)\s*$", re.DOTALL)


def _rules() -> list[dict[str, Any]]:
    return [rule for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def template_queries(text: str) -> list[str]:
    """The PromQL an annotation template runs, with the printf verbs filled in so it parses."""
    queries = []
    for raw in TEMPLATE_QUERY.findall(text):
        query = raw.replace('\\"', '"').replace("\\\\", "\\")
        queries.append(query.replace("%q", '"x"').replace("%s", "x").replace("%%", "%"))
    return queries


def rule_expressions() -> list[tuple[str, str]]:
    """(where, expr) for every rule expression and every query in its annotations."""
    out = []
    for rule in _rules():
        name = rule.get("alert") or rule.get("record")
        out.append((f"{name}: expr", rule["expr"]))
        for key, text in sorted(rule.get("annotations", {}).items()):
            out += [(f"{name}: {key} query", q) for q in template_queries(str(text))]
    return out


def dashboard_expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) for every panel target (panels inside rows too) and every Prometheus query variable."""
    out: list[tuple[str, str]] = []

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            for target in panel.get("targets") or []:
                if isinstance(target.get("expr"), str) and target["expr"].strip():
                    out.append((f"panel {panel.get('title')!r} target {target.get('refId')}", target["expr"]))
            panels(panel.get("panels") or [])

    panels(dashboard.get("panels") or [])
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        match = LABEL_VALUES.match(query or "") or QUERY_RESULT.match(query or "")
        if match:
            out.append((f"variable {variable.get('name')!r}", match.group(1)))
    return out


def undocumented(expressions: list[tuple[str, str]]) -> list[str]:
    return [f"{where}: {name}" for where, expr in expressions for name in sorted(metric_names(expr) - DOCUMENTED)]




# ---- the alert rules --------------------------------------------------------------------------------

def test_there_are_rules_to_check() -> None:
    expressions = rule_expressions()
    assert RULE_FILES and len(expressions) > len(_rules()), "no rule files, or no annotation queries found"


def test_rule_expressions_use_documented_metrics() -> None:
    missing = undocumented(rule_expressions())
    assert not missing, "metrics in docs/metrics.md nor docs/external-metrics.md:\n" + "\n".join(missing)


def test_rule_selectors_usedocumented_labels() -> None:
    """Matchers on volcano-monitor's own metrics name labels those metrics have (a `job=` where `job_name=`
    was meant selects nothing, silently). `cluster` is allowed on every metric: Prometheus external labels
    or the ServiceMonitor's relabelling add it, as the scrape adds `job`, and the annotation queries
    select the alert's cluster with it (issue 32)."""
    documented = documented_labels()
    wrong = []
    for where, expr in rule_expressions():
        for selector in vector_selectors(expr):
            if selector.name in documented:
                for matcher in selector.matchers.matchers:
                    if matcher.name not in documented[selector.name] | {"cluster"}:
                        wrong.append(f"{where}: {selector.name}{{{matcher.name}=...}}")
    assert not wrong, "\n".join(wrong)


def test_annotation_queries_parse_with_promtool() -> None:
    promtool_check([expr for where, expr in rule_expressions() if "query" in where])


def test_template_queries_are_found_and_unescaped() -> None:
    text = ('x{{ with printf "max(a{n=%q,s=\\"failed\\"})" $labels.n | query }}{{ . | first | value }}{{ end }}'
            '{{ printf "%.0f" $value }}')
    assert template_queries(text) == ['max(a{n="x",s="failed"})']


# ---- the dashboards (written elsewhere; checked on whatever JSON is there) -------------------------------

def _dashboard_files() -> list[Path]:
    return sorted(DASHBOARD_DIR.glob("*.json")) if DASHBOARD_DIR.is_dir() else []


def test_dashboard_expressions_use_documented_metrics() -> None:
    """No dashboard yet is no failure here: the dashboards' own tests require them to exist."""
    missing = []
    for path in _dashboard_files():
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        missing += [f"{path.name}: {m}" for m in undocumented(dashboard_expressions(dashboard))]
    assert not missing, "metrics in docs/metrics.md nor docs/external-metrics.md:\n" + "\n".join(missing)


def test_the_dashboard_check_finds_undocumented_metrics() -> None:
    dashboard = {
        "panels": [
            {"type": "stat", "targets": [{"refId": "A", "expr": "sum(volcano_queue_info)"}]},
            {"type": "row", "panels": [
                {"title": "t",
                 "targets": [{"refId": "B", "expr": 'rate(made_up_total{queue=~"$queue"}[$__rate_interval])'}]},
            ]},
        ],
        "templating": {"list": [
            {"type": "query", "name": "queue", "query": {"query": "label_values(volcano_queue_info, queue)"}},
            {"type": "query", "name": "ns", "query": "label_values(not_a_metric{queue=~\"$queue\"}, namespace)"},
        ]},
    }
    assert len(dashboard_expressions(dashboard)) == 4
    assert undocumented(dashboard_expressions(dashboard)) == [
        "panel 't' target B: made_up_total", "variable 'ns': not_a_metric"]


@pytest.mark.parametrize("name", ["volcano_watchdog_notifications_total", "volcano_watchdog_notification_dead_letters",
                                  "volcano_job_status_phase", "container_cpu_usage_seconds_total", "up"])
def test_documented_metrics_include_ours_and_the_external_ones(name: str) -> None:
    assert name in DOCUMENTED


def test_the_exporter_does_not_import_the_watchdog() -> None:
    """exporter.docs documents the watchdog's families but must import them only when rendering."""
    code = ("import sys, exporter, exporter.docs, exporter.app; "
            "sys.exit(sorted(m for m in sys.modules if m == 'watchdog' or m.startswith('watchdog.')) or 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
