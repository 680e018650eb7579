"""Helpers of the chart tests: the real helm binary, renders parsed into objects, and a copy of the chart
with fixture rule and dashboard files (never written into the repository's alerts/ or dashboards/)."""

from __future__ import annotations

import base64
import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "volcano-monitor"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "volcano-monitor"
NAMESPACE = "volcano-monitor"

FIXTURE_RULES = """\
# A fixture rule file, shaped like alerts/*.rules.yml.
groups:
  - name: volcano-fixture
    rules:
      - alert: VolcanoFixtureDown
        expr: up{job="volcano-exporter"} == 0
        for: 5m
        labels:
          severity: critical
        annotations:
          summary: "{{ $labels.pod }} is down"
          description: |
            Two lines,
            kept as they are.
      - record: volcano:fixture_jobs:sum
        expr: sum by (queue) (volcano_queue_jobs)
"""
FIXTURE_DASHBOARD = '{\n  "title": "Volcano fixture",\n  "uid": "volcano-fixture",\n  "panels": []\n}\n'


def helm() -> str:
    """The helm binary: .tools/bin/helm (deploy/tools/fetch-helm.sh), else PATH. Missing helm fails."""
    local = ROOT / ".tools" / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("helm")
    if found is None:
        pytest.fail("helm v3 is needed: make test fetches it (deploy/tools/fetch-helm.sh)", pytrace=False)
    return found


def template_command(chart: Path = CHART, values: tuple[str, ...] = (), sets: tuple[str, ...] = (),
                     release: str = RELEASE) -> list[str]:
    command = [helm(), "template", release, str(chart), "--namespace", NAMESPACE]
    for path in values:
        command += ["--values", path]
    for assignment in sets:
        command += ["--set", assignment]
    return command


@functools.cache
def render_text(chart: Path = CHART, values: tuple[str, ...] = (), sets: tuple[str, ...] = (),
                release: str = RELEASE) -> str:
    done = subprocess.run(template_command(chart, values, sets, release), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(chart: Path = CHART, values: tuple[str, ...] = (), sets: tuple[str, ...] = (),
           release: str = RELEASE) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render_text(chart, values, sets, release)) if doc]


def render_error(*sets: str, chart: Path = CHART) -> str:
    """helm's error for a render that must fail."""
    done = subprocess.run(template_command(chart, (), sets), capture_output=True, text=True)
    assert done.returncode != 0, f"rendered although it should have failed: {sets}"
    return done.stderr


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [doc for doc in of_kind(docs, kind) if doc["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} named *{name_suffix}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")]


def secret_value(docs: list[dict[str, Any]], name: str, key: str) -> str:
    secret = next(doc for doc in of_kind(docs, "Secret") if doc["metadata"]["name"] == name)
    return base64.b64decode(secret["data"][key]).decode()


def component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["labels"]["app.kubernetes.io/component"])


def chart_copy(tmp: Path, rules: dict[str, str] | None = None, dashboards: dict[str, str] | None = None) -> Path:
    """The chart copied under `tmp`, its files/ holding exactly the given rule files and dashboards."""
    chart = tmp / "volcano-monitor"
    shutil.copytree(CHART, chart)
    for sub, files in (("alerts", rules or {}), ("dashboards", dashboards or {})):
        target = chart / "files" / sub
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name, text in files.items():
            (target / name).write_text(text)
    return chart
