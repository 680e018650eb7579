"""`volcano_job_queue_position`: a waiting job's place in its queue, kept by the store on events and checked
against the recorded `queue-order` (real Volcano v1.12.4)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from tests.exporter import objects
from tests.exporter.objects import job_podgroup, queue, waiting_job
from tests.exporter.scrape import parse, select
from tests.exporter.test_replay import Replay
from tests.recorded import load
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.core.queueorder import parse_priority_class
from volcano_monitor.exporter.cardinality import Options, family_filter
from volcano_monitor.exporter.store import ExporterStore

FAMILY = "volcano_job_queue_position"


def priority_class(name: str, value: int, default: bool = False) -> dict[str, Any]:
    raw: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": value,
                           "metadata": {"name": name, "uid": f"pc-{name}", "resourceVersion": "1",
                                        "creationTimestamp": "2026-12-01T00:00:00Z"}}
    if default:
        raw["globalDefault"] = True
    return raw


def job(name: str, second: int, priority: str = "", queue_name: str = "narrow",
        namespace: str = "ml") -> tuple[dict[str, Any], dict[str, Any]]:
    raw = waiting_job(name, queue_name, 1, {"cpu": "1"}, namespace=namespace)
    group = job_podgroup(raw, {"cpu": "1"})
    group["metadata"]["creationTimestamp"] = f"2026-12-01T10:00:{second:02d}Z"
    if priority:
        raw["spec"]["priorityClassName"] = priority
        group["spec"]["priorityClassName"] = priority
    return raw, group


def feed(store: ExporterStore, *pairs: tuple[dict[str, Any], dict[str, Any]], event: str = ADDED) -> None:
    for raw, group in pairs:
        view = parse_podgroup(group)
        store.on_podgroup_owner(event, view)
        store.on_podgroup(event, view)
        store.on_job(event, parse_job(raw))


def positions(store: ExporterStore) -> dict[tuple[str, str], float]:
    return {(dict(labels)["job_name"], dict(labels)["queue"]): v
            for labels, v in select(parse(b"".join(store.chunks())), FAMILY).items()}


def with_classes(*classes: dict[str, Any], queues: Sequence[str] = ("narrow",)) -> ExporterStore:
    store = ExporterStore()
    for raw in (queue("root", parent=None), *(queue(name) for name in queues)):
        store.on_queue(ADDED, parse_queue(raw))
    for raw in classes:
        store.on_priority_class(ADDED, parse_priority_class(raw))
    return store


def test_positions_follow_priority_then_age_and_move_when_one_leaves() -> None:
    store = with_classes(priority_class("high", 1000), priority_class("low", 10))
    big, small, urgent, plain = job("big", 2, "low"), job("small", 4, "low"), job("urgent", 5, "high"), job("plain", 6)
    feed(store, big, small, urgent, plain)
    assert positions(store) == {("urgent", "narrow"): 1, ("big", "narrow"): 2, ("small", "narrow"): 3,
                                ("plain", "narrow"): 4}
    # urgent starts: its series goes, everyone behind it moves up one.
    running = copy.deepcopy(urgent[1])
    running["status"]["phase"] = "Running"
    feed(store, (urgent[0], running), event=MODIFIED)
    assert positions(store) == {("big", "narrow"): 1, ("small", "narrow"): 2, ("plain", "narrow"): 3}
    # big is deleted (Job and PodGroup).
    feed(store, big, event=DELETED)
    assert positions(store) == {("small", "narrow"): 1, ("plain", "narrow"): 2}


def test_a_class_value_change_reorders_and_queues_rank_apart() -> None:
    store = with_classes(priority_class("low", 10), queues=("narrow", "wide"))
    feed(store, job("a", 1, "low"), job("b", 2, "mid"), job("c", 3, queue_name="wide"))
    assert positions(store) == {("a", "narrow"): 1, ("b", "narrow"): 2, ("c", "wide"): 1}
    store.on_priority_class(ADDED, parse_priority_class(priority_class("mid", 50)))
    assert positions(store) == {("b", "narrow"): 1, ("a", "narrow"): 2, ("c", "wide"): 1}
    store.on_priority_class(ADDED, parse_priority_class(priority_class("usual", 100, default=True)))
    assert positions(store)[("c", "wide")] == 1  # alone in its queue whatever its priority


def test_status_churn_of_a_group_does_not_rerank() -> None:
    """A PodGroup's conditions are rewritten every scheduling cycle: that must not re-rank its queue."""
    store = with_classes()
    pair = job("a", 1)
    feed(store, pair, job("b", 2))
    positions(store)
    churned = copy.deepcopy(pair[1])
    churned["status"]["conditions"] = [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                                        "message": "1/1 tasks in gang unschedulable"}]
    store.on_podgroup_owner(MODIFIED, parse_podgroup(churned))
    assert not store.waiting._dirty_queues


