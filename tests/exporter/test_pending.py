"""Why a job waits (core.pending), and `volcano_job_pending_reason` as the store keeps it (exporter.waiting)."""

from __future__ import annotations

import copy
import gzip
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.exporter import objects
from tests.exporter.harness import start_exporter
from tests.exporter.objects import job_podgroup, queue, waiting_job
from tests.exporter.scrape import parse, select
from tests.recorded import Recorded, load
from tests.simtools import wait_for
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.core.pending import (
    CLUSTER_FULL,
    CLUSTER_TOO_SMALL,
    MIN_AVAILABLE_ABOVE_PODS,
    QUEUE_CAPABILITY,
    QUEUE_CLOSED,
    QUEUE_MISSING,
    QUEUE_TOO_SMALL,
    REASONS,
    UNSCHEDULABLE,
    WAITING,
    Explanation,
    explain,
)
from volcano_monitor.exporter import waiting
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.cardinality import Options, family_filter
from volcano_monitor.exporter.store import ExporterStore
from volcano_monitor.simulator.runtime import SimulatorThread

GPU = "nvidia.com/gpu"


def tree(*raws: dict[str, Any]) -> dict[str, Any]:
    views = [parse_queue(raw) for raw in (queue("root", parent=None), *raws)]
    return {q.name: q for q in views}


def why(queues: dict[str, Any], job: dict[str, Any], group: dict[str, Any] | None) -> Explanation:
    view = parse_job(job)
    group_view = parse_podgroup(group) if group is not None else None
    return explain(group_view.queue if group_view else view.queue, queues, group_view, view)


def gpu_job(name: str, queue_name: str, gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    job = waiting_job(name, queue_name, gpus, {"cpu": "1", GPU: "1"})
    return job, job_podgroup(job, {"cpu": str(gpus), GPU: str(gpus)})


# The hierarchy of the issue: research (8 GPUs, 6 in use) above research-dev (4 GPUs).
def research(dev_allocated: str) -> dict[str, Any]:
    return tree(queue("research", capability={GPU: "8"}, allocated={GPU: "6"}),
                queue("research-dev", parent="research", capability={GPU: "4"}, allocated={GPU: dev_allocated}))


# ---- the three the issue asks for ---------------------------------------------------------------------------


def test_gang_larger_than_the_cluster_is_named_with_the_resource() -> None:
    # The recorded `gang-too-big`: 4 x 30 cores in `default`, the cluster has 96; no PodGroup condition.
    job = waiting_job("biggang", "default", 4, {"cpu": "30", "memory": "1Gi"})
    group = job_podgroup(job, {"cpu": "120", "memory": "4Gi"})
    got = why(tree(queue("default")), job, group)
    assert got == Explanation(CLUSTER_TOO_SMALL, "root", "cpu", "cluster: cpu 120 requested > allocatable 96 "
                              "(never fits)")


def test_queue_at_capability_under_a_parent_at_capability_names_the_first_on_the_path() -> None:
    job, group = gpu_job("train", "research-dev", 4)
    assert why(research(dev_allocated="4"), job, group) == Explanation(
        QUEUE_CAPABILITY, "research-dev", GPU, "queue research-dev: nvidia.com/gpu 4 allocated + 4 requested > "
        "capability 4")
    # Room in research-dev: the parent is what blocks.
    assert why(research(dev_allocated="0"), job, group) == Explanation(
        QUEUE_CAPABILITY, "research", GPU, "queue research: nvidia.com/gpu 6 allocated + 4 requested > capability 8")


def test_closed_queue_and_a_closed_parent() -> None:
    job, group = gpu_job("old", "archive", 1)
    got = why(tree(queue("archive", state="Closed")), job, group)
    assert (got.reason, got.queue, got.resource, got.message) == (
        QUEUE_CLOSED, "archive", "", "queue archive is Closed")
    nested = tree(queue("team", state="Closing"), queue("archive", parent="team"))
    assert why(nested, job, group).queue == "team"


# ---- the rest of the list ---------------------------------------------------------------------------------


def test_missing_queue_or_parent_and_a_loop_in_parents() -> None:
    job, group = gpu_job("lost", "nowhere", 1)
    assert why(tree(), job, group).reason == QUEUE_MISSING
    assert why(tree(), job, group).queue == "nowhere"
    orphan = tree(queue("child", parent="gone"))
    job, group = gpu_job("lost", "child", 1)
    assert (why(orphan, job, group).reason, why(orphan, job, group).queue) == (QUEUE_MISSING, "gone")
    loop = tree(queue("a", parent="b"), queue("b", parent="a"))
    job, group = gpu_job("looped", "a", 1)
    assert why(loop, job, group).reason == WAITING  # no root on the path: no cluster check, no crash


def test_min_available_above_the_pods() -> None:
    job = waiting_job("odd", "default", 2, {"cpu": "1"}, min_available=3)
    got = why(tree(queue("default")), job, None)
    assert (got.reason, got.message) == (MIN_AVAILABLE_ABOVE_PODS, "minAvailable 3 > 2 pods in all tasks")


def test_queue_too_small_and_cluster_full() -> None:
    job, group = gpu_job("huge", "research-dev", 5)
    got = why(research(dev_allocated="0"), job, group)
    assert (got.reason, got.queue, got.resource) == (QUEUE_TOO_SMALL, "research-dev", GPU)
    busy = {q.name: q for q in (parse_queue(queue("root", parent=None, allocated={GPU: "22"})),
                                parse_queue(queue("default")))}
    job, group = gpu_job("wide", "default", 4)
    got = why(busy, job, group)
    assert (got.reason, got.queue, got.resource, got.message) == (
        CLUSTER_FULL, "root", GPU, "cluster: nvidia.com/gpu 22 allocated + 4 requested > allocatable 24")


def test_admitted_gang_gets_the_schedulers_word_and_unconditioned_ones_wait() -> None:
    job = gpu_job("placed", "research-dev", 4)[0]
    condition = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                 "message": "3/4 tasks in gang unschedulable", "lastTransitionTime": objects.T1}
    inqueue = job_podgroup(job, {GPU: "4"}, phase="Inqueue", conditions=[condition])
    got = why(research(dev_allocated="4"), job, inqueue)  # admitted: its own pods are in `allocated`
    assert (got.reason, got.scheduler_reason) == (UNSCHEDULABLE, "NotEnoughResources")
    assert got.message == "NotEnoughResources: 3/4 tasks in gang unschedulable"
    pending_too = why(research(dev_allocated="4"), job, job_podgroup(job, {GPU: "4"}, conditions=[condition]))
    assert pending_too.reason == QUEUE_CAPABILITY and pending_too.scheduler_reason == "NotEnoughResources"
    assert why(tree(queue("default")), *gpu_job("fresh", "default", 1)).reason == WAITING
    assert why(tree(queue("default")), gpu_job("fresh", "default", 1)[0], None).message == "no PodGroup yet"


