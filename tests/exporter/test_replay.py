"""Replay of the watch streams recorded from real Volcano v1.12.4 through the exporter's informers.

Each scenario's events go, in the order the API server sent them, into the `Exporter`'s own informers
(cache, predicate, transform and handlers; no HTTP), and the scrape is checked after every event
against what the recorded objects say. Expected values are computed here from the raw objects, by
rules written independently of core/model.py.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from tests.exporter.scrape import parse, select, value
from tests.recorded import Scenario, load, scenario_names
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.exporter.app import Exporter

RESOURCE_OF = {"jobs": "jobs.batch.volcano.sh", "podgroups": "podgroups.scheduling.volcano.sh",
               "queues": "queues.scheduling.volcano.sh", "pods": "pods"}
TERMINAL = {"Completed", "Failed", "Aborted", "Terminated"}


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def expected_start(job: dict[str, Any]) -> float | None:
    """The first Running of the last run that reached Running; none while a new run has not started."""
    statuses = [(c["status"], epoch(c["lastTransitionTime"])) for c in job.get("status", {}).get("conditions", [])]
    runs: list[list[tuple[str, float]]] = [[]]
    for status, ts in statuses:
        if status in ("Pending", "Restarting"):
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((status, ts))
    started = [run for run in runs if any(s == "Running" for s, _ in run)]
    phase = job.get("status", {}).get("state", {}).get("phase", "")
    if not started or (phase not in TERMINAL and started[-1] is not runs[-1]):
        return None
    return next(ts for s, ts in started[-1] if s == "Running")


def expected_finish(job: dict[str, Any]) -> tuple[float, str] | None:
    phase = job.get("status", {}).get("state", {}).get("phase", "")
    if phase not in TERMINAL:
        return None
    terminal = [c for c in job["status"]["conditions"] if c["status"] in TERMINAL]
    return epoch(terminal[-1]["lastTransitionTime"]), terminal[-1]["status"]


class Replay:
    """An exporter whose informers are fed the recorded events instead of a watch."""

    def __init__(self, scenario: Scenario) -> None:
        self.exporter = Exporter(client.ApiClient())
        self.informers: dict[str, Informer[Any]] = {i.kind.name: i for i in self.exporter.informers}
        self.live: dict[str, dict[tuple[str, str], dict[str, Any]]] = {what: {} for what in RESOURCE_OF}
        for queue in scenario.queues:
            self.apply("ADDED", "queues", queue)

    def apply(self, event_type: str, what: str, obj: dict[str, Any]) -> None:
        self.informers[RESOURCE_OF[what]]._apply(event_type, obj)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if event_type == "DELETED":
            self.live[what].pop(key, None)
        else:
            self.live[what][key] = obj

    def scrape(self) -> dict[Any, float]:
        return parse(self.exporter.scrape())


def check_jobs(replay: Replay, s: dict[Any, float]) -> None:
    for (namespace, name), job in replay.live["jobs"].items():
        start = select(s, "volcano_job_start_time_seconds", namespace=namespace, job_name=name)
        want = expected_start(job)
        assert list(start.values()) == ([] if want is None else [want]), f"start of {name}"
        finish = select(s, "volcano_job_completion_time_seconds", namespace=namespace, job_name=name)
        done = expected_finish(job)
        if done is None:
            assert not finish, name
        else:
            assert finish == {frozenset({("namespace", namespace), ("job_name", name), ("phase", done[1])}): done[0]}
            if want is not None:
                assert value(s, "volcano_job_run_duration_seconds", namespace=namespace, job_name=name) \
                    == pytest.approx(done[0] - want)


def check_queue_podgroups(replay: Replay, s: dict[Any, float]) -> None:
    counted: Counter[tuple[str, str]] = Counter()
    for group in replay.live["podgroups"].values():
        phase = (group.get("status") or {}).get("phase") or "Pending"
        counted[(group["spec"].get("queue") or "default", phase.lower())] += 1
    exported = {(dict(labels)["queue"], dict(labels)["phase"]): v
                for labels, v in select(s, "volcano_queue_status_podgroups").items() if v}
    assert exported == dict(counted)


def amount(quantity: str) -> float:
    """Plain and milli quantities (all the recordings use for cpu and pods)."""
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def check_min_resources(replay: Replay, s: dict[Any, float]) -> None:
    for (namespace, name), group in replay.live["podgroups"].items():
        raw = group["spec"].get("minResources") or {}
        got = {dict(labels)["resource"]: v for labels, v in
               select(s, "volcano_podgroup_spec_min_resources", namespace=namespace, podgroup=name).items()}
        assert set(got) <= {"cpu", "memory", "pods", "nvidia_com_gpu"}, got
        if "requests.cpu" in raw:
            assert got["cpu"] == amount(raw["requests.cpu"])
        if "count/pods" in raw:
            assert got["pods"] == amount(raw["count/pods"])


@pytest.mark.parametrize("name", scenario_names())
def test_replay(name: str) -> None:
    scenario = load(name)
    replay = Replay(scenario)
    seen_groups = 0
    for event in scenario.events:
        if event.what == "events":
            continue
        replay.apply(event.type, event.what, event.object)
        s = replay.scrape()
        check_jobs(replay, s)
        check_queue_podgroups(replay, s)
        check_min_resources(replay, s)
        seen_groups = max(seen_groups, len(replay.live["podgroups"]))
        # Nothing outlives its object: a deleted Job's or pod's series go with it.
        for what, family, label in (("jobs", "volcano_job_info", "job_name"), ("pods", "volcano_pod_info", "pod")):
            exported = {dict(labels)[label] for labels in select(s, family)}
            assert exported == {n for _, n in replay.live[what]}, family
    assert seen_groups > 0
    # Every queue is root's child in v1.12 (spec.parent filled in by the controller), and root has the cluster.
    s = replay.scrape()
    for (_, queue), raw in replay.live["queues"].items():
        want_parent = "" if queue == "root" else raw["spec"].get("parent", "root")
        assert value(s, "volcano_queue_info", queue=queue)  # one series
        assert select(s, "volcano_queue_info", queue=queue, parent=want_parent), queue
    assert value(s, "volcano_queue_spec_deserved", queue="root", resource="cpu") == 96


def test_replayed_values_of_the_scenarios_that_name_them() -> None:
    """Spot values stated in the recordings' README, so the rules above cannot drift together with the code."""
    replay = Replay(load("job-completes"))
    starts = set()
    for event in load("job-completes").events:
        if event.what != "events":
            replay.apply(event.type, event.what, event.object)
            starts |= set(select(replay.scrape(), "volcano_job_start_time_seconds", job_name="test-job").values())
    job = replay.live["jobs"][("default", "test-job")]
    running = [epoch(c["lastTransitionTime"]) for c in job["status"]["conditions"] if c["status"] == "Running"]
    assert len(running) == 9  # nine Running entries, one per status write while running
    assert starts == {running[0]}  # the start never moved while pods started and finished

    replay = Replay(load("pod-oomkilled-job-fails"))
    for event in load("pod-oomkilled-job-fails").events:
        if event.what != "events":
            replay.apply(event.type, event.what, event.object)
    job = replay.live["jobs"][("default", "oom")]
    running = [epoch(c["lastTransitionTime"]) for c in job["status"]["conditions"] if c["status"] == "Running"]
    s = replay.scrape()
    assert value(s, "volcano_job_start_time_seconds", job_name="oom") == running[1]  # the second (last) run
    assert value(s, "volcano_job_status_retry_count", job_name="oom") == 2
    assert select(s, "volcano_job_completion_time_seconds", job_name="oom", phase="Failed")
