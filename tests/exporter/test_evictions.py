"""volcano_pod_evictions_total: evictions and preemptions from pods and Events, each pod once."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.exporter import objects
from tests.exporter.scrape import parse, select
from volcano_monitor.core.eviction import about_eviction, parse_eviction_event
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.kube.resources import EVENTS
from volcano_monitor.core.model import parse_pod
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.families import evictions
from volcano_monitor.exporter.sharding import shard_of
from volcano_monitor.exporter.store import ExporterStore

T = 1_800_000_000.0  # the exporter's start
NAME = "volcano_pod_evictions_total"
POD_UID = "4a7e1c3d-3b0f-4a61-8f1c-9d2b8e0c5f11"  # objects.VOLCANO_POD: ml/train-worker-1, queue research


def ts(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def pod(*conditions: dict[str, Any], reason: str = "", rv: str = "1", name: str = "train-worker-1",
        uid: str = POD_UID, queue: str = "research") -> dict[str, Any]:
    raw = objects.volcano_pod()
    raw["metadata"].update(name=name, uid=uid, resourceVersion=rv)
    raw["metadata"]["labels"]["volcano.sh/queue-name"] = queue
    raw["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}, *conditions]
    if reason:
        raw["status"]["reason"] = reason
    return raw


def volcano_condition(action: str, at: float, kind: str = "DisruptionTarget") -> dict[str, Any]:
    """What Volcano's evictor writes before it deletes the pod (`Ready=False, reason Evict` before
    DisruptionTarget was used)."""
    status, reason = ("True", "PreemptionByScheduler") if kind == "DisruptionTarget" else ("False", "Evict")
    return {"type": kind, "status": status, "reason": reason, "message": f"Pod is evicted, because of {action}",
            "lastTransitionTime": ts(at)}


def event(reason: str, message: str, at: float, *, uid: str = POD_UID, name: str = "train-worker-1",
          related: dict[str, Any] | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "metadata": {"name": f"{name}.1", "namespace": "ml", "uid": f"ev-{reason}-{uid}"},
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": name, "uid": uid},
        "reason": reason, "message": message, "type": "Warning", "count": 1,
        "firstTimestamp": ts(at), "lastTimestamp": ts(at), "source": {"component": "volcano"},
    }
    if related is not None:
        raw["related"] = related
    return raw


def send_event(store: ExporterStore, raw: dict[str, Any], event_type: str = ADDED) -> None:
    parsed = store.parse_eviction_event(raw)
    assert parsed is not None
    store.on_eviction_event(event_type, parsed)


def counts(store: ExporterStore) -> dict[tuple[str, str, str, str], float]:
    out: list[bytes] = []
    store.write(out)
    return {(d["namespace"], d["queue"], d["reason"], d["preemptor_queue"]): v
            for labels, v in select(parse(b"".join(out)), NAME).items() for d in [dict(labels)]}


def test_volcano_preemption_counts_once_from_condition_event_delete_and_relist() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    assert counts(store) == {}
    evicted = pod(volcano_condition("preempt", T + 5), rv="2")
    store.on_pod(MODIFIED, parse_pod(evicted))
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T + 5))
    store.on_pod(ADDED, parse_pod(evicted))  # a relist
    store.on_pod(DELETED, parse_pod(evicted))
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T + 5))  # the Events relisted
    # preempt takes victims from the preemptor's own queue: the preemptor's queue is the pod's.
    assert counts(store) == {("ml", "research", "preempt", "research"): 1}


def test_reclaim_through_the_older_ready_condition_has_no_preemptor_queue() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    store.on_pod(MODIFIED, parse_pod(pod(volcano_condition("reclaim", T + 5, kind="Ready"), rv="2")))
    assert counts(store) == {("ml", "research", "reclaim", ""): 1}


def test_event_first_then_condition_counts_once() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    send_event(store, event("Evict", "Pod is evicted, because of reclaim", T + 5))
    store.on_pod(MODIFIED, parse_pod(pod(volcano_condition("reclaim", T + 5), rv="2")))
    assert counts(store) == {("ml", "research", "reclaim", ""): 1}


def test_evictions_older_than_the_exporter_are_not_counted() -> None:
    """A restarted exporter lists evicted pods and their Events again: the previous process counted them."""
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod(volcano_condition("preempt", T - 30))))
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T - 30))
    store.on_pod(ADDED, parse_pod(pod(reason="Evicted", uid="other-uid", name="other")))  # no time: first seen
    assert counts(store) == {}


def test_pod_deleted_during_a_watch_gap_is_counted_from_its_event() -> None:
    """The relist's DELETED carries the last version the exporter held, without the condition."""
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    store.on_pod(DELETED, parse_pod(pod()))
    assert counts(store) == {}
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T + 9))
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T + 9), MODIFIED)
    assert counts(store) == {("ml", "research", "preempt", "research"): 1}


