"""The shipped VolcanoExporterNotSynced rule on what the real exporter serves for a Volcano release.

The exporter command runs against the simulator serving one release's CRDs (as `volcano-sim
--volcano-release v1.12`): kinds the release lacks answer 404. Once every informer has its answer, its
/metrics is scraped over HTTP, the `volcano_exporter_synced` and `volcano_exporter_informer_state`
series get the target labels Prometheus adds (job, namespace, instance, pod), and promtool evaluates
the real rule file on them held for 30 minutes, twice the rule's `for:`: no alert. A control case on the
same input, with one served kind turned into one stuck listing, must alert, so the harness can fail.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.alerts.test_rules import BY_NAME, RULE_FILES, _run
from tests.exporter.scrape import Series, parse, select
from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from volcano_monitor.simulator.releases import RELEASES
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.simulator.stack import Stack

ALERT = "VolcanoExporterNotSynced"
TARGET = {"job": "volcano-exporter", "namespace": "monitoring", "pod": "volcano-exporter-0"}
FAMILIES = ("volcano_exporter_synced", "volcano_exporter_informer_state")
SETTLED = {"watching", "not_found"}  # a healthy exporter's informers once each has its answer
ORDER = list(RELEASES)


def missing_kinds(release: str) -> set[str]:
    """The kinds the simulator's `release` does not serve (releases.py): their CRD is not shipped."""
    missing = set()
    if ORDER.index(release) < ORDER.index("v1.12"):
        missing.add("hypernodes.topology.volcano.sh")
    if ORDER.index(release) < ORDER.index("v1.13"):
        missing.add("cronjobs.batch.volcano.sh")
    return missing


@pytest.fixture(scope="module", params=["v1.9", "v1.12", "v1.16"])
def scraped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[str, dict[Series, float], str]]:
    """(release, the exporter's settled scrape, its instance) of the exporter command on that release."""
    release = request.param
    tmp_path = tmp_path_factory.mktemp(f"exporter-{release}")
    procs = Stack(tmp_path / "logs")
    with SimulatorThread(scenario="default", speed=600, tick_interval=0.05, volcano_release=release) as sim:
        kubeconfig = tmp_path / "kubeconfig"
        write_kubeconfig(kubeconfig, sim.url)
        instance = f"127.0.0.1:{free_port()}"
        try:
            procs.start_python("exporter", "volcano_monitor.exporter.cli", "--kubeconfig", str(kubeconfig),
                               "--listen", instance, ready_url=f"http://{instance}/readyz", timeout=30)

            def scrape() -> dict[Series, float]:
                with urllib.request.urlopen(f"http://{instance}/metrics", timeout=5) as response:
                    return parse(response.read())

            def settled() -> bool:
                states = select(scrape(), "volcano_exporter_informer_state")
                return bool(states) and {dict(k)["state"] for k in states} <= SETTLED

            wait_for(settled, timeout=20, interval=0.1)
            yield release, scrape(), instance
        finally:
            codes = procs.stop()
    assert codes == {"exporter": 0}, codes


def input_series(samples: dict[Series, float], instance: str) -> list[dict[str, str]]:
    """The scrape's sync series as promtool input, with the target labels, held for 30 minutes."""
    out = []
    for (name, labels), value in sorted(samples.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))):
        if name not in FAMILIES:
            continue
        all_labels = {**dict(labels), **TARGET, "instance": instance}
        text = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(all_labels.items()))
        out.append({"series": f"{name}{{{text}}}", "values": f"{value:g}x30"})
    return out


def stuck(series: list[dict[str, str]], resource: str) -> list[dict[str, str]]:
    """`series` with `resource` (served and listed) turned into a replica stuck listing it."""
    out = []
    for item in series:
        if f'resource="{resource}"' not in item["series"]:
            out.append(item)
        elif item["series"].startswith("volcano_exporter_synced{"):
            out.append({**item, "values": "0x30"})
        else:
            out.append({**item, "series": item["series"].replace('state="watching"', 'state="listing"')})
    return out


def promtool_test(tmp_path: Path, quiet: list[dict[str, str]], loud: list[dict[str, str]],
                  loud_resource: str) -> subprocess.CompletedProcess[str]:
    annotations = BY_NAME[ALERT]["annotations"]
    assert "{{" in annotations["summary"]  # the expected texts below are its rendering for loud_resource
    expected = [{"exp_labels": {"severity": "warning", "job": TARGET["job"], "namespace": TARGET["namespace"],
                                "resource": loud_resource},
                 "exp_annotations": {
                     "summary": f"The exporter has not listed {loud_resource} for 15 minutes",
                     "description": f"1 exporter replica(s) in namespace {TARGET['namespace']} have not completed "
                                    f"the first full list of {loud_resource} in 15 minutes (informer state: "
                                    "listing). Its series for that resource are missing or incomplete.",
                     "runbook_url": annotations["runbook_url"]}}]
    doc: dict[str, Any] = {
        "rule_files": [str(p) for p in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [
            {"name": "the exporter's own series", "interval": "1m", "input_series": quiet,
             "alert_rule_test": [{"eval_time": t, "alertname": ALERT, "exp_alerts": []}
                                 for t in ("16m", "20m", "29m")]},
            {"name": "control: a served kind stuck listing", "interval": "1m", "input_series": loud,
             "alert_rule_test": [{"eval_time": "14m", "alertname": ALERT, "exp_alerts": []},
                                 {"eval_time": "16m", "alertname": ALERT, "exp_alerts": expected},
                                 {"eval_time": "29m", "alertname": ALERT, "exp_alerts": expected}]},
        ]}
    path = tmp_path / "exporter-release.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return _run("test", "rules", str(path))


def test_the_exporter_of_each_release_never_fires_not_synced(
        scraped: tuple[str, dict[Series, float], str], tmp_path: Path) -> None:
    release, samples, instance = scraped
    states = {dict(k)["resource"]: dict(k)["state"]
              for k, v in select(samples, "volcano_exporter_informer_state").items() if v == 1}
    # The input holds what used to fire: kinds this release does not serve, not_found.
    assert {r for r, s in states.items() if s == "not_found"} == missing_kinds(release)
    assert states["jobs.batch.volcano.sh"] == "watching" and states["pods"] == "watching"
    series = input_series(samples, instance)
    assert len(series) == 2 * len(states) >= 2 * 8
    result = promtool_test(tmp_path, series, stuck(series, "jobs.batch.volcano.sh"), "jobs.batch.volcano.sh")
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_before_the_gauge_change_not_found_kinds_do_not_fire_either(
        scraped: tuple[str, dict[Series, float], str], tmp_path: Path) -> None:
    """An exporter from before synced counted settled kinds read 0 for them: the rule ignores not_found."""
    release, samples, instance = scraped
    series = input_series(samples, instance)
    missing = missing_kinds(release)
    old = [{**item, "values": "0x30"} if item["series"].startswith("volcano_exporter_synced{")
           and any(f'resource="{r}"' in item["series"] for r in missing) else item for item in series]
    assert (old != series) == bool(missing)
    result = promtool_test(tmp_path, old, stuck(old, "pods"), "pods")
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
