"""Expected starts on the watchdog (watchdog/findings/expected.py): from the index and the ledger's run lengths
to `/api/v1/jobs/{uid}/why`, the job page and `/metrics`; and the recorded `queue-order`, whose start order
is not its queue order."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine

from tests.exporter.objects import job_podgroup, queue, volcano_pod, waiting_job
from tests.recorded import load
from tests.watchdog.findings.test_why_position import priority_class
from tests.watchdog.views.test_api import NOW, TOKEN, insert
from tests.watchdog.views.test_metrics import labels, parse, pick
from volcano_monitor.core.kube.informer import ADDED
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.core.queueorder import parse_priority_class
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.estimates import START_LATENCY_SECONDS, Durations
from volcano_monitor.watchdog.findings.expected import ExpectedStarts
from volcano_monitor.watchdog.findings.why import why_router
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def running_pod(job: str, cpu: str, started: datetime) -> dict[str, Any]:
    raw = volcano_pod()
    raw["metadata"]["name"] = f"{job}-worker-0"
    raw["metadata"]["uid"] = f"pod-{job}"
    for meta in (raw["metadata"]["labels"], raw["metadata"]["annotations"]):
        meta["volcano.sh/job-name"], meta["volcano.sh/queue-name"] = job, "narrow"
    raw["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = f"{job}-uid-{job}"
    raw["metadata"]["ownerReferences"][0].update(name=job, uid=f"uid-{job}")
    raw["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    raw["status"]["startTime"] = stamp(started)
    return raw


def finished_run(i: int, seconds: float) -> JobRun:
    start = NOW - timedelta(hours=2)
    return JobRun(uid=f"old-{i}", namespace="ml", name=f"pretrain-{i}", workload="pretrain", queue="narrow",
                  phase="Completed", created_at=start, started_at=start, finished_at=start + timedelta(seconds=seconds),
                  updated_at=NOW)


def cluster_with_estimates(engine: Engine) -> tuple[Watchdog, ExpectedStarts]:
    """`narrow` (4 cpu) runs `pretrain` (4 cpu, 100 s in, its runs take 300/400/500 s); `big` (4 cpu) waits for
    it; `huge` (8 cpu) can never fit `narrow`."""
    worker = Watchdog(Settings(), engine, api=None, clock=NOW.timestamp)
    pretrain = waiting_job("pretrain", "narrow", 1, {"cpu": "4"}, phase="Running")
    big, huge = waiting_job("big", "narrow", 1, {"cpu": "4"}), waiting_job("huge", "narrow", 2, {"cpu": "4"})
    worker.apply([("queues", ADDED, parse_queue(queue("root", parent=None))),
                  ("queues", ADDED, parse_queue(queue("narrow", capability={"cpu": "4"}))),
                  ("podgroups", ADDED, parse_podgroup(job_podgroup(pretrain, {"cpu": "4"}, phase="Running"))),
                  ("podgroups", ADDED, parse_podgroup(job_podgroup(big, {"cpu": "4"}))),
                  ("podgroups", ADDED, parse_podgroup(job_podgroup(huge, {"cpu": "8"}))),
                  *[("jobs", ADDED, parse_job(j)) for j in (pretrain, big, huge)],
                  ("pods", ADDED, worker.pod_view(running_pod("pretrain", "4", NOW - timedelta(seconds=100))))], [])
    insert(engine, *(finished_run(i, s) for i, s in enumerate((300, 400, 500))))
    expected = ExpectedStarts(worker.index, engine, worker.nodes, clock=NOW.timestamp)
    expected.refresh()
    return worker, expected


def test_why_gives_the_expected_start_and_what_it_waits_for(engine: Engine) -> None:
    worker, expected = cluster_with_estimates(engine)
    app = create_app(engine, Settings(), Health(ready=lambda: True, collectors=dict),
                     routers=[why_router(worker.index.why, expected=expected.get)])
    client = TestClient(app)
    got = client.get("/api/v1/jobs/uid-big/why").json()
    # median of the runs longer than 100 s (400) - 100 already run, + the time its pod takes to start
    at = NOW + timedelta(seconds=300 + START_LATENCY_SECONDS)
    assert datetime.fromisoformat(got["expected_start"]) == at
    assert datetime.fromisoformat(got["expected_start_low"]) == at - timedelta(seconds=50)
    assert datetime.fromisoformat(got["expected_start_high"]) == at + timedelta(seconds=50)
    assert got["waits_for"] == "when ml/pretrain ends"
    never = client.get("/api/v1/jobs/uid-huge/why").json()
    assert never["reason"] == "queue_too_small"
    assert never["expected_start"] is None
    assert never["waits_for"] == "queue narrow: capability of cpu below the request"
    running = client.get("/api/v1/jobs/uid-pretrain/why").json()
    assert (running["pending"], running["expected_start"], running["waits_for"]) == (False, None, None)


def test_expected_start_on_metrics_and_the_job_page(engine: Engine) -> None:
    _, expected = cluster_with_estimates(engine)
    settings = Settings(api_token=SecretStr(TOKEN))
    app = create_app(engine, settings, Health(ready=lambda: True, collectors=dict,
                                              extra_metrics=expected.render_metrics),
                     clock=lambda: NOW, expected=expected.get,
                     why=lambda uid: expected.index.why(uid))
    client = TestClient(app)
    series = parse(client.get("/metrics").text)
    key = labels(namespace="ml", job_name="big", queue="narrow")
    start = (NOW + timedelta(seconds=300 + START_LATENCY_SECONDS)).timestamp()
    name = "volcano_watchdog_job_expected_start"
    assert pick(series, f"{name}_timestamp_seconds") == {key: start}  # not `huge`: it never starts
    assert pick(series, f"{name}_low_timestamp_seconds") == {key: start - 50}
    assert pick(series, f"{name}_high_timestamp_seconds") == {key: start + 50}
    page = client.get("/ui/jobs/uid-big").text
    assert "Expected to start 2024-05-01 12:07 UTC (2024-05-01 12:06 UTC to 2024-05-01 12:07 UTC), " \
           "when ml/pretrain ends" in page
    assert "No expected start: queue narrow: capability of cpu below the request" in \
        client.get("/ui/jobs/uid-huge").text


def test_recorded_queue_order_start_order_is_predicted(engine: Engine) -> None:
    """Real Volcano (recorded `queue-order`): `holder` (3 of `narrow`'s 4 cpu) runs; `big` (4 cpu) waits;
    `small` (1 cpu), created after it, starts at once beside `holder`; then `urgent` and `plain` (2 cpu each)
    start together when `holder` ends, and `big`, ahead of `plain` in the queue, only after them. The
    estimates made as each job arrives (run lengths as the recording's: holder 14 s, the others 5 s) must put
    them in the order they really started, which is not their queue order."""
    scenario = load("queue-order")
    worker = Watchdog(Settings(), engine, api=None)
    worker.apply([("priorityclasses", ADDED, parse_priority_class(priority_class(name, value)))
                  for name, value in (("high", 1000), ("low", 10))], [])
    worker.apply([("queues", ADDED, parse_queue(q)) for q in scenario.queues], [])
    expected = ExpectedStarts(worker.index, None, worker.nodes)
    expected.durations = Durations.from_runs(
        (namespace, name, "narrow", 14.0 if name == "holder" else 5.0)
        for name in ("holder", "big", "small", "urgent", "plain") for namespace in ("default",) for _ in range(3))
    parse = {"jobs": parse_job, "podgroups": parse_podgroup, "queues": parse_queue}
    admitted: dict[str, float] = {}
    ran: dict[str, float] = {}  # the first pod of each job running: what the estimate predicts
    estimates: dict[str, dict[str, float]] = {}
    for event in scenario.events:
        if event.what == "pods":
            worker.apply([("pods", event.type, worker.pod_view(event.object))], [])
            if event.object["status"].get("phase") == "Running":
                ran.setdefault(event.object["metadata"]["name"].rsplit("-", 2)[0], event.received)
        elif event.what in parse:
            worker.apply([(event.what, event.type, parse[event.what](event.object))], [])
        if event.what != "podgroups":
            continue
        owner = event.object["metadata"]["ownerReferences"][0]["name"]
        if event.object.get("status", {}).get("phase") == "Inqueue":
            admitted.setdefault(owner, event.received)
        if event.type == ADDED and owner != "holder":
            expected.refresh(event.received)
            estimates[owner] = {name: est.start for (_, name), (_, est) in expected.estimates.items()
                                if est.start is not None}
    assert estimates["small"]["small"] == pytest.approx(ran["small"], abs=2.0)  # at once, beside holder
    assert estimates["small"]["big"] > admitted["small"] + 5  # big waits though it came first
    latest = estimates["plain"]  # all of big, urgent, plain wait (small runs)
    assert latest["urgent"] == pytest.approx(latest["plain"])  # together, when holder ends
    assert latest["big"] > latest["plain"]  # big after plain, though ahead of it in the queue
    real = sorted(admitted, key=admitted.__getitem__)
    assert real[0] == "holder" and real[1] == "small" and real[-1] == "big"
    for name in ("urgent", "plain", "big"):  # within a second or two of the truth
        assert latest[name] == pytest.approx(ran[name], abs=2.0), (name, latest[name] - ran[name])
