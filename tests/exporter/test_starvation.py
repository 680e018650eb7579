"""Kueue's starvation signals, from the exporter: `volcano_queue_oldest_waiting_job_created_timestamp_seconds` (the
queue's longest-waiting job) and `volcano_job_preempted_pods` (a gauge one preemption can alert on)."""

from __future__ import annotations

import calendar
from typing import Any

from tests.exporter import objects
from tests.exporter.scrape import parse, select
from tests.exporter.test_evictions import POD_UID, T, event, pod, send_event, ts, volcano_condition
from tests.exporter.test_queue_position import feed, job, with_classes
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.model import parse_pod, parse_podgroup
from volcano_monitor.exporter.cardinality import Options, family_filter
from volcano_monitor.exporter.store import ExporterStore

OLDEST = "volcano_queue_oldest_waiting_job_created_timestamp_seconds"
PREEMPTED = "volcano_job_preempted_pods"
TEN = calendar.timegm((2026, 12, 1, 10, 0, 0))  # the creation minute of tests.exporter.test_queue_position.job


def oldest(store: ExporterStore) -> dict[str, float]:
    return {dict(labels)["queue"]: v for labels, v in select(parse(b"".join(store.chunks())), OLDEST).items()}


def preempted(store: ExporterStore) -> dict[tuple[str, str, str], float]:
    return {(d["namespace"], d["job_name"], d["queue"]): v
            for labels, v in select(parse(b"".join(store.chunks())), PREEMPTED).items() for d in [dict(labels)]}


# ---- the oldest waiting job per queue ---------------------------------------------------------------------

def test_oldest_waiting_follows_arrivals_and_starts() -> None:
    store = with_classes(queues=("narrow", "wide"))
    assert oldest(store) == {}
    late, early, other = job("late", 30), job("early", 5), job("other", 9, queue_name="wide")
    feed(store, late)
    assert oldest(store) == {"narrow": TEN + 30}
    feed(store, early, other)
    assert oldest(store) == {"narrow": TEN + 5, "wide": TEN + 9}
    raw, group = early  # the oldest starts: the next one is the oldest waiting
    group["status"] = {"phase": "Running", "running": 1}
    raw["status"] = {"state": {"phase": "Running"}, "running": 1}
    feed(store, (raw, group), event=MODIFIED)
    assert oldest(store) == {"narrow": TEN + 30, "wide": TEN + 9}
    feed(store, late, other, event=DELETED)
    assert oldest(store) == {}


def test_oldest_waiting_only_from_shard_zero_and_not_when_denied() -> None:
    other_shard = ExporterStore(emit_queues=False)
    feed(other_shard, job("early", 5))
    assert oldest(other_shard) == {}
    denied = ExporterStore(options=Options(families=family_filter("", OLDEST)))
    feed(denied, job("early", 5))
    assert oldest(denied) == {}


# ---- preempted pods per job -------------------------------------------------------------------------------

def group_of_pod() -> dict[str, Any]:
    """The PodGroup objects.volcano_pod() belongs to (ml/train-<uid>, queue research)."""
    raw = objects.kubeflow_podgroup()
    view = parse_pod(objects.volcano_pod())
    raw["metadata"].update(name=view.podgroup, namespace="ml", uid="pg-train")
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train",
                                           "uid": "job-train", "controller": True}]
    raw["spec"]["queue"] = "research"
    return raw


def test_each_preempted_pod_counts_once_per_job_and_evictions_for_the_node_do_not() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    assert preempted(store) == {}
    store.on_pod(MODIFIED, parse_pod(pod(volcano_condition("preempt", T + 5), rv="2")))
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T + 5))  # the same pod: still one
    assert preempted(store) == {("ml", "train", "research"): 1}
    second = pod(volcano_condition("reclaim", T + 9), name="train-worker-2", uid="5b8f2d4e-0000-4000-8000-000000000002")
    store.on_pod(ADDED, parse_pod(second))
    assert preempted(store) == {("ml", "train", "research"): 2}
    drained = pod({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                   "lastTransitionTime": ts(T + 12)}, name="train-worker-3", uid="5b8f2d4e-0000-4000-8000-000000000003")
    store.on_pod(ADDED, parse_pod(drained))  # a drain is an eviction, not a preemption
    assert preempted(store) == {("ml", "train", "research"): 2}


def test_an_event_after_the_pod_is_gone_counts_and_the_podgroup_takes_the_series_with_it() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    store.on_pod(DELETED, parse_pod(pod(rv="3")))  # deleted during a watch gap: no condition seen
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T + 5, uid=POD_UID))
    assert preempted(store) == {("ml", "train", "research"): 1}
    group = parse_podgroup(group_of_pod())
    store.on_podgroup_owner(ADDED, group)
    assert preempted(store) == {("ml", "train", "research"): 1}
    store.on_podgroup_owner(DELETED, group)
    assert preempted(store) == {}


def test_preemptions_before_the_exporter_started_are_not_counted() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod(volcano_condition("preempt", T - 60))))
    assert preempted(store) == {}
