"""The wait / run histograms per queue x priority class (exporter.families.queue_wait), through the store."""

from __future__ import annotations

import time
import zlib
from typing import Any

import pytest

from tests.exporter.scrape import parse, select, value
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.model import parse_job
from volcano_monitor.exporter.families import queue_wait
from volcano_monitor.exporter.store import ExporterStore

T = 1_800_000_000.0  # the exporter's start in these tests
WAIT = "volcano_queue_job_wait_duration_seconds"
RUN = "volcano_queue_job_run_duration_seconds"


def ts(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def job(conditions: list[tuple[str, float]], phase: str, *, created: float, uid: str = "uid-1", name: str = "j",
        queue: str = "q", priority: str = "high", rv: str = "1") -> dict[str, Any]:
    """A Volcano Job as the controller writes it: one condition appended per status write."""
    return {
        "metadata": {"name": name, "namespace": "n", "uid": uid, "resourceVersion": rv,
                     "creationTimestamp": ts(created)},
        "spec": {"queue": queue, "priorityClassName": priority, "minAvailable": 1,
                 "tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}]},
        "status": {"state": {"phase": phase},
                   "conditions": [{"status": s, "lastTransitionTime": ts(t)} for s, t in conditions]},
    }


def scrape(store: ExporterStore) -> dict[Any, float]:
    out: list[bytes] = []
    store.write(out)
    return parse(b"".join(out))


def count(store: ExporterStore, family: str, **labels: str) -> float:
    return value(scrape(store), f"{family}_count", **labels)


def total(store: ExporterStore, family: str, **labels: str) -> float:
    return value(scrape(store), f"{family}_sum", **labels)


def test_wait_is_observed_once_per_run_across_updates_and_relists() -> None:
    store = ExporterStore(observe_since=T)
    created = T + 10
    pending = [("Pending", created), ("Pending", created)]
    store.on_job(ADDED, parse_job(job(pending, "Pending", created=created)))
    s = scrape(store)  # the series exist at zero before the first observation (rate() then sees it)
    assert value(s, f"{WAIT}_count", queue="q", priority_class="high") == 0
    assert value(s, f"{WAIT}_bucket", queue="q", priority_class="high", le="+Inf") == 0

    running = [*pending, ("Running", created + 42)]
    store.on_job(MODIFIED, parse_job(job(running, "Running", created=created, rv="2")))
    # Volcano appends another Running condition on every status write: the start stays the first one.
    for i in range(5):
        running.append(("Running", created + 50 + i))
        store.on_job(MODIFIED, parse_job(job(running, "Running", created=created, rv=str(3 + i))))
    store.on_job(ADDED, parse_job(job(running, "Running", created=created, rv="9")))  # a relist
    assert count(store, WAIT, queue="q", priority_class="high") == 1
    assert total(store, WAIT, queue="q", priority_class="high") == 42
    assert count(store, RUN, queue="q", priority_class="high") == 0

    done = [*running, ("Completed", created + 100)]
    for rv in ("10", "11", "12"):  # a terminal Job keeps being rewritten (recorded: 19 more MODIFIED)
        store.on_job(MODIFIED, parse_job(job(done, "Completed", created=created, rv=rv)))
    assert count(store, RUN, queue="q", priority_class="high") == 1
    assert total(store, RUN, queue="q", priority_class="high") == 58
    assert count(store, WAIT, queue="q", priority_class="high") == 1


def test_buckets_are_cumulative_with_le_bounds() -> None:
    store = ExporterStore(observe_since=T)
    for i, waited in enumerate((1, 30, 31, 700000)):  # on a bound, just above one, beyond the last
        created = T + 1
        raw = job([("Pending", created), ("Running", created + waited)], "Running", created=created, uid=f"u{i}")
        store.on_job(ADDED, parse_job(raw))
    buckets = {dict(labels)["le"]: v for labels, v in select(scrape(store), f"{WAIT}_bucket").items()}
    assert len(buckets) == len(queue_wait.BUCKETS) + 1
    assert buckets["1"] == 1 and buckets["25"] == 1 and buckets["30"] == 2 and buckets["40"] == 3
    assert buckets["604800"] == 3 and buckets["+Inf"] == 4
    assert total(store, WAIT, queue="q", priority_class="high") == 1 + 30 + 31 + 700000


def test_jobs_running_before_the_exporter_started_are_not_observed() -> None:
    """A restarted exporter sees every Job again in its first list: what turned Running before it
    started was counted by the previous process (or before any), so it must not count again."""
    store = ExporterStore(observe_since=T)
    created = T - 100
    running = [("Pending", created), ("Running", created + 20)]
    store.on_job(ADDED, parse_job(job(running, "Running", created=created)))
    assert count(store, WAIT, queue="q", priority_class="high") == 0
    # ... but its run time counts once it finishes after the start (the previous process never saw that).
    done = [*running, ("Completed", T + 50)]
    store.on_job(MODIFIED, parse_job(job(done, "Completed", created=created, rv="2")))
    assert count(store, RUN, queue="q", priority_class="high") == 1
    assert total(store, RUN, queue="q", priority_class="high") == T + 50 - (created + 20)


def test_restarted_exporter_does_not_count_a_job_twice() -> None:
    created = T + 5
    running = [("Pending", created), ("Running", created + 15)]
    done = [*running, ("Failed", created + 60)]
    first = ExporterStore(observe_since=T)
    first.on_job(ADDED, parse_job(job(running, "Running", created=created)))
    first.on_job(MODIFIED, parse_job(job(done, "Failed", created=created, rv="2")))
    assert count(first, WAIT, queue="q", priority_class="high") == 1
    assert count(first, RUN, queue="q", priority_class="high") == 1

    second = ExporterStore(observe_since=created + 70)  # the exporter restarted after the Job finished
    second.on_job(ADDED, parse_job(job(done, "Failed", created=created, rv="2")))
    assert count(second, WAIT, queue="q", priority_class="high") == 0
    assert count(second, RUN, queue="q", priority_class="high") == 0


def test_restarting_job_observes_each_run_once_and_waits_from_restarting() -> None:
    """maxRetry > 1 and PodFailed -> RestartJob (recorded pod-oomkilled-job-fails): Pending, Running,
    Restarting, Pending, Running, Restarting, Failed. The second run waited from its Restarting condition."""
    store = ExporterStore(observe_since=T)
    created = T + 1
    first = [("Pending", created), ("Pending", created), ("Running", created + 10), ("Running", created + 12)]
    store.on_job(ADDED, parse_job(job(first, "Running", created=created)))
    restarting = [*first, ("Restarting", created + 20), ("Pending", created + 21)]
    store.on_job(MODIFIED, parse_job(job(restarting, "Pending", created=created, rv="2")))
    assert count(store, WAIT, queue="q", priority_class="high") == 1  # waiting again: nothing new yet
    second = [*restarting, ("Pending", created + 22), ("Running", created + 27)]
    store.on_job(MODIFIED, parse_job(job(second, "Running", created=created, rv="3")))
    assert count(store, WAIT, queue="q", priority_class="high") == 2
    assert total(store, WAIT, queue="q", priority_class="high") == 10 + 7  # 27 - 20, not 27 - 0
    failed = [*second, ("Restarting", created + 40), ("Failed", created + 40)]
    store.on_job(MODIFIED, parse_job(job(failed, "Failed", created=created, rv="4")))
    store.on_job(MODIFIED, parse_job(job(failed, "Failed", created=created, rv="5")))
    assert count(store, WAIT, queue="q", priority_class="high") == 2
    assert count(store, RUN, queue="q", priority_class="high") == 1  # the run that failed: 40 - 27
    assert total(store, RUN, queue="q", priority_class="high") == 13


def test_record_is_pruned_on_delete_and_series_are_per_queue_and_priority() -> None:
    store = ExporterStore(observe_since=T)
    for i, (queue, priority) in enumerate((("a", "high"), ("a", ""), ("b", "high"))):
        raw = job([("Pending", T + 1), ("Running", T + 3)], "Running", created=T + 1, uid=f"u{i}", name=f"j{i}",
                  queue=queue, priority=priority)
        store.on_job(ADDED, parse_job(raw))
    assert len(store.ledger.seen) == 3
    s = scrape(store)
    assert {dict(k)["queue"] + "/" + dict(k)["priority_class"] for k in select(s, f"{WAIT}_count")} == {
        "a/high", "a/", "b/high"}
    for i, (queue, priority) in enumerate((("a", "high"), ("a", ""), ("b", "high"))):
        raw = job([("Pending", T + 1), ("Running", T + 3)], "Running", created=T + 1, uid=f"u{i}", name=f"j{i}",
                  queue=queue, priority=priority)
        store.on_job(DELETED, parse_job(raw))
    assert store.ledger.seen == {}
    assert count(store, WAIT, queue="a", priority_class="high") == 1  # the histograms keep what they counted


@pytest.mark.parametrize("raw", [
    {"metadata": {"name": "no-uid", "namespace": "n"}, "status": {"conditions": [
        {"status": "Running", "lastTransitionTime": ts(T + 5)}]}},
    {"metadata": {"name": "bad", "namespace": "n", "uid": "u"}, "status": {"conditions": [
        {"status": "Running", "lastTransitionTime": 17}, "Running", None]}},
    {"metadata": {"name": "no-creation", "namespace": "n", "uid": "u2"}, "status": {"conditions": [
        {"status": "Running", "lastTransitionTime": ts(T + 5)}]}},
])
def test_malformed_jobs_are_counted_not_observed(raw: dict[str, Any]) -> None:
    store = ExporterStore(observe_since=T)
    store.on_job(ADDED, parse_job(raw))
    assert count(store, WAIT, queue="default", priority_class="") == 0
    problems = store.parse_problems["jobs"]
    assert problems > 0 or raw["metadata"]["name"] != "bad"


def test_gzip_scrape_carries_the_histograms_and_follows_their_changes() -> None:
    """The gzip body (a sequence of members) decompresses to the plain body; the histograms' member is
    cached between scrapes and recompressed when an observation changes them."""
    store = ExporterStore(observe_since=T)

    def gunzip_all(data: bytes) -> bytes:
        out, rest = b"", data
        while rest:
            inflater = zlib.decompressobj(wbits=31)
            out += inflater.decompress(rest)
            rest = inflater.unused_data
        return out

    store.on_job(ADDED, parse_job(job([("Pending", T + 1)], "Pending", created=T + 1)))
    for rv, phase, conditions in (("2", "Running", [("Pending", T + 1), ("Running", T + 8)]),
                                  ("3", "Completed", [("Pending", T + 1), ("Running", T + 8), ("Completed", T + 20)])):
        first = gunzip_all(store.gzip())
        again = gunzip_all(store.gzip())  # from the cache
        assert first == again == b"".join(store.chunks())
        store.on_job(MODIFIED, parse_job(job(conditions, phase, created=T + 1, rv=rv)))
        changed = gunzip_all(store.gzip())
        assert changed == b"".join(store.chunks()) != first
    assert count(store, RUN, queue="q", priority_class="high") == 1