def test_events_about_unknown_pods_are_ignored() -> None:
    store = ExporterStore(observe_since=T)
    send_event(store, event("Evict", "Pod is evicted, because of preempt", T + 9, uid="not-ours", name="x"))
    assert counts(store) == {}


def test_kube_scheduler_preemption_names_the_preemptor_queue() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    store.on_pod(ADDED, parse_pod(pod(name="urgent", uid="11111111-2222-3333-4444-555555555555", queue="prod")))
    store.on_pod(ADDED, parse_pod(pod(name="victim-2", uid="victim-2-uid")))
    send_event(store, event("Preempted", "Preempted by pod 11111111-2222-3333-4444-555555555555 on node n1",
                            T + 3))
    send_event(store, event("Preempted", "Preempted by pod x on node n1", T + 3, uid="victim-2-uid",
                            name="victim-2", related={"kind": "Pod", "namespace": "ml", "name": "urgent"}))
    assert counts(store) == {("ml", "research", "PreemptionByScheduler", "prod"): 2}
    # ... and its DisruptionTarget condition, seen after, finds the pods counted.
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "default-scheduler: preempting to accommodate a higher priority pod",
                 "lastTransitionTime": ts(T + 3)}
    store.on_pod(MODIFIED, parse_pod(pod(condition, rv="2")))
    assert counts(store) == {("ml", "research", "PreemptionByScheduler", "prod"): 2}


def test_kubelet_eviction_without_a_time_counts_when_seen_happening() -> None:
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(pod()))
    store.on_pod(MODIFIED, parse_pod(pod(reason="Evicted", rv="2")))
    store.on_pod(MODIFIED, parse_pod(pod(reason="Evicted", rv="3")))
    send_event(store, event("Evicted", "The node was low on resource: memory.", T + 1))
    assert counts(store) == {("ml", "research", "TerminationByKubelet", ""): 1}


def test_counted_pods_are_forgotten_after_they_are_gone() -> None:
    now = [T + 100]
    store = ExporterStore(observe_since=T)
    store.evictions.clock = lambda: now[0]
    evicted = pod(volcano_condition("preempt", T + 5))
    store.on_pod(ADDED, parse_pod(pod()))
    store.on_pod(MODIFIED, parse_pod(evicted))
    store.on_pod(DELETED, parse_pod(evicted))
    assert POD_UID in store.evictions.counted and POD_UID in store.evictions.recent
    now[0] += evictions.KEEP_SECONDS + 1
    store.on_pod(DELETED, parse_pod(pod(name="later", uid="later-uid")))  # deletions are frequent: they prune
    assert store.evictions.counted == {} and set(store.evictions.recent) == {"later-uid"}
    assert counts(store) == {("ml", "research", "preempt", "research"): 1}


@pytest.mark.parametrize("raw", [
    {"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Evict"},  # no uid
    {"involvedObject": {"kind": "Pod", "uid": "u"}, "reason": "Evict"},  # no name
    {"involvedObject": {"kind": "Pod", "name": 3, "uid": ["u"]}, "reason": "Preempted", "message": 7},
])
def test_malformed_eviction_events_are_counted_and_skipped(raw: dict[str, Any]) -> None:
    store = ExporterStore(observe_since=T)
    assert store.parse_eviction_event(raw) is None
    assert store.parse_problems["events"] == 1


@pytest.mark.parametrize("raw", [
    None, [], "Evict", {"reason": "Evict"}, {"reason": "Evict", "involvedObject": "pod"},
    {"reason": "Evict", "involvedObject": {"kind": "PodGroup"}},
    {"reason": "Scheduled", "involvedObject": {"kind": "Pod"}},
])
def test_other_events_are_not_eviction_events(raw: object) -> None:
    assert not about_eviction(raw)
    assert parse_eviction_event(raw) is None


