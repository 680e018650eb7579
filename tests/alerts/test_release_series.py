"""Which series of the exporter a Volcano release leaves absent or at 0, and which alert rules and
dashboard panels read them: each such use is reviewed here (REVIEWED says why it neither alerts nor
draws as broken on a release that lacks the series), so a new rule or panel on such a series fails
until someone has looked at it.

The release-dependent series are found, not listed by hand: the same cluster (the default scenario
played on v1.16, then copied object by object into each release's API server, which prunes fields and
refuses kinds as that release's CRDs say) is listed by the real exporter once per release v1.9 ... v1.16,
and every series that is present on one release and absent on another, or 0 on one and not on another,
is release-dependent.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.alerts.test_rules import RULE_FILES
from tests.exporter.harness import start_exporter
from tests.exporter.scrape import Series, parse, select
from tests.promql import metric_names
from tests.simtools import wait_for
from volcano_monitor.dashboards.generate import panel_queries
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator.releases import RELEASES, release_store
from volcano_monitor.simulator.runtime import SimulatorThread

# Release-dependent series read by a shipped rule or panel, and why that is safe (with the tests that
# prove it, where there is something to prove).
NOT_FOUND = ("VolcanoExporterNotSynced and the health dashboard's 'Informers not synced' and 'Errors' leave "
             "not_found kinds out; 'Informers by state' draws not_found blue (alerts/tests/health.test.yml, "
             "tests/alerts/test_exporter_releases.py, tests/dashboards/test_health.py)")
REVIEWED = {
    "volcano_exporter_informer_state{state}": NOT_FOUND,
    "volcano_exporter_request_errors_total": "'Errors' leaves out the 404s of not_found kinds "
                                             "(tests/dashboards/test_health.py)",
    "volcano_exporter_objects": "'Objects cached' draws 0 for a kind not served: true, in no failure colour",
    "volcano_exporter_events_total": "'Watch events applied' draws a rate of 0 for a kind not served: true",
    "volcano_exporter_last_event_timestamp_seconds": "'Seconds since the last event' draws no line for a kind "
                                                     "never listed: nothing red, nothing to alert on",
}


def _copy_cluster(source: dict[Any, list[dict[str, Any]]], release: str) -> SimulatorThread:
    """`release`'s API server holding the objects of `source` that it serves, pruned to its schemas."""
    store = release_store(release)
    for rtype, objects in source.items():
        if rtype in store.buckets:
            for obj in objects:
                store.create(rtype, {**obj, "metadata": {k: v for k, v in obj["metadata"].items()
                                                         if k != "resourceVersion"}})
    return SimulatorThread(store=store, bookmark_interval=0.2).start()


def _scrape_settled(exporter: Exporter) -> dict[Series, float]:
    def settled() -> bool:
        states = select(parse(exporter.scrape()), "volcano_exporter_informer_state")
        return {dict(k)["state"] for k in states} <= {"watching", "not_found"}

    wait_for(settled, timeout=20, interval=0.05)
    # The Nodes informer starts only once a HyperNode exists (v1.12+), for topology_fragmented: an optional
    # kind whose 403/404 reads as settled, so its self-metrics alert on no release (exporter/topology.py).
    return {key: value for key, value in parse(exporter.scrape()).items() if ("resource", "nodes") not in key[1]}


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[Series, float]]]:
    played = SimulatorThread(scenario="default", speed=600, auto_tick=False, volcano_release="v1.16").start()
    try:
        deadline = time.monotonic() + 20 * 60 / 600  # 20 scenario minutes: jobs running, pending, failed
        while time.monotonic() < deadline:
            time.sleep(0.1)
            played.tick()
        cluster = {rtype: played.call(played.store.objects, rtype) for rtype in played.store.buckets}
    finally:
        played.stop()
    out = {}
    for release in RELEASES:
        sim = _copy_cluster(cluster, release)
        exporter = start_exporter(sim, tmp_path_factory.mktemp(f"series-{release}"))
        try:
            out[release] = _scrape_settled(exporter)
        finally:
            exporter.stop()
            sim.stop()
    yield out


# Values that differ between two listings of the same objects for reasons other than the release.
TIMING = ("volcano_exporter_scrape_duration_seconds", "volcano_exporter_scrapes_total",
          "volcano_exporter_relists_total")
