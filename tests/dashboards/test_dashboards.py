"""The committed Grafana dashboards: the generator reproduces them byte for byte, they have the shape
Grafana 11 imports (unique ids, grid positions, the `${datasource}` variable everywhere), and every query
parses with the real promtool and reads only documented metrics with their documented labels."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.test_health import promtool_expr_test
from tests.promql import (
    ROOT,
    documented_labels,
    documented_metrics,
    metric_names,
    promtool_check,
    substitute_grafana_variables,
    vector_selectors,
)
from volcano_monitor.dashboards import generate

DIR = ROOT / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TITLES = {"Volcano overview", "Volcano queue", "Volcano job", "Volcano efficiency and recommendations",
          "volcano-monitor health"}
# Variables each dashboard must offer (title -> names besides `datasource`), and whether multi-valued.
VARIABLES = {
    "Volcano overview": {"cluster": True, "queue": True},
    "Volcano queue": {"cluster": True, "queue": False},
    "Volcano job": {"cluster": True, "namespace": False, "job_name": False},
    "Volcano efficiency and recommendations": {"cluster": True, "queue": True, "namespace": True},
    "volcano-monitor health": {"cluster": True, "exporter_scrape_job": True, "watchdog_scrape_job": True},
}
# The label Prometheus external labels or the chart's ServiceMonitor relabelling add (docs/dashboards.md).
CLUSTER = 'cluster=~"$cluster"'
GROUPING = re.compile(r"\b(by|on|ignoring) ?\(([^)]*)\)")
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__range_s"}
VARIABLE_USE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
RESOURCE_VALUES = {"cpu", "memory", "nvidia_com_gpu", "physical_gpu"}


def _load() -> list[dict[str, Any]]:
    return [json.loads((DIR / name).read_text(encoding="utf-8")) for name in generate.DASHBOARDS]


DASHBOARDS = _load()
IDS = [d["title"] for d in DASHBOARDS]


def _targets(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}




# ---- the generator and the committed files ---------------------------------------------------------


def test_committed_json_is_what_the_generator_writes() -> None:
    for name, content in generate.rendered().items():
        assert (DIR / name).read_text(encoding="utf-8") == content, \
            f"{name}: run `python -m volcano_monitor.dashboards.generate`"


def test_no_stray_dashboard_files() -> None:
    assert {p.name for p in DIR.glob("*.json")} == set(generate.DASHBOARDS)


def test_check_mode_fails_on_a_changed_file_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    for name in generate.DASHBOARDS:
        shutil.copy(DIR / name, tmp_path / name)
    monkeypatch.setattr(generate, "DIRECTORY", tmp_path)
    assert generate.main(["--check"]) == 0
    edited = tmp_path / "volcano-job.json"
    edited.write_text(edited.read_text().replace('"Volcano job"', '"Volcano job (edited)"'))
    assert generate.main(["--check"]) == 1
    assert "volcano-job.json" in capsys.readouterr().err
    assert "(edited)" in edited.read_text()  # --check wrote nothing
    assert generate.main([]) == 0  # regenerating repairs it
    assert generate.main(["--check"]) == 0


# ---- structure -------------------------------------------------------------------------------------


def test_exactly_the_five_dashboards_with_unique_uids() -> None:
    assert {d["title"] for d in DASHBOARDS} == TITLES
    uids = [d["uid"] for d in DASHBOARDS]
    assert len(set(uids)) == len(uids)
    assert all(re.fullmatch(r"[a-z0-9-]{1,40}", uid) for uid in uids)  # Grafana allows at most 40


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_dashboard_shape(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 39  # Grafana 11
    assert {"volcano", "volcano-monitor"} <= set(dashboard["tags"])
    assert dashboard["annotations"]["list"], "Grafana expects annotations.list"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(set(ids)) == len(ids) and all(isinstance(i, int) and i > 0 for i in ids)
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert all(isinstance(pos[k], int) for k in "hwxy"), panel["title"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & area, f"{panel['title']} overlaps another panel"
        cells |= area
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["title"]
        if panel["type"] != "row":
            assert panel.get("targets"), f"{panel['title']} has no query"
            assert panel.get("description"), f"{panel['title']} has no description"


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_targets(dashboard: dict[str, Any]) -> None:
    for panel, target in _targets(dashboard):
        assert target["expr"].strip(), panel["title"]
        assert target["refId"], panel["title"]
        assert target.get("datasource", DATASOURCE) == DATASOURCE, panel["title"]
    for panel in dashboard["panels"]:
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(set(refs)) == len(refs), panel["title"]


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_variables(dashboard: dict[str, Any]) -> None:
    variables = _variables(dashboard)
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    expected = VARIABLES[dashboard["title"]]
    assert set(variables) == {"datasource", *expected}
    for name, multi in expected.items():
        v = variables[name]
        assert v["type"] == "query" and v["datasource"] == DATASOURCE, name
        assert v["query"].startswith("label_values("), name
        assert v.get("multi", False) == multi and v.get("includeAll", False) == multi, name
    # Every variable a query or a variable uses is defined here (or is one of Grafana's built-ins).
    defined = set(variables) | GRAFANA_BUILTINS
    texts = [t["expr"] for _, t in _targets(dashboard)] + [v["query"] for v in variables.values()]
    for text in texts:
        used = {next(g for g in m.groups() if g) for m in VARIABLE_USE.finditer(text)}
        assert used <= defined, f"{text}: undefined {used - defined}"


# ---- the queries -----------------------------------------------------------------------------------


def _all_exprs() -> list[str]:
    exprs = [t["expr"] for d in DASHBOARDS for _, t in _targets(d)]
    for d in DASHBOARDS:  # the series selector inside each label_values(selector, label)
        for v in _variables(d).values():
            if v["type"] == "query":
                match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", v["query"])
                assert match, v["query"]
                exprs.append(match.group(1))
    return exprs


def test_every_expression_parses_with_promtool() -> None:
    promtool_check(_all_exprs())


def test_promtool_check_is_not_a_no_op() -> None:
    with pytest.raises(AssertionError):
        promtool_check(['sum by (queue) (volcano_queue_jobs{queue=~"$queue"}'])


def test_only_documented_metrics_and_labels() -> None:
    known = documented_metrics()
    labels = documented_labels()
    for expr in _all_exprs():
        assert metric_names(expr) <= known, f"{expr}: undocumented {metric_names(expr) - known}"
        for sel in vector_selectors(expr):
            names = {m.name for m in sel.matchers.matchers} - {"cluster"}  # a target label, as job is
            if sel.name in labels:  # ours: only their own labels (never `job`/`instance`)
                assert names <= labels[sel.name], f"{expr}: {sel.name} has no label {names - labels[sel.name]}"
            if sel.name.startswith("volcano_") and not sel.name.startswith("volcano_watchdog_"):
                for m in sel.matchers.matchers:
                    if m.name == "resource":
                        assert set(m.value.split("|")) <= RESOURCE_VALUES, f"{expr}: resource {m.value}"


def test_rates_use_the_rate_interval() -> None:
    for expr in _all_exprs():
        for window in re.findall(r"\[([^\]]*)\]", expr):
            assert window in {"$__rate_interval", "$__range:5m"}, f"{expr}: window [{window}]"


def test_panel_queries_lists_every_target() -> None:
    queries = generate.panel_queries()
    assert len(queries) == sum(len(_targets(d)) for d in DASHBOARDS)
    assert {title for title, _, _ in queries} == TITLES
    by_dashboard = {d["title"]: {(p["title"], t["expr"]) for p, t in _targets(d)} for d in DASHBOARDS}
    for title, panel, expr in queries:
        assert (panel, expr) in by_dashboard[title]


def test_usage_joins_attribute_pods_through_volcano_pod_info() -> None:
    """Every cAdvisor/DCGM/kube-state-metrics series is joined to a Volcano pod series on (namespace, pod)."""
    external = ("container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "DCGM_FI_DEV_GPU_UTIL",
                "kube_pod_container_status_restarts_total", "kube_pod_container_status_last_terminated_reason")
    uses = [e for e in _all_exprs() if metric_names(e) & set(external)]
    assert uses
    for expr in uses:
        assert "on(cluster, namespace, pod)" in expr, expr
        assert metric_names(expr) & {"volcano_pod_info", "volcano_pod_resource_requests"}, expr


# ---- several clusters ------------------------------------------------------------------------------


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_the_cluster_variable_defaults_to_all_which_matches_series_without_the_label(
        dashboard: dict[str, Any]) -> None:
    variables = _variables(dashboard)
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[:2] == ["datasource", "cluster"], "cluster comes first: the others are filtered by it"
    cluster = variables["cluster"]
    assert cluster["query"] == "label_values(volcano_exporter_build_info, cluster)"
    assert cluster["includeAll"] is True and cluster["allValue"] == ".*"
    for name, v in variables.items():  # every other query variable offers the selected clusters' values only
        if v["type"] == "query" and name != "cluster":
            assert CLUSTER in v["query"], v["query"]


def test_every_selector_filters_by_the_cluster_variable() -> None:
    for expr in _all_exprs():
        if expr == "volcano_exporter_build_info":  # the cluster variable's own query
            continue
        for sel in vector_selectors(expr):
            matchers = [m for m in sel.matchers.matchers if m.name == "cluster"]
            assert len(matchers) == 1, f"{expr}: {sel.name} has {len(matchers)} cluster matchers"
        assert expr.count(CLUSTER) == len(vector_selectors(expr)), expr


def test_every_aggregation_and_join_keeps_clusters_apart() -> None:
    """Two clusters' same-named queues, jobs or pods are never summed together or joined to each other:
    every `by (...)` and `on(...)` lists `cluster` (a series without the label has it empty, so one
    cluster without the label groups as before)."""
    for expr in _all_exprs():
        for kind, labels in GROUPING.findall(expr):
            names = {label.strip() for label in labels.split(",")}
            if kind == "ignoring":
                assert "cluster" not in names, expr
            else:
                assert "cluster" in names, f"{expr}: {kind} ({labels})"


def test_links_between_dashboards_keep_the_cluster() -> None:
    for dashboard in DASHBOARDS:
        for panel in dashboard["panels"]:
            for override in panel.get("fieldConfig", {}).get("overrides", []):
                for prop in override["properties"]:
                    if prop["id"] == "links":
                        assert all("${cluster:queryparam}" in link["url"] for link in prop["value"]), panel["title"]


def _panel_query(dashboard: str, panel: str, contains: str, cluster: str) -> str:
    exprs = [e for d, p, e in generate.panel_queries() if d == dashboard and p == panel and contains in e]
    assert len(exprs) == 1, (panel, exprs)
    return substitute_grafana_variables(exprs[0], {"cluster": cluster, "queue": ".*", "namespace": "team",
                                                   "job_name": "train", "__rate_interval": "2m"})


def test_two_clusters_same_names_stay_apart_and_a_cluster_without_the_label_still_shows(tmp_path: Path) -> None:
    """promtool on the panels' own queries: queue `default` and pod `team/train-worker-0` exist in clusters a
    and b and in a Prometheus that adds no label; All shows each once, a selected cluster only its own,
    and the usage join matches each pod's usage to its own cluster's pod (no many-to-many error)."""
    weight = ("Volcano overview", "Queues now", "volcano_queue_spec_weight")
    cpu = ("Volcano job", "Pods", "container_cpu_usage_seconds_total")
    series = []
    for cluster, value in (("a", 1), ("b", 2), ("", 3)):
        label = f'cluster="{cluster}",' if cluster else ""
        pod = f'{label}namespace="team",pod="train-worker-0"'
        series += [
            {"series": f'volcano_queue_spec_weight{{{label}queue="default"}}', "values": f"{value}x10"},
            {"series": f'volcano_pod_info{{{pod},queue="default",job_name="train",task="worker",node="n{value}"}}',
             "values": "1x10"},
            {"series": f'container_cpu_usage_seconds_total{{{pod},container="main"}}', "values": f"0+{60 * value}x10"},
        ]

    def sample(cluster: str, **labels: str | int) -> dict[str, Any]:
        value = labels.pop("value")
        text = ",".join(f'{k}="{v}"' for k, v in {"cluster": cluster, **labels}.items() if v)
        return {"labels": "{" + text + "}", "value": value}

    promtool_expr_test(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": _panel_query(*weight, ".*"), "eval_time": "5m",
         "exp_samples": [sample(c, queue="default", value=v) for c, v in (("a", 1), ("b", 2), ("", 3))]},
        {"expr": _panel_query(*weight, "b"), "eval_time": "5m", "exp_samples": [sample("b", queue="default", value=2)]},
        {"expr": _panel_query(*cpu, ".*"), "eval_time": "5m",
         "exp_samples": [sample(c, pod="train-worker-0", task="worker", node=f"n{v}", value=v)
                         for c, v in (("a", 1), ("b", 2), ("", 3))]},
        {"expr": _panel_query(*cpu, "a"), "eval_time": "5m",
         "exp_samples": [sample("a", pod="train-worker-0", task="worker", node="n1", value=1)]},
    ]}])