def test_odd_reasons_become_bounded_label_values() -> None:
    weird = pod({"type": "DisruptionTarget", "status": "True", "reason": "x" * 300, "lastTransitionTime": ts(T + 1)})
    store = ExporterStore(observe_since=T)
    store.on_pod(ADDED, parse_pod(weird))
    send_event(store, event("Evict", "Pod is evicted, because of SOMETHING ODD", T + 1, uid="u2", name="p2"))
    assert counts(store) == {("ml", "research", "other", ""): 1}


def test_each_shard_takes_the_events_of_its_own_pods() -> None:
    uids = [f"uid-{i}" for i in range(20)]
    for shard in (0, 1):
        exporter = Exporter(client.ApiClient(), shard=shard, total_shards=2)
        informer = next(i for i in exporter.informers if i.kind == EVENTS)
        assert informer.predicate is not None
        taken = {uid for uid in uids if informer.predicate(event("Evict", "m", T, uid=uid))}
        assert taken == {uid for uid in uids if shard_of(uid, 2) == shard}
        assert informer in exporter.optional  # not needed for /readyz


def test_the_memory_of_deleted_pods_keeps_the_newest_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst of deletions (an array job finishing) may not hold every pod for RECENT_SECONDS: the oldest go
    first, in halves of the bound, and an Event about a pod still remembered is attributed."""
    monkeypatch.setattr(evictions, "RECENT_MAX", 50)
    store = ExporterStore(observe_since=T)
    store.evictions.clock = lambda: T + 100
    for n in range(120):
        store.on_pod(DELETED, parse_pod(pod(name=f"w-{n}", uid=f"uid-{n}")))
    assert set(store.evictions.recent) == {f"uid-{n}" for n in range(75, 120)}  # the newest 25 to 50
    assert len(store.evictions.recent) == 45
    send_event(store, event("Evict", "Pod is evicted, because of reclaim", T + 50, uid="uid-119", name="w-119"))
    send_event(store, event("Evict", "Pod is evicted, because of reclaim", T + 50, uid="uid-0", name="w-0"))
    assert counts(store) == {("ml", "research", "reclaim", ""): 1}


def test_deleted_pods_are_kept_between_half_and_the_whole_keep_time() -> None:
    memory = evictions.DeletedPods(keep_seconds=600, max_pods=1000, now=0)
    memory.add("a", ("ml", "research"), 10)
    memory.prune(299)
    assert memory.get("a") == ("ml", "research")
    memory.add("b", ("ml", "research"), 301)  # the generation holding "a" turns older
    assert memory.get("a") is not None and "b" in memory
    memory.prune(601)  # "a" is 591 s old: its generation goes
    assert "a" not in memory and memory.get("b") == ("ml", "research")
    memory.prune(1300)  # nothing deleted for longer than the keep time: all gone
    assert len(memory) == 0
    memory.add("c", ("ml", "research"), 5)  # a clock that went back ages the generation from then
    memory.prune(300)
    assert "c" in memory


def test_a_deleted_pod_costs_the_memory_of_deleted_pods_little() -> None:
    """Every deleted pod is remembered for minutes: at the bound (20,000) a few hundred bytes each is
    megabytes. Its namespace and queue are shared with the other pods of the same place, its name is
    not kept (an Event is attributed by UID); what stays is the UID and a table slot. (Measured: 21 bytes
    besides the UID; an expiry queue beside the table made it 172, with the name kept as well.)"""
    import gc
    import tracemalloc

    store = ExporterStore(observe_since=T)
    pods = [parse_pod(pod(name=f"array-{n:06d}-shard-{n % 40}", uid=f"{n:08d}-3b0f-4a61-8f1c-9d2b8e0c5f11"))
            for n in range(5000)]
    tracemalloc.start()  # after the pods were made: their UIDs and names are not counted
    try:
        before = tracemalloc.get_traced_memory()[0]
        for deleted in pods:
            store.evictions.on_pod(deleted, "research", None, deleted=True)
        pods.clear()
        gc.collect()
        per_pod = (tracemalloc.get_traced_memory()[0] - before) / 5000
    finally:
        tracemalloc.stop()
    assert len(store.evictions.recent) == 5000
    assert per_pod < 60, f"{per_pod:.0f} bytes per deleted pod besides its UID and name"
