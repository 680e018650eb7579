"""`volcano_watchdog_*` over rows inserted by hand, on SQLite and PostgreSQL: the text parses with
prometheus_client, no series appears twice, and every value is the one the rows imply."""

from __future__ import annotations

import platform
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.watchdog.views.test_api import NOW, insert, make_alert, make_run, rec
from volcano_monitor.core.gpushare import PROBLEM_KINDS, physical_gpus, reset_problems
from volcano_monitor.core.model import parse_pod
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.recommendations import book as recommend
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.views import metrics
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import CollectorHealth, Health
from volcano_monitor.watchdog.views.metrics import FAMILIES, render_metrics

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]

COLLECTORS = {
    "metrics_api": CollectorHealth(True, NOW.timestamp() - 10, 2, 1000, interval_seconds=30),
    "prometheus": CollectorHealth(False, None, 0, 0),
    "stale": CollectorHealth(True, NOW.timestamp() - 1000, 5, 7, interval_seconds=30),
    "no_interval": CollectorHealth(True, 1.5e9, 0, 3),
}


def parse(text: str) -> Series:
    """Every sample by name and labels; fails on a repeated series, a repeated family or a reserved label."""
    series: Series = {}
    names = []
    for family in text_string_to_metric_families(text):
        names.append(family.name)
        for sample in family.samples:
            assert not {"job", "instance"} & set(sample.labels), sample
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in series, f"duplicate series {key}"
            series[key] = sample.value
    assert len(names) == len(set(names)), names
    assert all(name.startswith("volcano_watchdog_") for name in names)
    return series


def pick(series: Series, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in series.items() if n == name}


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    insert(engine,
           make_alert(1), make_alert(6, minutes_ago=5),
           make_alert(2, kind="PodOOMKilled", severity="warning"),
           make_alert(3, kind="JobIdle", severity="warning", state="pending"),
           make_alert(4, state="resolved"),
           make_run("r1", "train", cpu=(3600, 7200), memory=(1e9, 4e9), finished=timedelta(hours=1)),
           make_run("r1b", "train", cpu=(100, 100), finished=timedelta(hours=3)),  # same name, earlier: not shown
           make_run("r2", "old", cpu=(1, 100), finished=timedelta(hours=30)),  # outside the 24 h window
           make_run("r3", "etl", namespace="team-b", queue="q2", cpu=(500, 400), gpu=(1800, 3600),
                    finished=timedelta(hours=2)),
           make_run("r4", "running", cpu=(1, 1000)),  # not finished
           make_run("r5", 'job\nü"\\', namespace="we\"ird", queue="q2", cpu=(10, 20), finished=timedelta(minutes=1)))
    return engine


def render(engine: Engine, recommendations: list[Any] | None = None, ready: bool = True) -> str:
    with Session(engine) as session:
        body = render_metrics(session, Health(ready=lambda: ready, collectors=lambda: COLLECTORS), NOW,
                              recommendations)
    return body.decode()