# Each copy of the cluster gets new UIDs, and a Volcano Job's PodGroup is named after its Job's UID.
NOISE = {("*", "uid"), ("volcano_job_info", "podgroup")}


def _by_family(scrape: dict[Series, float]) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for (name, labels), v in scrape.items():
        if name not in TIMING:
            out.setdefault(name, {})[frozenset((k, x) for k, x in labels
                                               if ("*", k) not in NOISE and (name, k) not in NOISE)] = v
    return out


def _differs(per_release: list[dict[frozenset[tuple[str, str]], float]]) -> bool:
    keys = set().union(*per_release)
    for key in keys:
        values = [series.get(key) for series in per_release]
        if None in values or (any(v == 0 for v in values) and any(v for v in values)):
            return True
    return False


def _only_labels_differ(per_release: list[dict[frozenset[tuple[str, str]], float]], labels: set[str]) -> bool:
    """Whether, without `labels`, the releases have the same series one to one (only those values differ)."""
    projected = [{frozenset(kv for kv in key if kv[0] not in labels): v for key, v in series.items()}
                 for series in per_release]
    return all(len(p) == len(s) for p, s in zip(projected, per_release, strict=True)) and not _differs(projected)


def release_dependent(scrapes: dict[str, dict[Series, float]]) -> set[str]:
    """`name` for a series present on one release and absent on another, or 0 on one and not on another;
    `name{label}` when only that label's value depends on the release (an `_info` attribute)."""
    families = [_by_family(s) for s in scrapes.values()]
    out = set()
    for name in set().union(*families):
        per_release = [f.get(name, {}) for f in families]
        if not _differs(per_release):
            continue
        labels = sorted({k for series in per_release for key in series for k, _ in key})
        explained = next((set(few) for size in (1, 2) for few in itertools.combinations(labels, size)
                          if _only_labels_differ(per_release, set(few))), None)
        out |= {f"{name}{{{label}}}" for label in explained} if explained and all(per_release) else {name}
    return out


def uses() -> dict[str, list[str]]:
    """Release-dependent entry -> the rules and panels (by name) whose expression reads it: `name{label}`
    when the expression reads `name` and names `label` (in a matcher, `by`, `on` or `group_left`)."""
    exprs = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            exprs += [(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for r in group["rules"]]
    exprs += [(f"panel {dashboard} / {panel}", expr) for dashboard, panel, expr in panel_queries()]
    found: dict[str, list[str]] = {}
    for where, expr in exprs:
        words = set(re.findall(r"\w+", expr))
        for name in metric_names(expr):
            found.setdefault(name, []).append(where)
            for label in words:
                found.setdefault(f"{name}{{{label}}}", []).append(where)
    return found


def test_the_comparison_sees_what_releases_differ_in(scrapes: dict[str, dict[Series, float]]) -> None:
    """The newer kinds, the fields releases added and the exporter's view of kinds not served, found."""
    dependent = release_dependent(scrapes)
    assert {"volcano_hypernode_info", "volcano_cronjob_info", "volcano_queue_spec_priority",
            "volcano_podgroup_spec_network_topology_highest_tier_allowed", "volcano_exporter_resource_served",
            "volcano_exporter_informer_state{state}"} <= dependent, sorted(dependent)
    assert {"volcano_queue_info{priority}", "volcano_queue_info{dequeue_strategy}"} <= dependent, sorted(dependent)
    # Where the release does not matter, neither does the comparison: the same Jobs, pods and queues.
    assert not dependent & {"volcano_job_info", "volcano_pod_info", "volcano_queue_info", "volcano_job_status_phase",
                            "volcano_queue_spec_weight", "volcano_podgroup_info"}, sorted(dependent)
    # The gauge the NotSynced alert reads no longer depends on the release.
    assert "volcano_exporter_synced" not in dependent
    assert all(v == 1 for s in scrapes.values() for v in select(s, "volcano_exporter_synced").values())


def test_every_rule_and_panel_on_a_release_dependent_series_is_reviewed(
        scrapes: dict[str, dict[Series, float]]) -> None:
    dependent = release_dependent(scrapes)
    used = uses()
    unreviewed = {name: used[name] for name in dependent & set(used) if name not in REVIEWED}
    assert not unreviewed, f"read by rules/panels, absent or 0 on some Volcano release: {unreviewed}"
    stale = set(REVIEWED) - (dependent & set(used))
    assert not stale, f"REVIEWED names series no rule or panel reads, or that no release changes: {stale}"