def test_every_reason_is_documented_in_the_help() -> None:
    from volcano_monitor.exporter.families.job import PENDING_REASON

    assert all(reason in PENDING_REASON.help for reason in REASONS)


# ---- the metric -------------------------------------------------------------------------------------------


def scrape(store: ExporterStore) -> dict[Any, float]:
    out: list[bytes] = []
    store.write(out)
    return parse(b"".join(out))


def reasons(store: ExporterStore) -> dict[tuple[str, str, str, str], float]:
    return {(d["job_name"], d["queue"], d["reason"], d["resource"]): v
            for labels, v in select(scrape(store), "volcano_job_pending_reason").items() for d in [dict(labels)]}


def feed(store: ExporterStore, *, queues: Sequence[dict[str, Any]] = (), jobs: Sequence[dict[str, Any]] = (),
         groups: Sequence[dict[str, Any]] = (), event: str = ADDED) -> None:
    for raw in queues:
        store.on_queue(event, parse_queue(raw))
    for raw in groups:
        view = parse_podgroup(raw)
        store.on_podgroup_owner(event, view)
        store.on_podgroup(event, view)
    for raw in jobs:
        store.on_job(event, parse_job(raw))


def research_queues(dev_allocated: str) -> list[dict[str, Any]]:
    return [queue("root", parent=None), queue("research", capability={GPU: "8"}, allocated={GPU: "6"}),
            queue("research-dev", parent="research", capability={GPU: "4"}, allocated={GPU: dev_allocated})]


def test_metric_names_queue_and_resource_and_follows_the_queues() -> None:
    store = ExporterStore()
    job, group = gpu_job("train", "research-dev", 4)
    big = waiting_job("biggang", "default", 4, {"cpu": "30"})
    feed(store, queues=[*research_queues("4"), queue("default"), queue("archive", state="Closed")],
         jobs=[job, big, gpu_job("old", "archive", 1)[0]],
         groups=[group, job_podgroup(big, {"cpu": "120"}), gpu_job("old", "archive", 1)[1]])
    assert reasons(store) == {("train", "research-dev", QUEUE_CAPABILITY, "nvidia_com_gpu"): 1,
                              ("biggang", "root", CLUSTER_TOO_SMALL, "cpu"): 1,
                              ("old", "archive", QUEUE_CLOSED, ""): 1}
    # research-dev frees its GPUs: the parent blocks now (a queue change is picked up at the next scrape).
    feed(store, queues=research_queues("0")[2:], event=MODIFIED)
    assert ("train", "research", QUEUE_CAPABILITY, "nvidia_com_gpu") in reasons(store)