def test_values_match_the_rows(seeded: Engine) -> None:
    text = render(seeded)
    series = parse(text)
    assert pick(series, "volcano_watchdog_alerts") == {
        labels(kind="JobFailed", severity="critical", state="firing"): 2,
        labels(kind="PodOOMKilled", severity="warning", state="firing"): 1,
        labels(kind="JobIdle", severity="warning", state="pending"): 1}
    assert pick(series, "volcano_watchdog_job_efficiency_ratio") == {
        labels(namespace="team-a", job_name="train", queue="q1", resource="cpu"): 0.5,
        labels(namespace="team-a", job_name="train", queue="q1", resource="memory"): 0.25,
        labels(namespace="team-b", job_name="etl", queue="q2", resource="cpu"): 1.25,
        labels(namespace="team-b", job_name="etl", queue="q2", resource="gpu"): 0.5,
        labels(namespace='we"ird', job_name='job\nü"\\', queue="q2", resource="cpu"): 0.5}
    assert pick(series, "volcano_watchdog_queue_wasted_core_seconds") == {labels(queue="q1"): 3600,
                                                                          labels(queue="q2"): 10}
    assert pick(series, "volcano_watchdog_queue_wasted_memory_byte_seconds") == {labels(queue="q1"): 3e9,
                                                                                 labels(queue="q2"): 0}
    assert pick(series, "volcano_watchdog_queue_wasted_gpu_seconds") == {labels(queue="q1"): 0,
                                                                         labels(queue="q2"): 1800}
    assert pick(series, "volcano_watchdog_collector_up") == {
        labels(collector="metrics_api"): 1, labels(collector="prometheus"): 0, labels(collector="stale"): 0,
        labels(collector="no_interval"): 1}
    assert pick(series, "volcano_watchdog_collector_enabled")[labels(collector="prometheus")] == 0
    assert pick(series, "volcano_watchdog_collector_last_success_timestamp_seconds") == {
        labels(collector="metrics_api"): NOW.timestamp() - 10, labels(collector="stale"): NOW.timestamp() - 1000,
        labels(collector="no_interval"): 1.5e9}
    assert pick(series, "volcano_watchdog_collector_errors_total")[labels(collector="stale")] == 5
    assert pick(series, "volcano_watchdog_collector_samples_total")[labels(collector="metrics_api")] == 1000
    assert "# TYPE volcano_watchdog_collector_errors_total counter" in text
    assert pick(series, "volcano_watchdog_ready") == {(): 1}
    assert pick(series, "volcano_watchdog_database_up") == {(): 1}
    (build,) = pick(series, "volcano_watchdog_build_info")
    assert dict(build)["python_version"] == platform.python_version() and dict(build)["version"]
    assert not any(name.startswith("volcano_watchdog_recommendation") for name, _ in series)
    assert parse(render(seeded, ready=False))[("volcano_watchdog_ready", ())] == 0


def test_recommendation_gauges(engine: Engine) -> None:
    odd = replace(rec("ns", 'wl "quoted"\nü', 0.25), confidence=0.1)
    recs = [rec("team-a", "train", 1.5), odd, rec("team-a", "train", 1.5)]  # a repeated key is one series
    series = parse(render(engine, recs))
    key = {"namespace": "team-a", "workload": "train", "task": "worker", "container": "main"}
    assert pick(series, "volcano_watchdog_recommendation_cpu_cores")[labels(**key, bound="target")] == 1.5
    assert pick(series, "volcano_watchdog_recommendation_cpu_cores")[labels(**key, bound="lower")] == 0.75
    assert pick(series, "volcano_watchdog_recommendation_cpu_cores")[labels(**key, bound="upper")] == 3.0
    assert pick(series, "volcano_watchdog_recommendation_memory_bytes")[labels(**key, bound="target")] == 2**30
    assert pick(series, "volcano_watchdog_recommendation_memory_bytes")[labels(**key, bound="upper")] == 2**31
    odd_key = {**key, "namespace": "ns", "workload": 'wl "quoted"\nü'}
    assert pick(series, "volcano_watchdog_recommendation_confidence") == {labels(**key): 0.75,
                                                                         labels(**odd_key): 0.1}
    assert len(pick(series, "volcano_watchdog_recommendation_cpu_cores")) == 6
    assert pick(series, "volcano_watchdog_alerts") == {}  # empty database: headers only
    assert pick(series, "volcano_watchdog_database_up") == {(): 1}


# Families the watchdog serves under the names DESIGN's catalogue gives them (the exporter cannot compute them:
# they need every pod and Node, which a sharded exporter does not have).
CATALOGUE_NAMES = {"volcano_hypernode_free_gpus", "volcano_hypernode_largest_gang_gpus"}


def test_every_family_is_named_by_the_conventions() -> None:
    for family in FAMILIES:
        assert family.name.startswith("volcano_watchdog_") or family.name in CATALOGUE_NAMES, family.name
        assert family.name.endswith("_total") == (family.type == "counter"), family.name
        assert not family.name.startswith("volcano_queue_") and not family.name.startswith("volcano_job_")


