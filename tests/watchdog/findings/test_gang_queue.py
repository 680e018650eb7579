"""GangUnschedulable without any PodGroup condition (what real Volcano v1.12 does for a gang bigger than
the cluster), its reason from the scheduler's Events, the split with QueueStarved, and QueueStarved
for queues without capability when the cluster is full (root's deserved vs allocated)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.watchdog.findings.test_detectors import SETTINGS, T0, Obj, condition, job, podgroup, queue, ts
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.watchdog.findings.detectors import GangDetector, QueueDetector
from volcano_monitor.watchdog.state.events import SchedulerNotes, about_podgroup, parse_event

GROUP = "train-abcd-job-uid-1"


def event(message: str, t: float, count: int = 1, kind: str = "PodGroup", type_: str = "Warning",
          uid: str = "ev-1", involved_uid: str = "pg-uid-1") -> Obj:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{GROUP}.1", "namespace": "ml", "uid": uid},
            "involvedObject": {"kind": kind, "namespace": "ml", "name": GROUP, "uid": involved_uid,
                               "apiVersion": "scheduling.volcano.sh/v1beta1"},
            "type": type_, "reason": "Unschedulable", "message": message, "count": count,
            "firstTimestamp": ts(T0 - 100), "lastTimestamp": ts(t), "source": {"component": "volcano"}}


def pending_group(created: float = T0 - 100, **kw: Any) -> Obj:
    raw = podgroup(phase="Pending", **kw)
    raw["metadata"]["creationTimestamp"] = ts(created)
    return raw


def noted(*events: Obj) -> SchedulerNotes:
    notes = SchedulerNotes()
    for raw in events:
        view = notes.parse(raw)
        assert view is not None
        notes.on_event("ADDED", view)
    return notes


def cluster(allocated_cpu: str, deserved_cpu: str = "96") -> QueueDetector:
    d = QueueDetector(SETTINGS)
    d.on_queue("ADDED", parse_queue(queue("root", parent="", allocated={"cpu": allocated_cpu})
                                    | {"spec": {"deserved": {"cpu": deserved_cpu, "pods": "330"}}}))
    d.on_queue("ADDED", parse_queue(queue("research", parent="root", allocated={"cpu": allocated_cpu})))
    return d


def test_pending_gang_without_conditions_is_unschedulable_with_the_events_message() -> None:
    notes = noted(event("queue resource quota insufficient", T0 - 2, type_="Normal", uid="ev-0"),
                  event("0/0 tasks in gang unschedulable: pod group is not ready, 4 minAvailable", T0 - 2))
    d = GangDetector(SETTINGS, notes, blocked=cluster("0").blocked)
    d.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "120"})))
    (signal,) = d.check(T0)
    assert signal.kind == "GangUnschedulable" and signal.since == datetime.fromtimestamp(T0 - 100, UTC)
    assert signal.details["message"] == "0/0 tasks in gang unschedulable: pod group is not ready, 4 minAvailable"
    assert signal.details["source"] == "event" and "pod group is not ready" in signal.summary
    # A later Event wins; the PodGroup's deletion drops its note.
    notes.on_event("MODIFIED", parse_event(event("queue resource quota insufficient", T0 - 1, count=2,
                                                 type_="Normal", uid="ev-0")))  # type: ignore[arg-type]
    assert d.check(T0)[0].details["message"] == "queue resource quota insufficient"
    d.on_podgroup("DELETED", parse_podgroup(pending_group()))
    assert d.check(T0) == [] and len(notes) == 0


def test_newer_condition_wins_over_an_older_event() -> None:
    notes = noted(event("old news", T0 - 50))
    conds = (condition("Unschedulable", T0 - 10, message="1/4 tasks in gang unschedulable: Insufficient cpu"),)
    d = GangDetector(SETTINGS, notes)
    d.on_podgroup("ADDED", parse_podgroup(podgroup(phase="Inqueue", conditions=conds)))
    (signal,) = d.check(T0)
    assert signal.details["source"] == "condition" and signal.details["reason"] == "NotEnoughResources"
    assert signal.details["message"].startswith("1/4 tasks")


def test_events_of_an_earlier_group_of_the_same_name_are_ignored() -> None:
    notes = noted(event("about the old group", T0, involved_uid="old-uid"))
    d = GangDetector(SETTINGS, notes)
    d.on_podgroup("ADDED", parse_podgroup(pending_group()))
    (signal,) = d.check(T0)
    assert signal.details["message"] == "" and "no reason given" in signal.summary


def test_a_group_waiting_for_a_full_cluster_is_queue_starved_not_unschedulable() -> None:
    queues = cluster("90")
    d = GangDetector(SETTINGS, blocked=queues.blocked)
    d.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "8"})))
    queues.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "8"})))
    assert d.check(T0) == []  # 8 fits the 96-core cluster, not on top of 90: it waits for work to finish
    (starved,) = queues.check(T0)
    assert starved.kind == "QueueStarved" and starved.queue == "research"
    assert starved.details["scope"] == "cluster" and starved.details["limiting_queue"] == "root"
    assert "cluster is full on cpu (90 of 96 allocated)" in starved.summary
    # The cluster frees up: no QueueStarved; the gang's episode starts when it stopped waiting for it.
    queues.on_queue("MODIFIED", parse_queue(queue("root", parent="", allocated={"cpu": "0"})
                                            | {"spec": {"deserved": {"cpu": "96"}}}))
    assert queues.check(T0 + 5) == []
    (signal,) = d.check(T0 + 5)
    assert signal.kind == "GangUnschedulable" and signal.since == datetime.fromtimestamp(T0, UTC)


def test_a_gang_bigger_than_the_cluster_is_not_starvation() -> None:
    queues = cluster("90")
    queues.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "120"})))
    assert queues.check(T0) == []
    d = GangDetector(SETTINGS, blocked=queues.blocked)
    d.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "120"})))
    assert [s.kind for s in d.check(T0)] == ["GangUnschedulable"]


def test_without_a_root_queue_only_capabilities_are_checked() -> None:
    d = QueueDetector(SETTINGS)
    d.on_queue("ADDED", parse_queue(queue("research", parent="", allocated={"cpu": "1000"})))
    d.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "8"})))
    assert d.check(T0) == []


def test_the_group_of_a_deleted_job_is_left_alone() -> None:
    """Real Volcano re-enqueues the empty group of a deleted Job (Running -> Pending -> Inqueue)
    until the garbage collector deletes it."""
    d = GangDetector(SETTINGS)
    d.on_job("ADDED", parse_job(job()))
    d.on_podgroup("ADDED", parse_podgroup(pending_group()))
    assert len(d.check(T0)) == 1
    d.on_job("DELETED", parse_job(job()))
    assert d.check(T0) == []


def test_events_are_filtered_cheaply_and_malformed_ones_counted() -> None:
    assert about_podgroup(event("x", T0)) and not about_podgroup(event("x", T0, kind="Pod"))
    for raw in (None, 42, "x", [], {"involvedObject": "nope"}, {"involvedObject": {"kind": 3}}):
        assert not about_podgroup(raw)
    notes = SchedulerNotes()
    broken: list[object] = [None, {"involvedObject": {"kind": "PodGroup"}}, {"metadata": {}, "involvedObject":
                            {"kind": "PodGroup", "name": ""}}]
    assert [notes.parse(raw) for raw in broken] == [None, None, None] and notes.skipped == 3
    odd = event("m", T0) | {"count": "many", "lastTimestamp": "yesterday", "eventTime": ts(T0)}
    view = notes.parse(odd)
    assert view is not None and view.count == 1 and view.last_time == T0
    # An expired (DELETED) Event is forgotten only when it is the note kept.
    notes.on_event("ADDED", view)
    other = parse_event(event("m", T0, uid="other"))
    assert other is not None
    notes.on_event("DELETED", other)
    assert len(notes) == 1
    notes.on_event("DELETED", view)
    assert len(notes) == 0


def test_the_watchdog_reads_podgroup_events_but_is_ready_without_them(tmp_path: Any) -> None:
    """The Events informer only refines GangUnschedulable's reason: a cluster whose RBAC does not grant
    Events yet must not keep the watchdog unready."""
    from kubernetes import client

    from tests.watchdog.harness import fast_settings
    from volcano_monitor.core.kube.resources import EVENTS
    from volcano_monitor.watchdog.runtime.app import Watchdog
    from volcano_monitor.watchdog.state.db.engine import make_engine

    url = f"sqlite:///{tmp_path / 'w.db'}"
    engine = make_engine(url)
    try:
        wd = Watchdog(fast_settings(url), engine, client.ApiClient())
        (events,) = [i for i in wd.informers if i.kind is EVENTS]
        assert events.predicate is about_podgroup and events.transform == wd.notes.parse
        for informer in wd.informers:
            if informer is not events:
                informer.synced.set()
        wd.writer.started.set()
        assert wd.ready() and not events.synced.is_set()
    finally:
        engine.dispose()