def test_series_disappear_when_the_job_runs_or_is_deleted() -> None:
    store = ExporterStore()
    job, group = gpu_job("train", "research-dev", 4)
    feed(store, queues=research_queues("4"), jobs=[job], groups=[group])
    assert len(reasons(store)) == 1
    running_group = copy.deepcopy(group)
    running_group["status"] = {"phase": "Running", "running": 4}
    feed(store, groups=[running_group], event=MODIFIED)  # the gang is placed before the Job says Running
    assert reasons(store) == {}
    running = copy.deepcopy(job)
    running["status"]["state"]["phase"] = "Running"
    feed(store, jobs=[running], event=MODIFIED)
    assert reasons(store) == {}
    other, other_group = gpu_job("other", "research-dev", 4)
    feed(store, jobs=[other], groups=[other_group])
    assert len(reasons(store)) == 1
    feed(store, jobs=[other], groups=[other_group], event=DELETED)
    assert reasons(store) == {} and "volcano_job_pending_reason" not in b"".join(store.chunks()).decode()


def test_gzip_scrapes_carry_the_reasons_and_follow_the_queues_too() -> None:
    store = ExporterStore()
    job, group = gpu_job("train", "research-dev", 4)
    feed(store, queues=research_queues("4"), jobs=[job], groups=[group])

    def gzipped() -> bytes:
        return gzip.decompress(store.gzip())

    assert b'queue="research-dev",reason="queue_capability"' in gzipped()
    feed(store, queues=research_queues("0")[2:], event=MODIFIED)
    body = gzipped()  # the queue change is applied by a gzip scrape as well
    assert b'queue="research",reason="queue_capability"' in body and body == b"".join(store.chunks())


def test_a_queue_not_listed_yet_is_not_called_missing() -> None:
    """The Job informer may list before the Queue one: until the Queues are listed, no `queue_missing`."""
    store = ExporterStore()
    listed = [False]
    store.waiting.queues_listed = lambda: listed[0]
    job, group = gpu_job("train", "research-dev", 4)
    feed(store, jobs=[job], groups=[group])
    assert reasons(store) == {("train", "research-dev", WAITING, ""): 1}
    feed(store, queues=[queue("root", parent=None)])
    assert reasons(store) == {("train", "research-dev", WAITING, ""): 1}
    listed[0] = True  # research-dev really does not exist
    assert reasons(store) == {("train", "research-dev", QUEUE_MISSING, ""): 1}


def test_a_denied_family_tracks_nothing() -> None:
    denied = "volcano_job_pending_reason,volcano_job_queue_position"  # both need the waiting jobs
    store = ExporterStore(options=Options(families=family_filter("", denied)))
    job, group = gpu_job("train", "research-dev", 4)
    feed(store, queues=research_queues("4"), jobs=[job], groups=[group, objects.kubeflow_podgroup()])
    assert reasons(store) == {} and not store.waiting.jobs and not store.waiting.own_groups
    assert select(scrape(store), "volcano_job_info")


def test_other_operators_podgroups_are_explained_by_owner() -> None:
    store = ExporterStore()
    feed(store, queues=[queue("root", parent=None), queue("nlp", capability={GPU: "2"})],
         groups=[objects.kubeflow_podgroup()])
    assert reasons(store) == {("bert", "nlp", "queue_too_small", "nvidia_com_gpu"): 1}
    feed(store, groups=[objects.kubeflow_podgroup()], event=DELETED)
    assert reasons(store) == {}


def test_shards_without_queue_rows_still_explain_their_jobs() -> None:
    store = ExporterStore(emit_queues=False)
    job, group = gpu_job("train", "research-dev", 4)
    feed(store, queues=research_queues("4"), jobs=[job], groups=[group])
    s = scrape(store)
    assert not select(s, "volcano_queue_info")
    assert len(select(s, "volcano_job_pending_reason", reason=QUEUE_CAPABILITY)) == 1


