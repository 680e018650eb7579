"""kube-state-metrics' cardinality knobs (exporter/cardinality.py): family allow/deny lists, Kubernetes labels
copied onto the info series, and the per-kind object cap with its self-metric."""

from __future__ import annotations

import gzip
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.exporter import objects
from tests.exporter.harness import start_exporter
from tests.exporter.test_prometheus import parse_text
from tests.simtools import FakeClock
from volcano_monitor.core.model import parse_job, parse_pod, parse_queue
from volcano_monitor.exporter.app import job_transform, pod_transform
from volcano_monitor.exporter.cardinality import (
    LabelsAllowlist,
    ObjectCaps,
    Options,
    family_filter,
    labels_allowlist,
    max_objects,
    prometheus_labels,
)
from volcano_monitor.exporter.cli import parse_args
from volcano_monitor.exporter.families import pod as pod_families
from volcano_monitor.exporter.store import ExporterStore
from volcano_monitor.simulator.runtime import SimulatorThread

Sample = tuple[str, dict[str, str], float]


def scrape(store: ExporterStore) -> list[Sample]:
    out: list[bytes] = []
    store.write(out)
    return parse_text(b"".join(out).decode())


def names(store: ExporterStore) -> set[str]:
    return {s[0] for s in scrape(store)}


