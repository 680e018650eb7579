"""deploy/manifests/ is a fresh render of the chart, and the chart's files/ copies are current; the two
tools behave as documented (tested on temporary directories, never on alerts/ or dashboards/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.chart import NAMESPACE, ROOT

RENDER = ROOT / "deploy" / "tools" / "render-manifests.py"
SYNC = ROOT / "deploy" / "tools" / "sync-chart-files.py"
MANIFESTS = ROOT / "deploy" / "manifests"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)


def test_plain_manifests_equal_a_fresh_render() -> None:
    done = run(str(RENDER), "--check")
    assert done.returncode == 0, done.stderr


def test_plain_manifests_pass_kubernetes_validate_strict() -> None:
    """Every object but the Prometheus Operator kinds (no schema there: see test_chart.py) validates."""
    validate = Path(sys.executable).with_name("kubernetes-validate")
    for path in sorted(MANIFESTS.glob("*.yaml")):
        done = subprocess.run([str(validate), "--strict", "-k", "1.25.0", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        warnings = [line for line in done.stdout.splitlines() if not line.startswith("INFO")]
        assert all("monitoring.coreos.com" in line for line in warnings), warnings


def test_chart_files_are_current_copies_of_alerts_and_dashboards() -> None:
    done = run(str(SYNC), "--check")
    assert done.returncode == 0, done.stderr


def test_plain_manifests_are_namespaced_and_split_by_crd_need() -> None:
    files = {path.name: list(yaml.safe_load_all(path.read_text())) for path in MANIFESTS.glob("*.yaml")}
    assert set(files) == {"volcano-monitor.yaml", "volcano-monitor-postgres.yaml",
                          "volcano-monitor-prometheus-operator.yaml"}
    for name, docs in files.items():
        docs = [doc for doc in docs if doc]
        operator = name.endswith("-prometheus-operator.yaml")
        if not operator:
            assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
        objects = docs if operator else docs[1:]
        assert all(doc["apiVersion"].startswith("monitoring.coreos.com/") == operator for doc in objects)
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]
    kinds = {doc["kind"] for doc in files["volcano-monitor-postgres.yaml"] if doc}
    assert "StatefulSet" in kinds and "PersistentVolumeClaim" not in kinds
    assert {doc["kind"] for doc in files["volcano-monitor-prometheus-operator.yaml"] if doc} >= {"ServiceMonitor"}


def test_sync_copies_removes_stale_copies_and_checks(tmp_path: Path) -> None:
    repo, chart = tmp_path / "repo", tmp_path / "chart"
    (repo / "alerts" / "tests").mkdir(parents=True)
    (repo / "alerts" / "a.rules.yml").write_text("groups: []\n")
    (repo / "alerts" / "tests" / "a_test.yml").write_text("not copied\n")
    (repo / "alerts" / "notes.md").write_text("not copied\n")
    (chart / "files" / "dashboards").mkdir(parents=True)
    (chart / "files" / "dashboards" / "gone.json").write_text("{}")  # its source does not exist
    where = ("--repo", str(repo), "--chart", str(chart))

    check = run(str(SYNC), "--check", *where)
    assert check.returncode == 1
    assert "missing" in check.stderr and "a.rules.yml" in check.stderr and "stale" in check.stderr
    assert not (chart / "files" / "alerts").exists()  # --check changes nothing

    assert run(str(SYNC), *where).returncode == 0  # no dashboards/ at all: nothing to copy, not an error
    assert sorted(p.name for p in (chart / "files").rglob("*") if p.is_file()) == ["a.rules.yml"]
    assert run(str(SYNC), "--check", *where).returncode == 0

    (repo / "alerts" / "a.rules.yml").write_text("groups: [changed]\n")
    outdated = run(str(SYNC), "--check", *where)
    assert outdated.returncode == 1 and "outdated" in outdated.stderr