def test_queue_changes_redo_only_the_jobs_whose_labels_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's `allocated` moves with every placement: 10k jobs waiting on the cluster are not redone
    (nor re-rendered) unless their reason, queue or resource changes; a scrape stays cheap."""

    calls = [0]
    real = waiting.explain

    def counting(*args: Any, **kwargs: Any) -> Explanation:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(waiting, "explain", counting)
    store = ExporterStore()
    feed(store, queues=[queue("root", parent=None, allocated={GPU: "22"}), queue("default")])
    for i in range(10_000):
        feed(store, jobs=[gpu_job(f"train-{i}", "default", 4)[0]], groups=[gpu_job(f"train-{i}", "default", 4)[1]])

    def timed_scrape() -> tuple[bytes, float]:
        started = time.perf_counter()
        body = b"".join(store.chunks())
        return body, time.perf_counter() - started

    timed_scrape()
    calls[0] = 0
    timings = []
    for allocated in ("21", "23", "22"):  # still full: same labels
        feed(store, queues=[queue("root", parent=None, allocated={GPU: allocated})], event=MODIFIED)
        body, seconds = timed_scrape()
        timings.append(seconds)
    assert calls[0] == 0
    assert body.count(b'volcano_job_pending_reason{') == 10_000
    assert body.count(b'reason="cluster_full"') == 10_000
    feed(store, queues=[queue("root", parent=None, allocated={GPU: "0"})], event=MODIFIED)  # room for all
    body, seconds = timed_scrape()
    assert calls[0] == 10_000 and body.count(b'reason="waiting"') == 10_000
    assert sorted(timings)[1] < 0.5 and seconds < 2, (timings, seconds)  # loose: 2 shared cores


# ---- the recordings of real Volcano v1.12.4 (the ground truth) ------------------------------------------------


def replayed_reasons(name: str, after: Callable[[Recorded, set[tuple[str, str, str, str]]], None]) -> None:
    """Each recorded event through the exporter's own informers; `after` sees the reasons after each one."""
    from tests.exporter.test_replay import Replay

    scenario = load(name)
    replay = Replay(scenario)
    for event in scenario.events:
        if event.what == "events":
            continue
        replay.apply(event.type, event.what, event.object)
        after(event, {(d["job_name"], d["queue"], d["reason"], d["resource"])
                      for labels in select(replay.scrape(), "volcano_job_pending_reason") for d in [dict(labels)]})


def test_recorded_gang_too_big_is_too_big_for_the_cluster() -> None:
    seen: list[set[tuple[str, str, str, str]]] = []
    replayed_reasons("gang-too-big", lambda event, reasons: seen.append(reasons))
    assert seen[-1] == {("biggang", "root", CLUSTER_TOO_SMALL, "cpu")}  # 120 cores asked, 96 in the cluster


def test_recorded_queue_capability_wait_names_the_queue_then_goes() -> None:
    seen: list[set[tuple[str, str, str, str]]] = []
    replayed_reasons("queue-capability-wait", lambda event, reasons: seen.append(reasons))
    # `second` (1 core) waits while `first` holds both cores of `small`; both run in the end.
    assert {("second", "small", QUEUE_CAPABILITY, "cpu")} in seen
    assert all(reason in (QUEUE_CAPABILITY, WAITING) for reasons in seen for _, _, reason, _ in reasons)
    assert seen[-1] == set()


def test_recorded_hierarchical_queues_leave_no_series() -> None:
    seen: list[set[tuple[str, str, str, str]]] = []
    replayed_reasons("hierarchical-queues", lambda event, reasons: seen.append(reasons))
    assert any(seen) and seen[-1] == set()


def test_sharded_exporters_explain_the_simulated_gang_once(tmp_path: Path) -> None:
    """The app's wiring: every shard watches the Queues (only shard 0 renders them), one shard owns the job."""
    sim = SimulatorThread(scenario="recorded-gang-too-big", speed=60).start()
    shards: list[Exporter] = []
    try:
        shards = [start_exporter(sim, tmp_path, shard=i, total_shards=2) for i in range(2)]

        def found() -> list[tuple[str, str, str]]:
            return [(d["queue"], d["reason"], d["resource"]) for shard in shards
                    for labels in select(parse(shard.scrape()), "volcano_job_pending_reason") for d in [dict(labels)]]

        wait_for(lambda: found() == [("root", CLUSTER_TOO_SMALL, "cpu")], timeout=30)
        assert {"root", "default"} <= set(shards[1].store.waiting.queues)
        assert not select(parse(shards[1].scrape()), "volcano_queue_info")
    finally:
        for shard in shards:
            shard.stop()
        sim.stop()