def pod(name: str, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    raw = objects.volcano_pod()
    raw["metadata"]["name"] = name
    raw["metadata"]["uid"] = f"uid-{name}"
    if labels is not None:
        raw["metadata"]["labels"] = {**raw["metadata"]["labels"], **labels}
    return raw


def filled(options: Options) -> ExporterStore:
    store = ExporterStore(options=options)
    store.on_queue("ADDED", parse_queue(objects.full_queue()))
    store.on_job("ADDED", job_transform(options)(objects.full_job()))
    store.on_pod("ADDED", pod_transform(options, compat=store.compat)(pod("a")))
    return store


# ---- --metric-allowlist / --metric-denylist -------------------------------------------------------------

def test_denied_families_are_neither_served_nor_kept() -> None:
    everything = names(filled(Options()))
    store = filled(Options(families=family_filter("", "volcano_pod_resource_requests, volcano_job_.*_seconds")))
    served = names(store)
    assert "volcano_pod_resource_requests" not in served and "volcano_pod_info" in served
    assert not {n for n in served if n.startswith("volcano_job_") and n.endswith("_seconds")}
    assert "volcano_job_info" in served
    assert everything - served == {"volcano_pod_resource_requests", "volcano_job_created_timestamp_seconds",
                                   "volcano_job_start_time_seconds", "volcano_job_wait_duration_seconds"}
    # Nothing held for them: the denied family's rows stay empty.
    index = pod_families.FAMILIES.index(pod_families.REQUESTS)
    assert store.pods.count(index) == 0 and store.pods.count(0) > 0


class Refuses:
    """Stands in for a family or a render function that must not be called."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} called for a denied family")

    def __call__(self, *args: Any) -> Any:
        raise AssertionError("rendered a kind whose families are all denied")


def test_denied_families_are_not_even_formatted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_families, "REQUESTS", Refuses())
    monkeypatch.setattr("volcano_monitor.exporter.store.job_families.render", Refuses())
    options = Options(families=family_filter("volcano_pod_info,volcano_pod_status_phase,volcano_queue_jobs", ""))
    store = filled(options)
    assert names(store) == {"volcano_pod_info", "volcano_pod_status_phase", "volcano_queue_jobs"}


def test_gzip_scrapes_serve_the_same_families() -> None:
    """Prometheus asks for gzip: the cached members (exporter/rows.py) obey the lists too."""
    options = Options(compat_ksm_fork=True, families=family_filter("", "volcano_pod_resource_requests,.*_limits"),
                      labels=labels_allowlist("pods=[team]"))
    store = filled(options)
    store.on_pod("ADDED", pod_transform(options, compat=True)(pod("b", {"team": "x"})))
    plain = b"".join(store.chunks())
    assert gzip.decompress(store.gzip()) == plain
    assert b"volcano_pod_resource_requests" not in plain and b"kube_pod_volcano_container_resource_limits" not in plain
    assert b'label_team="x"' in plain and b"kube_pod_volcano_container_resource_requests" in plain


def test_allowlist_is_anchored_and_takes_exact_names_and_regexes() -> None:
    store = filled(Options(families=family_filter("volcano_pod_info,volcano_queue_spec_.*,volcano_job", "")))
    assert names(store) == {"volcano_pod_info", "volcano_queue_spec_weight", "volcano_queue_spec_priority",
                            "volcano_queue_spec_capability", "volcano_queue_spec_guarantee",
                            "volcano_queue_spec_deserved"}  # no volcano_job_*


def test_derived_and_counted_families_obey_the_lists() -> None:
    denied = ("volcano_queue_pod_requests", "volcano_queue_jobs", "volcano_queue_status_podgroups")
    assert set(denied) <= names(filled(Options()))
    assert not set(denied) & names(filled(Options(families=family_filter("", ",".join(denied)))))


def test_denying_a_kinds_first_family_keeps_tracking_its_objects() -> None:
    """The cap and the queue list rely on knowing the objects even when their info family is denied."""
    options = Options(families=family_filter("", "volcano_pod_info,volcano_queue_info"), max_objects={"pods": 1})
    store = filled(options)
    store.on_pod("ADDED", parse_pod(pod("b")))
    assert len(store.pods) == 1 and store.caps.dropped["pods"] == 1
    assert "volcano_queue_status_podgroups" in names(store)  # the queue is still known
    store.on_pod("DELETED", parse_pod(pod("a")))
    assert len(store.pods) == 0


@pytest.mark.parametrize(("allow", "deny", "message"), [
    ("volcano_pod_info", "volcano_job_info", "mutually exclusive"),
    ("volcano_pod_(", "", "not a valid regular expression"),
    ("", "[z-a]", "not a valid regular expression"),
    (" , ", "", "no family named"),
])
def test_bad_family_lists_are_clear_errors(allow: str, deny: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        family_filter(allow, deny)


def test_unmatched_patterns_are_reported() -> None:
    known = [f.name for f in ExporterStore().families()]
    assert family_filter("volcano_pod_info,volcano_typo", "").unmatched(known) == ["volcano_typo"]
    assert family_filter("", "volcano_job_.*").unmatched(known) == []


# ---- --metric-labels-allowlist ---------------------------------------------------------------------------

def test_labels_allowlist_syntax() -> None:
    parsed = labels_allowlist("pods=[team, app.kubernetes.io/name],jobs=[*]")
    assert parsed.kinds == {"pods": ("team", "app.kubernetes.io/name"), "jobs": None}
    assert labels_allowlist("").kinds == {}


@pytest.mark.parametrize(("text", "message"), [
    ("pods=team", "cannot parse"), ("pods=[team", "cannot parse"), ("nodes=[a]", "unknown kind"),
    ("pods=[]", "no label named"), ("pods=[a] jobs=[b]", "cannot parse"),
])
def test_bad_labels_allowlist_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        labels_allowlist(text)


def test_label_names_are_sanitized_and_conflicts_suffixed_like_kube_state_metrics() -> None:
    assert prometheus_labels({"app.kubernetes.io/name": "x", "team": "t"}) == (
        ("label_app_kubernetes_io_name", "x"), ("label_team", "t"))
    # Sorted keys "a-b" < "a.b" < "a_b" all sanitize to label_a_b: each gets _conflictN in that order.
    assert prometheus_labels({"a_b": "3", "a.b": "2", "a-b": "1", "c": "4"}) == (
        ("label_a_b_conflict1", "1"), ("label_a_b_conflict2", "2"), ("label_a_b_conflict3", "3"), ("label_c", "4"))


def test_chosen_labels_land_on_the_info_series_only() -> None:
    options = Options(labels=labels_allowlist("pods=[team,app.kubernetes.io/name,missing],jobs=[*]"))
    store = ExporterStore(options=options)
    raw_pod = pod("a", {"team": 'vision "core"', "app.kubernetes.io/name": "trainer", "other": "x"})
    store.on_pod("ADDED", pod_transform(options, compat=False)(raw_pod))
    raw_job = objects.full_job()
    raw_job["metadata"]["labels"] = {"owner": "ana", "app/x": "y"}
    store.on_job("ADDED", job_transform(options)(raw_job))
    samples = scrape(store)
    info = next(s[1] for s in samples if s[0] == "volcano_pod_info")
    assert info["label_team"] == 'vision "core"' and info["label_app_kubernetes_io_name"] == "trainer"
    assert "label_other" not in info and "label_missing" not in info
    job_info = next(s[1] for s in samples if s[0] == "volcano_job_info")
    assert (job_info["label_owner"], job_info["label_app_x"]) == ("ana", "y")
    assert not [s for s in samples if s[0] not in ("volcano_pod_info", "volcano_job_info")
                and any(k.startswith("label_") for k in s[1])]


def test_a_label_change_alone_rerenders_the_pod() -> None:
    options = Options(labels=labels_allowlist("pods=[team]"))
    store = ExporterStore(options=options)
    view = pod_transform(options, compat=False)
    store.on_pod("ADDED", view(pod("a", {"team": "one"})))
    store.on_pod("MODIFIED", view(pod("a", {"team": "two"})))
    assert next(s[1] for s in scrape(store) if s[0] == "volcano_pod_info")["label_team"] == "two"


@pytest.mark.parametrize("labels", [{"team": 5}, ["team"], "team=a", None])
def test_malformed_labels_are_skipped(labels: Any) -> None:
    raw = pod("a")
    raw["metadata"]["labels"] = labels
    assert LabelsAllowlist({"pods": None}).select("pods", raw) == ()
    store = ExporterStore(options=Options(labels=LabelsAllowlist({"pods": None})))
    store.on_pod("ADDED", pod_transform(store.options, compat=False)(raw))
    assert "volcano_pod_info" in names(store)


# ---- --max-objects ---------------------------------------------------------------------------------------

def test_max_objects_syntax() -> None:
    assert max_objects("") == {}
    assert max_objects("500") == {"jobs": 500, "podgroups": 500, "pods": 500, "queues": 500, "cronjobs": 500,
                                  "hypernodes": 500, "jobflows": 500}
    assert max_objects("pods=100000, jobs=10") == {"pods": 100000, "jobs": 10}
    for bad, message in (("0", "positive"), ("pods=x", "positive"), ("nodes=3", "KIND=N"), ("pods", "positive")):
        with pytest.raises(ValueError, match=message):
            max_objects(bad)


def test_cap_drops_counts_once_logs_and_readmits(caplog: pytest.LogCaptureFixture) -> None:
    store = ExporterStore(options=Options(max_objects={"pods": 2}))
    store.caps = ObjectCaps({"pods": 2}, clock=FakeClock(0.0))
    caplog.set_level(logging.WARNING, "volcano-exporter")
    for name in "abc":
        store.on_pod("ADDED", parse_pod(pod(name)))
    store.on_pod("MODIFIED", parse_pod(pod("c")))  # the same refused pod again: counted once
    store.on_pod("ADDED", parse_pod(pod("d")))
    pods = {s[1]["pod"] for s in scrape(store) if s[0] == "volcano_pod_info"}
    assert pods == {"a", "b"}
    assert store.caps.dropped["pods"] == 2 and store.caps.refused("pods") == 2
    assert len([r for r in caplog.records if "--max-objects" in r.getMessage()]) == 1  # at most once a minute
    assert "2 pods have series" in caplog.records[0].getMessage()
    running = [s for s in scrape(store) if s[0] == "volcano_queue_pod_requests" and s[1]["resource"] == "cpu"]
    assert running[0][2] == 8  # two 4-core pods: refused pods are left out of the sums
    store.on_pod("DELETED", parse_pod(pod("a")))
    store.on_pod("MODIFIED", parse_pod(pod("c")))  # under the cap again: admitted at its next change
    pods = {s[1]["pod"] for s in scrape(store) if s[0] == "volcano_pod_info"}
    assert pods == {"b", "c"} and store.caps.refused("pods") == 1 and store.caps.dropped["pods"] == 2


def test_cap_applies_per_kind() -> None:
    store = ExporterStore(options=Options(max_objects={"jobs": 1}))
    for name in ("x", "y"):
        raw = objects.full_job()
        raw["metadata"]["name"] = name
        store.on_job("ADDED", parse_job(raw))
        store.on_pod("ADDED", parse_pod(pod(name)))
    assert len(store.jobs) == 1 and len(store.pods) == 2
    assert store.caps.dropped == {"jobs": 1, "podgroups": 0, "pods": 0, "queues": 0, "cronjobs": 0, "hypernodes": 0,
                                  "jobflows": 0}


def test_dropped_objects_self_metric_from_a_running_exporter(tmp_path: Path) -> None:
    # The cluster holds still while the exporter runs: the counter counts every pod ever refused, so a pod
    # deleted during the test would leave it above `cached - 3` (it did once in CI, 17 against 15).
    with SimulatorThread(scenario="default", speed=600, auto_tick=False) as sim:
        threading.Event().wait(0.5)
        sim.tick()  # five scenario minutes: pods well past the cap
        exporter = start_exporter(sim, tmp_path, options=Options(max_objects={"pods": 3}))
        try:
            samples = parse_text(exporter.scrape().decode())
        finally:
            exporter.stop()
    assert len([s for s in samples if s[0] == "volcano_pod_info"]) == 3
    dropped = {s[1]["resource"]: s[2] for s in samples if s[0] == "volcano_exporter_objects_dropped_total"}
    cached = {s[1]["resource"]: s[2] for s in samples if s[0] == "volcano_exporter_objects"}
    assert dropped["pods"] == cached["pods"] - 3 > 0
    assert dropped["jobs.batch.volcano.sh"] == 0


# ---- flags -----------------------------------------------------------------------------------------------

def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    options = parse_args(["--metric-denylist", "volcano_pod_.*", "--metric-labels-allowlist", "pods=[team]",
                          "--max-objects", "pods=10"]).options
    assert not options.families.allows("volcano_pod_info") and options.families.allows("volcano_job_info")
    assert options.labels.kinds == {"pods": ("team",)} and options.max_objects == {"pods": 10}
    monkeypatch.setenv("VOLCANO_EXPORTER_METRIC_ALLOWLIST", "volcano_job_info")
    monkeypatch.setenv("VOLCANO_EXPORTER_METRIC_LABELS_ALLOWLIST", "jobs=[*]")
    monkeypatch.setenv("VOLCANO_EXPORTER_MAX_OBJECTS", "7")
    options = parse_args([]).options
    assert options.families.allows("volcano_job_info") and not options.families.allows("volcano_pod_info")
    assert options.labels.kinds == {"jobs": None} and options.max_objects["queues"] == 7


@pytest.mark.parametrize(("argv", "message"), [
    (["--metric-allowlist", "a", "--metric-denylist", "b"], "mutually exclusive"),
    (["--metric-denylist", "("], "--metric-denylist: '(' is not a valid regular expression"),
    (["--metric-labels-allowlist", "pods=team"], "--metric-labels-allowlist: cannot parse"),
    (["--max-objects", "-1"], "--max-objects: expected a positive integer"),
])
def test_bad_flags_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
