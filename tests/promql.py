"""PromQL helpers shared by the dashboard, alert-rule and end-to-end tests: which metrics an
expression reads, Grafana variables replaced so Prometheus tools can parse the expression, and a
parse check by the real `promtool` (the parser users' Prometheus runs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parent.parent

# Grafana's built-in interval variables, and what a parse check may put in their place.
_GRAFANA_BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__range_s": "3600"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def substitute_grafana_variables(expr: str, values: dict[str, str] | None = None) -> str:
    """`expr` with Grafana variables ($var, ${var}, ${var:fmt}, [[var]]) replaced: built-in intervals by
    durations, others by `values` or by `.*`-safe placeholders (`x`), so the result parses."""
    values = values or {}

    def replace(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name in values:
            return values[name]
        return _GRAFANA_BUILTINS.get(name, "x")

    return _VARIABLE.sub(replace, expr)


def _selectors(node: Any, out: list[Any]) -> list[Any]:
    if isinstance(node, promql_parser.VectorSelector):
        out.append(node)
        return out
    for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):  # range selectors, subqueries, calls too
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, str | int | float):
            _selectors(child, out)
    for arg in getattr(node, "args", None) or ():
        _selectors(arg, out)
    return out


def vector_selectors(expr: str) -> list[Any]:
    """Every vector selector of `expr` (Grafana variables substituted first)."""
    return _selectors(promql_parser.parse(substitute_grafana_variables(expr)), [])


def metric_names(expr: str) -> set[str]:
    """Names of the metrics `expr` selects (Grafana variables are substituted first)."""
    out: set[str] = set()
    for node in vector_selectors(expr):
        if node.name:
            out.add(node.name)
        else:  # {__name__="..."}
            out.update(m.value for m in node.matchers.matchers if m.name == "__name__")
    return out


def promtool_check(exprs: list[str]) -> None:
    """Parse every expression with the real promtool (as recording rules); raises AssertionError with
    promtool's message when one does not parse."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (Debian package prometheus)"
    rules = [{"record": f"check:expr_{i}", "expr": substitute_grafana_variables(e)} for i, e in enumerate(exprs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "exprs.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}))
        result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def documented_metrics() -> set[str]:
    """Every metric name in docs/metrics.md (ours) and docs/external-metrics.md (cAdvisor, DCGM,
    kube-state-metrics, Prometheus): the names dashboards and rules may use."""
    names: set[str] = set()
    for doc in ("docs/metrics.md", "docs/external-metrics.md"):
        names |= set(re.findall(r"`([a-zA-Z_:][a-zA-Z0-9_:]*)`", (ROOT / doc).read_text()))
    return names


def documented_labels() -> dict[str, set[str]]:
    """Metric -> its label names, from the tables of docs/metrics.md (ours, the watchdog's included)."""
    labels: dict[str, set[str]] = {}
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and re.fullmatch(r"`\w+`", cells[1]):
            labels[cells[1].strip("`")] = set(re.findall(r"`(\w+)`", cells[3]))
    return labels