def test_metrics_endpoint_caches_recommendations(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [NOW]
    calls: list[datetime] = []
    fail = [False]

    def compute(session: Session, settings: Any, now: datetime, namespace: str | None = None) -> list[Any]:
        calls.append(now)
        if fail[0]:
            raise RuntimeError("histograms unreadable")
        return [rec("team-a", "train", float(len(calls)))]

    monkeypatch.setattr(recommend, "compute_recommendations", compute)
    client = TestClient(create_app(engine, Settings(), Health(ready=lambda: True, collectors=dict),
                                   clock=lambda: clock[0], recommendation_ttl_seconds=300))
    target = ("volcano_watchdog_recommendation_cpu_cores", labels(namespace="team-a", workload="train",
                                                                   task="worker", container="main", bound="target"))
    first = client.get("/metrics")
    assert first.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert parse(first.text)[target] == 1
    clock[0] = NOW + timedelta(seconds=299)
    assert parse(client.get("/metrics").text)[target] == 1 and calls == [NOW]
    clock[0] = NOW + timedelta(seconds=300)
    assert parse(client.get("/metrics").text)[target] == 2 and len(calls) == 2
    fail[0] = True
    clock[0] = NOW + timedelta(seconds=700)
    failed = client.get("/metrics")  # the last good recommendations are served
    assert failed.status_code == 200 and parse(failed.text)[target] == 2 and len(calls) == 3


def test_database_down_still_serves_health(tmp_path: Path) -> None:
    broken = make_engine(f"sqlite:///{tmp_path / 'no-schema.db'}")
    text = render(broken, [rec("team-a", "train", 1.0)])
    series = parse(text)
    assert series[("volcano_watchdog_database_up", ())] == 0 and series[("volcano_watchdog_ready", ())] == 1
    assert pick(series, "volcano_watchdog_collector_up")[labels(collector="metrics_api")] == 1
    assert "volcano_watchdog_alerts" not in text
    broken.dispose()


def test_job_efficiency_is_capped_to_the_names_that_finished_last(engine: Engine,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """At 300k pods a day the 24 h window holds ~40k job names: the family keeps the latest ones only."""
    monkeypatch.setattr(metrics, "EFFICIENCY_MAX_JOBS", 3)
    insert(engine, *[make_run(f"r{i}", f"job-{i}", cpu=(i, 100), finished=timedelta(minutes=10 * i + 1))
                     for i in range(10)],
           make_run("again", "job-9", cpu=(50, 100), finished=timedelta(minutes=1)))  # job-9's later run
    series = pick(parse(render(engine)), "volcano_watchdog_job_efficiency_ratio")
    assert {dict(key)["job_name"]: value for key, value in series.items()} == {
        "job-9": 0.5, "job-0": 0.0, "job-1": 0.01}


def test_gpu_share_problems_are_counted_on_metrics_by_kind(engine: Engine) -> None:
    """A vGPU request with a percentage over 100 is parsed with a fallback and counted: every kind is a series
    from the start (0 until met), the bad one goes up each time such a pod is parsed."""
    reset_problems()
    before = parse(render(engine))
    assert {dict(k)["problem"] for name, k in before if name == "volcano_watchdog_gpu_share_problems_total"} == \
        set(PROBLEM_KINDS)
    assert all(v == 0 for (name, _), v in before.items() if name == "volcano_watchdog_gpu_share_problems_total")
    bad = {"metadata": {"name": "p", "namespace": "a", "uid": "u"}, "spec": {"containers": [{"name": "c", "resources": {
        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "250"}}}]}}
    pod = parse_pod(bad)
    assert 0 < physical_gpus(pod.requests) <= 1  # a fallback, not 2.5 cards
    after = parse(render(engine))
    counted = {dict(k)["problem"]: v for (name, k), v in after.items()
               if name == "volcano_watchdog_gpu_share_problems_total" and v}
    assert len(counted) == 1 and list(counted.values()) == [1]
    assert "# TYPE volcano_watchdog_gpu_share_problems_total counter" in render(engine)