def test_operator_podgroups_and_jobs_without_a_group() -> None:
    """Another operator's PodGroup ranks like a Volcano Job; a Job whose PodGroup is not made yet has no place."""
    store = with_classes(priority_class("high", 1000))
    torch = objects.kubeflow_podgroup()
    torch["spec"]["queue"] = "narrow"
    torch["spec"]["priorityClassName"] = "high"
    torch["status"] = {"phase": "Pending"}
    view = parse_podgroup(torch)
    store.on_podgroup_owner(ADDED, view)
    store.on_podgroup(ADDED, view)
    feed(store, job("a", 1))
    store.on_job(ADDED, parse_job(waiting_job("nogroup", "narrow", 1, {"cpu": "1"})))
    assert positions(store) == {(view.owner_name, "narrow"): 1, ("a", "narrow"): 2}


def test_a_denied_family_renders_nothing() -> None:
    store = ExporterStore(options=Options(families=family_filter("", FAMILY)))
    store.on_queue(ADDED, parse_queue(queue("root", parent=None)))
    feed(store, job("a", 1))
    assert positions(store) == {} and select(parse(b"".join(store.chunks())), "volcano_job_pending_reason")


# ---- the recorded scenario ---------------------------------------------------------------------------------

# The recording has no PriorityClass watch: the classes are the ones its README names.
RECORDED_CLASSES = (priority_class("high", 1000), priority_class("low", 10))


def replay_positions() -> list[tuple[float, dict[str, float]]]:
    """The scenario's events through the exporter's informers; positions after each change of them."""
    scenario = load("queue-order")
    replay = Replay(scenario)
    for raw in RECORDED_CLASSES:
        replay.informers["priorityclasses.scheduling.k8s.io"]._apply(ADDED, raw)
    seen: list[tuple[float, dict[str, float]]] = []
    for event in scenario.events:
        if event.what == "events":
            continue
        replay.apply(event.type, event.what, event.object)
        now = {dict(labels)["job_name"]: v for labels, v in select(replay.scrape(), FAMILY).items()}
        if not seen or seen[-1][1] != now:
            seen.append((event.received - scenario.start, now))
    return seen


def test_recorded_queue_order_positions_are_the_schedulers_order() -> None:
    """The recorded `queue-order`: `holder` runs in queue `narrow` (cpu 4); `big` (4 cpu, low), `small` (1 cpu,
    low), `urgent` (2 cpu, high) and `plain` (2 cpu, no class) arrive 1 s apart. The real scheduler admitted
    `small` beside `holder` while `big` waited (a job that fits is not held back), and when `holder` ended it
    admitted `urgent` and `plain` together in one cycle while `big` stayed Pending: taking the jobs in
    priority order (urgent 1000, big 10, plain 0) it admitted urgent, skipped big (2 + 4 > 4), admitted plain.
    Had it taken them by age, big (the oldest) would have gone first and filled the queue alone."""
    states = [now for _, now in replay_positions()]
    # Once plain has arrived, the three waiting are ranked urgent, big, plain (small already runs).
    assert {"urgent": 1, "big": 2, "plain": 3} in states
    # While small was still waiting with big and urgent: urgent, then big (older than small, same class).
    assert {"urgent": 1, "big": 2, "small": 3} in states
    # No state ever puts big or plain ahead of urgent, or plain ahead of big.
    for state in states:
        if "urgent" in state:
            assert state["urgent"] == 1
        if "big" in state and "plain" in state:
            assert state["big"] < state["plain"]
    # When urgent and plain run, big is alone and first; at the end nothing waits.
    assert states[-1] == {} and {"big": 1} in states
    # Position is not start order: the recorded admissions (PodGroup Inqueue) went small, then urgent and plain
    # in one cycle, then big, though big was ranked ahead of small and plain all along.
    admitted: dict[str, float] = {}
    for event in load("queue-order").of("podgroups"):
        owner = event.object["metadata"]["ownerReferences"][0]["name"]
        if event.object.get("status", {}).get("phase") == "Inqueue":
            admitted.setdefault(owner, event.received)
    assert admitted["small"] < admitted["urgent"] < admitted["big"]
    assert abs(admitted["urgent"] - admitted["plain"]) < 0.5 and admitted["plain"] < admitted["big"]
