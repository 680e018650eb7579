"""`position` and `ahead` in `GET /api/v1/jobs/{uid}/why`, and the line on the job page: a waiting job's place
in its queue in the order Volcano v1.12 takes jobs (core/queueorder.py), from the watchdog's informer state."""

from __future__ import annotations

import copy
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine

from tests.exporter import objects
from tests.exporter.objects import job_podgroup, queue, waiting_job
from tests.recorded import load
from tests.watchdog.findings.test_why import Cluster
from tests.watchdog.views.test_api import NOW, TOKEN, health, insert, make_run
from volcano_monitor.core.kube.informer import ADDED, MODIFIED
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.core.queueorder import parse_priority_class
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.views.api import create_app


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": value,
            "metadata": {"name": name, "uid": f"pc-{name}", "resourceVersion": "1",
                         "creationTimestamp": "2026-12-01T00:00:00Z"}}


def job(name: str, second: int, cpu: int, priority: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    raw = waiting_job(name, "narrow", 1, {"cpu": str(cpu)})
    group = job_podgroup(raw, {"cpu": str(cpu)})
    group["metadata"]["creationTimestamp"] = f"2026-12-01T10:00:{second:02d}Z"
    if priority:
        raw["spec"]["priorityClassName"] = group["spec"]["priorityClassName"] = priority
    return raw, group


def classes(cluster: Cluster, *raws: dict[str, Any]) -> None:
    cluster.watchdog.apply([("priorityclasses", ADDED, parse_priority_class(raw)) for raw in raws], [])


def waiting_cluster(engine: Engine) -> Cluster:
    cluster = Cluster(engine)
    classes(cluster, priority_class("high", 1000), priority_class("low", 10))
    pairs = [job("big", 2, 4, "low"), job("urgent", 5, 2, "high"), job("plain", 6, 2)]
    cluster.send(ADDED, queues=[queue("root", parent=None), queue("narrow", capability={"cpu": "4"})],
                 jobs=[j for j, _ in pairs], groups=[g for _, g in pairs])
    return cluster


def test_why_gives_position_and_the_jobs_ahead_with_their_requests(engine: Engine) -> None:
    cluster = waiting_cluster(engine)
    got = cluster.why("uid-plain")
    assert (got["position"], got["queue_waiting"], got["priority"]) == (3, 3, 0)
    assert got["ahead"] == [
        {"namespace": "ml", "job_name": "urgent", "podgroup": "urgent-uid-urgent", "priority_class": "high",
         "priority": 1000, "requests": {"cpu": 2.0, "pods": 1.0}},
        {"namespace": "ml", "job_name": "big", "podgroup": "big-uid-big", "priority_class": "low",
         "priority": 10, "requests": {"cpu": 4.0, "pods": 1.0}}]
    first = cluster.why("uid-urgent")
    assert (first["position"], first["ahead"]) == (1, [])
    # A class's value changes: the order follows it.
    classes(cluster, priority_class("low", 5000))
    assert cluster.why("uid-big")["position"] == 1 and cluster.why("uid-plain")["position"] == 3


def test_a_running_job_and_a_job_without_a_podgroup_have_no_position(engine: Engine) -> None:
    cluster = waiting_cluster(engine)
    _, group = job("urgent", 5, 2, "high")
    running = copy.deepcopy(group)
    running["status"] = {"phase": "Running", "running": 1}
    cluster.send(MODIFIED, groups=[running])
    got = cluster.why("uid-urgent")
    assert (got["pending"], got["position"], got["ahead"]) == (False, None, [])
    assert cluster.why("uid-plain")["position"] == 2  # one fewer ahead
    cluster.send(ADDED, jobs=[waiting_job("fresh", "narrow", 1, {"cpu": "1"})])  # no PodGroup yet
    fresh = cluster.why("uid-fresh")
    assert fresh["pending"] is True and fresh["position"] is None


def test_operator_podgroups_rank_by_their_own_uid(engine: Engine) -> None:
    cluster = waiting_cluster(engine)
    torch = objects.kubeflow_podgroup()
    torch["spec"]["queue"] = "narrow"
    torch["spec"]["priorityClassName"] = "high"
    torch["status"] = {"phase": "Pending"}
    torch["metadata"]["creationTimestamp"] = "2026-12-01T10:00:01Z"  # older than urgent, same priority
    cluster.send(ADDED, groups=[torch])
    got = cluster.why(torch["metadata"]["uid"])
    assert (got["kind"], got["position"], got["queue_waiting"]) == ("PyTorchJob", 1, 4)
    assert [a["job_name"] for a in cluster.why("uid-plain")["ahead"]] == ["bert", "urgent", "big"]


def test_recorded_queue_order_through_the_watchdog(engine: Engine) -> None:
    """The recorded `queue-order` fed to the watchdog's worker: once `plain` waits too, the three waiting are
    placed urgent (high), big (low), plain (no class), as the exporter places them. The recording has no
    PriorityClass watch: the classes are those its README names."""
    scenario = load("queue-order")
    cluster = Cluster(engine)
    classes(cluster, priority_class("high", 1000), priority_class("low", 10))
    cluster.send(ADDED, queues=list(scenario.queues))
    parse = {"jobs": parse_job, "podgroups": parse_podgroup, "queues": parse_queue}
    uids: dict[str, str] = {}
    seen: list[dict[str, int]] = []
    for event in scenario.events:
        if event.what not in parse:
            continue
        cluster.watchdog.apply([(event.what, event.type, parse[event.what](event.object))], [])
        if event.what == "jobs":
            uids[event.name] = event.object["metadata"]["uid"]
        now = {}
        for name, uid in uids.items():
            found = cluster.watchdog.index.why(uid)
            if found is not None and found.place is not None:
                now[name] = found.place.position
        if not seen or seen[-1] != now:
            seen.append(now)
    assert {"urgent": 1, "big": 2, "plain": 3} in seen
    assert {"urgent": 1, "big": 2, "small": 3} in seen
    assert seen[-1] == {}


def test_job_page_shows_the_place_line(engine: Engine) -> None:
    settings = Settings(api_token=SecretStr(TOKEN))
    worker = Watchdog(settings, engine, api=None, clock=NOW.timestamp)
    worker.apply([("priorityclasses", ADDED, parse_priority_class(priority_class("high", 1000)))], [])
    pairs = [job("big", 2, 4), job("urgent", 5, 2, "high"), job("plain", 6, 2)]
    worker.apply([("queues", ADDED, parse_queue(queue("root", parent=None))),
                  *[("podgroups", ADDED, parse_podgroup(g)) for _, g in pairs],
                  *[("jobs", ADDED, parse_job(j)) for j, _ in pairs]], [])
    # The worker's ledger holds the waiting jobs' runs already; a finished run besides.
    insert(engine, make_run("uid-done", "done", namespace="ml", queue="narrow"))
    client = TestClient(create_app(engine, settings, health(), clock=lambda: NOW, why=worker.index.why))
    body = client.get("/ui/jobs/uid-plain").text
    assert 'Position 3 of 3 in queue <a href="/ui/jobs?queue=narrow">narrow</a>' in body
    assert "ahead: ml/urgent (priority 1000: cpu 2); ml/big (priority 0: cpu 4)" in body
    assert "Position" not in client.get("/ui/jobs/uid-done").text  # not a live waiting job
