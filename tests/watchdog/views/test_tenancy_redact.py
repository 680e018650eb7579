"""A namespace-scoped caller (auth.mode kubernetes) is not shown other namespaces' job names through a
waiting job's queue place, its expected start, or an alert's summary and details (findings/redact.py):
team-a's job waits behind team-b's; alice (team-a) sees team-b's jobs only as a count with their summed
request and "when a job of another namespace ends"; root (cluster-wide) sees the names, as token mode does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.exporter.objects import job_podgroup, queue, waiting_job
from tests.watchdog.views.test_api import NOW, health, insert, make_alert
from tests.watchdog.views.test_tenancy import AUTHN, K8S, tenancy
from volcano_monitor.core.kube.informer import ADDED
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.simulator.authn import Authn
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.estimates import Estimate
from volcano_monitor.watchdog.findings.redact import OTHER_JOB, redact_text, redact_value, when_ends
from volcano_monitor.watchdog.findings.why import why_router
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.models import NotificationDelivery, NotificationGroup
from volcano_monitor.watchdog.views.api import create_app

ALICE = {"Authorization": "Bearer tok-a"}
ROOT = {"Authorization": "Bearer tok-root"}
START = NOW.timestamp() + 3600


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread() as running:
        running.api.authn = Authn.from_config(AUTHN)
        yield running


def job(name: str, namespace: str, second: int, cpu: int) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = waiting_job(name, "narrow", 1, {"cpu": str(cpu)}, namespace=namespace)
    group = job_podgroup(raw, {"cpu": str(cpu)})
    group["metadata"]["creationTimestamp"] = f"2026-12-01T10:00:{second:02d}Z"
    return raw, group


def expected(namespace: str, name: str) -> Estimate | None:
    """The last estimation round as findings.expected would hold it: team-a's job waits for team-b's."""
    return Estimate(START, START - 600, START + 600, "when team-b/big ends") if name == "plain" else None


def client(sim: SimulatorThread, tmp_path: Path, engine: Engine) -> TestClient:
    settings = Settings(auth=K8S)
    worker = Watchdog(settings, engine, api=None, clock=NOW.timestamp)
    pairs = [job("big", "team-b", 2, 4), job("other", "team-b", 3, 1), job("mine", "team-a", 4, 2),
             job("plain", "team-a", 6, 2)]
    worker.apply([("queues", ADDED, parse_queue(queue("root", parent=None))),
                  *[("podgroups", ADDED, parse_podgroup(g)) for _, g in pairs],
                  *[("jobs", ADDED, parse_job(j)) for j, _ in pairs]], [])
    alert = make_alert(1, kind="GangUnschedulable", namespace="team-a")
    alert.job_name = "plain"
    summary = "PodGroup team-a/plain cannot be scheduled: expected to start around 11:00 UTC, when team-b/big ends"
    alert.summary, alert.details = summary, {"waits_for": "when team-b/big ends", "podgroup_uid": "pg-plain"}
    insert(engine, alert, NotificationGroup(id=1, group_key="g", receiver="r", route="0", labels={},
                                            created_at=NOW, updated_at=NOW))
    insert(engine, NotificationDelivery(  # the message the channel got, as the outbox stored it
        group_id=1, receiver="r", state="sent", attempts=1, next_attempt_at=NOW, created_at=NOW, updated_at=NOW,
        message={"receiver": "r", "group_key": "g", "status": "firing", "alerts": [
            {"kind": "GangUnschedulable", "severity": "warning", "status": "firing", "namespace": "team-a",
             "summary": summary}]}))
    t = tenancy(sim, tmp_path, engine)
    return TestClient(create_app(engine, settings, health(), clock=lambda: NOW, why=worker.index.why,
                                 expected=expected, tenancy=t,
                                 routers=[why_router(worker.index.why, expected=expected, scope=t.scope)]))


def test_a_scoped_why_folds_other_namespaces_jobs(sim: SimulatorThread, tmp_path: Path, engine: Engine) -> None:
    api = client(sim, tmp_path, engine)
    mine = api.get("/api/v1/jobs/uid-plain/why", headers=ALICE)
    assert mine.status_code == 200, mine.text
    got = mine.json()
    assert got["position"] == 4 and [a["job_name"] for a in got["ahead"]] == ["mine"]
    assert got["ahead_other_namespaces"] == 2
    assert got["ahead_other_namespaces_requests"] == {"cpu": 5.0, "pods": 2.0}
    assert got["waits_for"] == OTHER_JOB
    assert "team-b" not in mine.text and "big" not in mine.text and "uid-big" not in mine.text
    everything = api.get("/api/v1/jobs/uid-plain/why", headers=ROOT).json()
    assert [(a["namespace"], a["job_name"]) for a in everything["ahead"]] == [
        ("team-b", "big"), ("team-b", "other"), ("team-a", "mine")]
    assert (everything["ahead_other_namespaces"], everything["ahead_other_namespaces_requests"]) == (0, {})
    assert everything["waits_for"] == "when team-b/big ends"
    assert api.get("/api/v1/jobs/uid-big/why", headers=ALICE).status_code == 404


def test_a_scoped_job_page_names_no_other_namespace(sim: SimulatorThread, tmp_path: Path, engine: Engine) -> None:
    api = client(sim, tmp_path, engine)
    page = api.get("/ui/jobs/uid-plain", headers=ALICE)
    assert page.status_code == 200, page.text
    assert "ahead: team-a/mine (priority 0: cpu 2); 2 jobs of other namespaces (requesting cpu 5)" in page.text
    assert OTHER_JOB in page.text and "team-b" not in page.text
    root = api.get("/ui/jobs/uid-plain", headers=ROOT).text
    assert "team-b/big (priority 0: cpu 4); team-b/other" in root and "when team-b/big ends" in root


def test_a_scoped_reader_of_an_alert_sees_no_other_namespaces_job(sim: SimulatorThread, tmp_path: Path,
                                                                  engine: Engine) -> None:
    api = client(sim, tmp_path, engine)
    for path in ("/api/v1/alerts", "/api/v1/alerts/1", "/ui/alerts", "/ui/alerts/1", "/api/v1/notifications"):
        mine = api.get(path, headers=ALICE)
        assert mine.status_code == 200 and OTHER_JOB in mine.text and "team-b" not in mine.text, path
        assert "when team-b/big ends" in api.get(path, headers=ROOT).text, path
    one = api.get("/api/v1/alerts/1", headers=ALICE).json()
    assert one["details"] == {"waits_for": OTHER_JOB, "podgroup_uid": "pg-plain"}
    assert one["summary"].endswith(f", {OTHER_JOB}")


def test_redaction_keeps_own_namespaces_and_token_mode_unchanged() -> None:
    text = "when team-a/x ends; when team-b/y.z ends; room now"
    assert redact_text(text, None) == text
    assert redact_text(text, frozenset({"team-a"})) == f"when team-a/x ends; {OTHER_JOB}; room now"
    details = {"a": [text, 3], "b": {"c": "when team-b/q ends"}}
    assert redact_value(details, None) is details
    assert redact_value(details, frozenset()) == {"a": [f"{OTHER_JOB}; {OTHER_JOB}; room now", 3],
                                                  "b": {"c": OTHER_JOB}}


def test_the_estimates_phrase_is_the_one_redaction_reads() -> None:
    """findings.estimates writes waits_for with `when_ends`; every job name Kubernetes allows is redacted."""
    scope = frozenset({"team-a"})
    for job in ("team-b/big", "team-b/llama-3.1-8b-sft", "b2/x0", "team-b/a.b-c.9"):
        assert redact_text(when_ends(job), scope) == OTHER_JOB, job
    assert redact_text(when_ends("team-a/mine"), scope) == when_ends("team-a/mine")
