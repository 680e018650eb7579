"""What an informer event or a batch of usage samples changes in the watchdog's memory, applied exactly
once, and the database writes it calls for.

Why the split: the worker writes a batch in one transaction and, when the database is unreachable,
retries the same batch. Detectors remember what they saw (a container's OOM kill, the pods of a gang);
fed the same event twice, some decide differently the second time ("the container runs again") and
the first attempt's alert would be lost with the rolled-back transaction. So every event is observed
once, here, and what must be stored comes out as plain `Write`s that the worker can replay as often
as the database needs (issue 12: a retried batch lost PodOOMKilled).

The observer also keeps what a replica needs to take over as leader: the latest view of every run
(a new leader writes them into the ledger) and the event-driven alerts active now (it applies them to
the alert book it loads from the database). Followers observe everything and write nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.model import Job, Pod, PodGroup, Queue
from volcano_monitor.watchdog.findings.detectors.failure import FailureDetector
from volcano_monitor.watchdog.findings.detectors.gang import GangDetector
from volcano_monitor.watchdog.findings.detectors.queue import QueueDetector
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook
from volcano_monitor.watchdog.findings.recommendations.policy import RESOURCES, ContainerSpec, gpu_resources
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.events import EventView, SchedulerNotes
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.signals import Signal

__all__ = ["LEDGER_JOB", "LEDGER_PODGROUP", "SIGNALS", "Observer", "Write"]

LEDGER_JOB, LEDGER_PODGROUP, SIGNALS = "ledger_job", "ledger_podgroup", "signals"
LEDGER_QUEUE = "ledger_queue"  # a queue appeared or moved: its runs' queue_path follows
# history read from Prometheus, merged into the histograms (watchdog.findings.recommendations.backfill)
BACKFILL = "backfill"


@dataclass(frozen=True, slots=True)
class Write:
    """One thing to store: a ledger upsert of a Job / PodGroup (`event_type` says ADDED, MODIFIED or
    DELETED) or detector signals for the alert book."""

    kind: str
    event_type: str
    obj: Any


class Observer:
    def __init__(self, index: ClusterIndex, failures: FailureDetector, gangs: GangDetector,
                 queues: QueueDetector, notes: SchedulerNotes, recorder: UsageRecorder,
                 histograms: HistogramBook, clock: Callable[[], float], unstored_seconds: float = 60.0,
                 node_allocatable: Callable[[], dict[str, float]] = dict) -> None:
        self.index = index
        self.failures = failures
        self.gangs = gangs
        self.queues = queues
        self.notes = notes
        self.recorder = recorder
        self.histograms = histograms
        self.clock = clock
        self.runs: dict[str, Job | PodGroup] = {}  # uid -> latest view of a live Job / PodGroup
        self.active: dict[str, Signal] = {}  # fingerprint -> the latest active event-driven signal
        # Writes a follower observed lately: what happened between the old leader's death and the takeover
        # (a job that failed and was deleted meanwhile) is stored from here by the new leader.
        self.unstored: deque[tuple[float, Write]] = deque()
        self.unstored_seconds = unstored_seconds
        self._ooms_seen: set[tuple[str, str, int, bool]] = set()
        # The largest node's allocatable, a cap of recommendations: read at most once a minute (nodes
        # change rarely; pods come by the thousand).
        self._node_allocatable = node_allocatable
        self._largest: tuple[float, dict[str, float]] = (-math.inf, {})
        self._specs_seen: dict[tuple[str, str, str, str], tuple[Any, ...]] = {}  # what _note_spec last noted
        # Other consumers of usage samples, called with (source, samples): GPU idle seconds (DCGM data
        # from the Prometheus source), the nodes' view (NodeHot from pods' usage).
        self.sample_consumers: list[Callable[[str, Any], None]] = []
        # Holders of per-pod state, told (namespace, name) when a pod is deleted: the recorder's integration
        # state, and the nodes' view where NodeHot runs.
        self.pod_gone: list[Callable[[str, str], None]] = [recorder.forget_pod]

    def observe(self, what: str, event_type: str, obj: Any) -> list[Write]:
        writes: list[Write] = []
        signals: list[Signal] = []
        if what == "jobs":
            job: Job = obj
            self.index.on_job(event_type, job)
            self._remember_run(event_type, job.uid, job)
            writes.append(Write(LEDGER_JOB, event_type, job))
            self.gangs.on_job(event_type, job)
            signals = self.failures.on_job(event_type, job)
        elif what == "pods":
            pod, workload = obj
            previous = self.index.pods.get((pod.namespace, pod.name))  # one dict read: atomic under the GIL
            self.index.on_pod(event_type, pod, workload)
            self.gangs.on_pod(event_type, pod)
            self.queues.on_pod(event_type, pod)
            signals = self.failures.on_pod(event_type, pod)
            self._note_ooms(event_type, pod)
            self._note_spec(event_type, pod, previous)
            if event_type == DELETED:
                for forget in self.pod_gone:
                    forget(pod.namespace, pod.name)
        elif what == "podgroups":
            group: PodGroup = obj
            self.index.on_podgroup(event_type, group)
            self._remember_run(event_type, group.uid, group)
            writes.append(Write(LEDGER_PODGROUP, event_type, group))
            self.gangs.on_podgroup(event_type, group)
            self.queues.on_podgroup(event_type, group)
        elif what == "queues":
            q: Queue = obj
            before = self.index.queues.get(q.name)
            self.index.on_queue(event_type, q)
            if event_type != DELETED and (before is None or before.parent != q.parent):
                writes.append(Write(LEDGER_QUEUE, event_type, q.name))
            self.queues.on_queue(event_type, q)
        elif what == "priorityclasses":
            self.index.on_priority_class(event_type, obj)
        elif what == "events":
            event: EventView = obj
            self.notes.on_event(event_type, event)
        elif what == BACKFILL:  # nothing to observe: stored as it is, by the leader
            writes.append(Write(BACKFILL, event_type, obj))
        elif what == "samples":
            self.recorder.ingest(obj, self.index.pod_info)
            for consume in self.sample_consumers:
                consume(event_type, obj)
        if signals:
            for signal in signals:
                if signal.active:
                    self.active[signal.fingerprint] = signal
                else:
                    self.active.pop(signal.fingerprint, None)
            writes.append(Write(SIGNALS, event_type, signals))
        return writes

    def keep_unstored(self, writes: list[Write]) -> None:
        """A follower's writes, kept for `unstored_seconds` (longer than a lease takes to change hands)."""
        now = self.clock()
        self.unstored.extend((now, write) for write in writes)
        while self.unstored and self.unstored[0][0] < now - self.unstored_seconds:
            self.unstored.popleft()

    def takeover_writes(self) -> list[Write]:
        """What a replica that just became leader stores from memory, in order: the writes it observed
        lately as a follower (replayed: ledger upserts and the alert book are idempotent, and a once-per-run
        alert the old leader stored is not opened again), then every live run's latest state and the
        event-driven alerts that hold now (for anything older than that window)."""
        writes = [write for _, write in self.unstored]  # cleared by the caller once they are stored
        writes += [Write(LEDGER_JOB if isinstance(run, Job) else LEDGER_PODGROUP, "ADDED", run)
                   for run in list(self.runs.values())]
        if self.active:
            writes.append(Write(SIGNALS, "ADDED", list(self.active.values())))
        return writes

    def _remember_run(self, event_type: str, uid: str, run: Job | PodGroup) -> None:
        if not uid:
            return
        if event_type == DELETED:
            self.runs.pop(uid, None)
        else:
            self.runs[uid] = run

    def _note_spec(self, event_type: str, pod: Pod, previous: Pod | None) -> None:
        """Each container's requests and limits, its queue and the caps known now, for recommendations
        (the book writes them only when they change). Most pod events are status updates of a pod whose
        containers (a shared view: compared by identity), phase and queue did not change: skipped without
        looking anything up, so the caps are those seen when a pod of the workload appears or changes phase."""
        if event_type == DELETED or pod.containers is None or not pod.containers.spec:
            return
        if previous is not None and previous.containers is pod.containers and previous.phase == pod.phase \
                and previous.queue == pod.queue:
            return
        info = self.index.pod_info(pod.namespace, pod.name)
        if info is None or not info.workload:
            return
        now = self.clock()
        if now - self._largest[0] >= 60.0:
            largest = self._node_allocatable()
            self._largest = (now, largest if largest != self._largest[1] else self._largest[1])
        with self.index.lock:
            queue = self.index.queues.get(info.queue) if info.queue else None
        capability = queue.capability if queue is not None else ()
        for container in pod.containers.spec:
            key = (pod.namespace, info.workload, info.task, container.name)
            # Shared tuples and one dict: comparing them is cheap, building and serializing the spec is not.
            seen = (info.queue, container.requests, container.limits, capability, self._largest[1])
            if self._specs_seen.get(key) == seen and self.histograms.has_spec(key):  # (retention may drop it)
                continue
            if len(self._specs_seen) >= 65536:
                self._specs_seen.clear()
            self._specs_seen[key] = seen
            spec = ContainerSpec(info.queue, {k: v for k, v in container.requests if k in RESOURCES},
                                 {k: v for k, v in container.limits if k in RESOURCES},
                                 {k: v for k, v in capability if k in RESOURCES}, self._largest[1],
                                 gpu_resources(container.requests, container.limits))
            self.histograms.note_spec(*key, spec)

    def _note_ooms(self, event_type: str, pod: Pod) -> None:
        """An OOM kill raises the workload's memory recommendation (VPA's OOM bump), once per kill."""
        if event_type == DELETED:
            self._ooms_seen = {k for k in self._ooms_seen if k[0] != pod.uid}
            return
        for termination in pod.terminations:
            key = (pod.uid, termination.container, pod.restart_count, termination.current)
            if termination.reason != "OOMKilled" or key in self._ooms_seen:
                continue
            self._ooms_seen.add(key)
            info = self.index.pod_info(pod.namespace, pod.name)
            if info is None or not info.workload:
                continue
            limit = next((amount for name, amount in pod.limits if name == "memory"), 0.0)
            self.histograms.add_oom(pod.namespace, info.workload, info.task, termination.container,
                                    self.clock(), limit or info.memory_request_bytes)
