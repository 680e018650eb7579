"""The exporter's state: per-object rendered rows and per-queue aggregates, kept current on every
watch event, so a scrape only concatenates bytes (kube-state-metrics' design).

Rows are bytes per (family, object key), encoded once when the object changes. Aggregates are
updated by subtracting an object's previous contribution and adding its new one; resource sums
are kept as integers in nano-units so adding and removing never drifts. One lock guards it all:
informer threads write, the HTTP thread reads.

One piece: the handlers and the scrape are the two sides of that one lock and work on the same state
(rows, per-queue sums, pods attributed through their PodGroup's owner, the cached history member);
what renders lines is already elsewhere (families/, rows.py, aggregates.py, waiting.py), and a split
would leave the state in one file and half of what reads or changes it in another.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from volcano_monitor.core.containers import NO_CONTAINERS
from volcano_monitor.core.eviction import EvictionEvent, parse_eviction_event
from volcano_monitor.core.exposition import Family, escape
from volcano_monitor.core.hypertree import HyperNodeSpec
from volcano_monitor.core.kinds import CronJob, HyperNode, JobFlow
from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.model import Job, Pod, PodGroup, Queue
from volcano_monitor.core.podrequests import Resources
from volcano_monitor.core.queueorder import PriorityClass
from volcano_monitor.exporter.aggregates import QueueAggregates, QueuePhase
from volcano_monitor.exporter.cardinality import DEFAULTS, ObjectCaps, Options, with_labels
from volcano_monitor.exporter.families import compat as compat_families
from volcano_monitor.exporter.families import cronjob as cronjob_families
from volcano_monitor.exporter.families import evictions as eviction_families
from volcano_monitor.exporter.families import hierarchy, queue_wait
from volcano_monitor.exporter.families import hypernode as hypernode_families
from volcano_monitor.exporter.families import job as job_families
from volcano_monitor.exporter.families import jobflow as jobflow_families
from volcano_monitor.exporter.families import pod as pod_families
from volcano_monitor.exporter.families import podgroup as podgroup_families
from volcano_monitor.exporter.families import queue as queue_families
from volcano_monitor.exporter.rows import Deflated, Rows, Stale, deflate, gzip_stream
from volcano_monitor.exporter.topology import NodeView, Topology
from volcano_monitor.exporter.waiting import WaitingJobs

log = logging.getLogger(__name__)

GroupKey = tuple[str, str]  # (namespace, podgroup name)
GroupOwner = tuple[str, str, str]  # queue, job_name, job_kind
OtherView = CronJob | HyperNode | JobFlow
# Kinds only some Volcano releases serve, by resource plural: rows per object, nothing derived.
OTHER_KINDS: dict[str, tuple[tuple[Family, ...], Callable[[Any], tuple[str, ...]]]] = {
    "cronjobs": (cronjob_families.FAMILIES, cronjob_families.render),
    "hypernodes": (hypernode_families.FAMILIES, hypernode_families.render),
    "jobflows": (jobflow_families.FAMILIES, jobflow_families.render),
}


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


class ExporterStore:
    def __init__(self, emit_queues: bool = True, options: Options = DEFAULTS,
                 observe_since: float | None = None, topology: bool = False) -> None:
        """`observe_since`: only transitions newer than this (Unix time; default now, the process start)
        go into the histograms and counters, so that a restarted exporter never counts one twice.
        `topology`: this exporter sees every pod (unsharded) and may say `topology_fragmented`."""
        self.lock = threading.Lock()
        self.emit_queues = emit_queues
        self.options = options
        self.observe_since = time.time() if observe_since is None else observe_since
        self.ledger = queue_wait.Ledger(self.observe_since)
        self.evictions = eviction_families.Evictions(self.observe_since)
        # The histograms' and counters' gzip member, kept until one of them changes (rarely, next to pods).
        self._history_gzip: tuple[tuple[int, int], Deflated] = ((-1, -1), deflate(b""))
        served = options.families
        self.compat = options.compat_ksm_fork and any(served.allows(f.name) for f in compat_families.FAMILIES)
        self.jobs = Rows(job_families.FAMILIES, served=served)
        self.pods = Rows((*pod_families.FAMILIES, *(compat_families.FAMILIES if self.compat else ())), served=served)
        self.podgroups = Rows(podgroup_families.FAMILIES, served=served)
        self.queues = Rows(queue_families.FAMILIES, served=served)
        self.aggregates = QueueAggregates(served)
        self._pod_wanted = self.pods.enabled[:len(pod_families.FAMILIES)]
        self._no_jobs = ("",) * len(job_families.FAMILIES)
        self._no_groups = ("",) * len(podgroup_families.FAMILIES)
        self._no_queues = ("",) * len(queue_families.FAMILIES)
        self.caps = ObjectCaps(options.max_objects)
        self.parse_problems: dict[str, int] = defaultdict(int)  # by resource
        self._job_state: dict[str, tuple[str, str]] = {}  # key -> (queue, phase) counted
        self._pod_state: dict[str, tuple[Pod, pod_families.Attribution]] = {}
        # Every PodGroup's owner (all shards need it to attribute their pods), and the pods waiting on one.
        self._group_owner: dict[GroupKey, GroupOwner] = {}
        self._group_pods: dict[GroupKey, set[str]] = defaultdict(set)
        # One Attribution per job, shared by its pods; it goes with the last pod that holds it (months of
        # finished jobs must not pile up here).
        self._attributions: weakref.WeakValueDictionary[GroupOwner, pod_families.Attribution] = \
            weakref.WeakValueDictionary()
        # Every PodGroup's (queue, phase label), and their counts per queue: Queue status lacks them.
        self._group_phase: dict[GroupKey, QueuePhase] = {}
        self.podgroup_counts: dict[QueuePhase, int] = defaultdict(int)
        self.waiting = WaitingJobs(served, self._group_owner, emit_queues)  # volcano_job_pending_reason
        # The queue tree (every shard: each rolls its own pod sums up it) and each queue's allocation.
        self._queue_parents: dict[str, str] = {}
        self._queue_allocated: dict[str, Resources] = {}
        self.others = {name: Rows(families, served=served) for name, (families, _) in OTHER_KINDS.items()}
        self.topology = Topology(topology)  # idle (no per-pod work) until a HyperNode is seen
        if topology:
            self.waiting.judge = self.topology.judge

    # ---- event handlers (informer threads) --------------------------------------------------------------

    def on_job(self, event_type: str, job: Job) -> None:
        key = _key(job.namespace, job.name)
        with self.lock:
            previous = self._job_state.pop(key, None)
            if previous is not None:
                self.aggregates.add_job(*previous, -1)
            self.ledger.on_job(event_type == DELETED, job)
            if event_type == DELETED:
                self.waiting.on_job(key, None)
                self.caps.forget("jobs", key)
                self.jobs.delete(key)
                return
            if not self.caps.admit("jobs", key, key in self.jobs, len(self.jobs)):
                self.waiting.on_job(key, None)
                return
            self.waiting.on_job(key, job)
            self.parse_problems["jobs"] += len(job.problems)
            rendered = job_families.render(job) if self.jobs.any else self._no_jobs
            if job.labels and rendered[0]:
                rendered = (with_labels(rendered[0], job.labels), *rendered[1:])
            self.jobs.put(key, rendered)
            if job.phase:
                self._job_state[key] = (job.queue, job.phase)
                self.aggregates.add_job(job.queue, job.phase, 1)

    def on_pod(self, event_type: str, pod: Pod) -> None:
        key = _key(pod.namespace, pod.name)
        with self.lock:
            before = self._pod_state.get(key)
            self._apply_pod(event_type, key, pod)
            if self.topology.active:
                after = self._pod_state.get(key)
                self.topology.on_pod(before[0] if before is not None else None,
                                     after[0] if after is not None else None)
            if pod.disruption or event_type == DELETED:
                state = self._pod_state.get(key) or before
                self.evictions.on_pod(pod, state[1].queue if state is not None else pod.queue,
                                      before[0] if before is not None else None, event_type == DELETED)

    def parse_eviction_event(self, raw: object) -> EvictionEvent | None:
        """The Events informer's transform: None (skipped) for a malformed one, counted and logged."""
        event = parse_eviction_event(raw)
        if event is None:
            with self.lock:
                self.parse_problems["events"] += 1
            log.warning("malformed eviction Event skipped (%d so far)", self.parse_problems["events"])
        return event

    def on_eviction_event(self, event_type: str, event: EvictionEvent) -> None:
        """An Event saying a pod was evicted or preempted (its expiry, DELETED, changes nothing)."""
        if event_type == DELETED:
            return
        with self.lock:
            state = self._pod_state.get(_key(event.namespace, event.pod))
            victim = (event.namespace, state[1].queue, state[0].podgroup, state[0].job_name) \
                if state is not None and state[0].uid == event.pod_uid else None
            self.evictions.on_event(event, victim, self._preemptor_queue(event))

    def _preemptor_queue(self, event: EvictionEvent) -> str:
        """The queue of the pod an Event names as the preemptor, if this exporter holds it. By UID this is a
        scan of the pods: only kube-scheduler preemptions name one, and they are rare."""
        if event.preemptor:
            state = self._pod_state.get(_key(event.preemptor_namespace or event.namespace, event.preemptor))
            return state[1].queue if state is not None else ""
        if event.preemptor_uid:
            for pod, who in self._pod_state.values():
                if pod.uid == event.preemptor_uid:
                    return who.queue
        return ""

    def _apply_pod(self, event_type: str, key: str, pod: Pod) -> None:
        """`on_pod` with the lock held: rows, attribution and the per-queue sums."""
        previous = self._pod_state.pop(key, None)
        if event_type == DELETED:
            self.caps.forget("pods", key)
            if previous is not None:
                self._forget_pod(key, *previous)
            self.pods.delete(key)
            return
        if previous is None and not self.caps.admit("pods", key, False, len(self._pod_state)):
            return
        if previous is not None and not pod.problems \
                and pod_families.exported(previous[0]) == pod_families.exported(pod):
            self._pod_state[key] = (pod, previous[1])  # nothing exported changed: rows and sums stand
            return
        self.parse_problems["pods"] += len(pod.problems)
        if previous is not None and previous[0].podgroup == pod.podgroup and previous[0].queue == pod.queue \
                and previous[0].job_name == pod.job_name:
            # The usual update (status, node, labels): same attribution; move aggregates only if needed.
            old, who = previous
            if old.phase != pod.phase or old.requests is not pod.requests:
                self.aggregates.add_pod(who.queue, old.phase, old.requests, -1)
                self.aggregates.add_pod(who.queue, pod.phase, pod.requests, 1)
            self._pod_state[key] = (pod, who)
            self.pods.put(key, self._render_pod(pod, who))
            return
        if previous is not None:
            self._forget_pod(key, *previous)
        self._put_pod(key, pod)

    def on_podgroup(self, event_type: str, group: PodGroup) -> None:
        """Rows for this shard's PodGroups; see `on_podgroup_owner` for attribution."""
        key = _key(group.namespace, group.name)
        group_key = (group.namespace, group.name)
        with self.lock:
            if event_type == DELETED:
                self.waiting.on_own_group(key, group_key, None)
                self.caps.forget("podgroups", key)
                self.podgroups.delete(key)
                return
            if not self.caps.admit("podgroups", key, key in self.podgroups, len(self.podgroups)):
                self.waiting.on_own_group(key, group_key, None)
                return
            self.waiting.on_own_group(key, group_key, group)
            self.parse_problems["podgroups"] += len(group.problems)
            self.podgroups.put(key, podgroup_families.render(group) if self.podgroups.any else self._no_groups)

    def on_podgroup_owner(self, event_type: str, group: PodGroup) -> None:
        """Every PodGroup, in every shard: where pods naming only their group belong."""
        group_key = (group.namespace, group.name)
        owner = None if event_type == DELETED else (group.queue, group.job_name, group.job_kind)
        counted = None if event_type == DELETED else (group.queue, queue_families.podgroup_phase_label(group.phase))
        with self.lock:
            self._count_group(group_key, counted)
            same_owner = self._group_owner.get(group_key) == owner
            if owner is None:
                self._group_owner.pop(group_key, None)
            else:
                self._group_owner[group_key] = owner
            self.waiting.on_any_group(group_key, None if event_type == DELETED else group)
            if event_type == DELETED:
                self.evictions.forget_group(group_key)
            if same_owner:
                return
            for pod_key in list(self._group_pods.get(group_key, ())):
                pod, who = self._pod_state.pop(pod_key)
                self.aggregates.add_pod(who.queue, pod.phase, pod.requests, -1)
                self._unwait(pod_key, group_key)
                self._put_pod(pod_key, pod)

    def on_priority_class(self, event_type: str, priority_class: PriorityClass) -> None:
        """Every shard: the values waiting jobs are ordered by (`volcano_job_queue_position`)."""
        with self.lock:
            self.waiting.on_priority_class(priority_class, event_type == DELETED)

    def on_queue(self, event_type: str, queue: Queue) -> None:
        """Every shard keeps the queue tree (to explain its waiting jobs); shard 0 renders the rows."""
        with self.lock:
            self.waiting.on_queue(queue, event_type == DELETED)
            if not self.emit_queues:
                return
            if event_type == DELETED:
                self.caps.forget("queues", queue.name)
                self.queues.delete(queue.name)
                return
            if not self.caps.admit("queues", queue.name, queue.name in self.queues, len(self.queues)):
                return
            self.parse_problems["queues"] += len(queue.problems)
            self.queues.put(queue.name, queue_families.render(queue) if self.queues.any else self._no_queues)

    def on_queue_tree(self, event_type: str, queue: Queue) -> None:
        """Every Queue, in every shard: where it sits in the hierarchy, for the subtree roll-ups."""
        with self.lock:
            if event_type == DELETED:
                self._queue_parents.pop(queue.name, None)
                self._queue_allocated.pop(queue.name, None)
            else:
                self._queue_parents[queue.name] = queue.parent
                self._queue_allocated[queue.name] = queue.allocated

    def on_other(self, resource: str, event_type: str, view: OtherView) -> None:
        """A CronJob, HyperNode or JobFlow (`resource` is its plural, a key of OTHER_KINDS)."""
        key = _key(view.namespace, view.name)
        rows = self.others[resource]
        with self.lock:
            if event_type == DELETED:
                rows.delete(key)
                self.caps.forget(resource, key)
                return
            self.parse_problems[resource] += len(view.problems)
            if not self.caps.admit(resource, key, key in rows, len(rows)):
                return
            if rows.any:  # else every family of the kind is denied: nothing to render
                rows.put(key, OTHER_KINDS[resource][1](view))

    def on_hypernode_spec(self, event_type: str, spec: HyperNodeSpec) -> bool:
        """A HyperNode's members, for `topology_fragmented` (unsharded only). True when it is the first one:
        the app then starts its Nodes informer."""
        with self.lock:
            return self.topology.on_hypernode(spec, event_type == DELETED,
                                              lambda: [pod for pod, _ in self._pod_state.values()])

    def on_node(self, event_type: str, node: NodeView) -> None:
        """A Node (its informer runs only once a HyperNode was seen, in an unsharded exporter)."""
        with self.lock:
            if node.problems and event_type != DELETED:
                self.parse_problems["nodes"] += len(node.problems)
            self.topology.on_node(node, event_type == DELETED)

    # ---- internals (lock held) -------------------------------------------------------------------------

    def _count_group(self, group_key: GroupKey, counted: QueuePhase | None) -> None:
        previous = self._group_phase.get(group_key)
        if previous == counted:
            return
        if previous is not None:
            self.podgroup_counts[previous] -= 1
            if self.podgroup_counts[previous] == 0:
                del self.podgroup_counts[previous]
        if counted is None:
            del self._group_phase[group_key]
        else:
            self._group_phase[group_key] = counted
            self.podgroup_counts[counted] += 1

    def _attribute(self, pod: Pod, key: str) -> pod_families.Attribution:
        queue, job_name, job_kind = pod.queue, pod.job_name, pod.job_kind
        if pod.podgroup and (not queue or not job_name):
            group_key = (pod.namespace, pod.podgroup)
            self._group_pods[group_key].add(key)  # re-render when the group appears or changes
            owner = self._group_owner.get(group_key)
            if owner is not None:
                queue = queue or owner[0]
                if not job_name:
                    job_name, job_kind = owner[1], owner[2]
        triple = (queue, job_name, job_kind)
        who = self._attributions.get(triple)
        if who is None:  # pods of one job share one Attribution
            who = self._attributions[triple] = pod_families.Attribution(*triple)
        return who

    def _put_pod(self, key: str, pod: Pod) -> None:
        who = self._attribute(pod, key)
        self._pod_state[key] = (pod, who)
        self.aggregates.add_pod(who.queue, pod.phase, pod.requests, 1)
        self.pods.put(key, self._render_pod(pod, who))

    def _render_pod(self, pod: Pod, who: pod_families.Attribution) -> tuple[str, ...]:
        rendered = pod_families.render(pod, who, self._pod_wanted)
        if pod.labels and rendered[0]:
            rendered = (with_labels(rendered[0], pod.labels), *rendered[1:])
        if self.compat:
            values = (pod.namespace, pod.name, pod.node_name, who.job_name, who.queue)
            ns, name, node, job_name, queue = (escape(v) for v in values)
            rendered += compat_families.render(ns, name, node, job_name, queue, pod.containers or NO_CONTAINERS)
        return rendered

    def _forget_pod(self, key: str, old: Pod, who: pod_families.Attribution) -> None:
        self.aggregates.add_pod(who.queue, old.phase, old.requests, -1)
        if old.podgroup:
            self._unwait(key, (old.namespace, old.podgroup))

    def _unwait(self, pod_key: str, group_key: GroupKey) -> None:
        waiting = self._group_pods.get(group_key)
        if waiting is not None:
            waiting.discard(pod_key)
            if not waiting:
                del self._group_pods[group_key]

    # ---- scrape ----------------------------------------------------------------------------------------

    def write(self, out: list[bytes]) -> None:
        """The exposition appended to `out` (what /metrics streams, in the same pieces)."""
        out.extend(self.chunks())

    def chunks(self, batch: int = 1024) -> Iterator[bytes]:
        """The exposition in ~100-300 KB pieces. Row references are copied under the lock (a few ms for
        100k pods: `Rows.parts` keeps each block's references) and joined outside it in batches small
        enough for malloc to reuse the same memory: a 100 MB body is never built (fresh memory costs ~1 ms
        per MB here, in page faults). Joined: the server could hand the references to the kernel as they
        are (`sendmsg`), but ~1000 rows of ~230 bytes a call made a 100k-pod scrape slower (191 ms against
        110-127 ms)."""
        parts: list[bytes] = []
        with self.lock:
            self.waiting.refresh()
            for rows in self._all_rows():
                rows.parts(parts)
            self._derived(parts)
            self._history(parts)
        for start in range(0, len(parts), batch):
            yield b"".join(parts[start:start + batch])

    def gzip_chunks(self) -> Iterator[Deflated]:
        """The exposition as compressed pieces for `rows.gzip_stream`: the blocks unchanged since the last
        scrape come from the cache, the others are compressed outside the lock and cached after."""
        planned: list[Deflated | Stale] = []
        derived: list[bytes] = []
        with self.lock:
            self.waiting.refresh()
            for rows in self._all_rows():
                rows.gzip_parts(planned)
            self._derived(derived)
            history: list[bytes] = []
            self._history(history)
            version = (self.ledger.version, self.evictions.version)
            cached = self._history_gzip[1] if self._history_gzip[0] == version else None
        fresh: list[tuple[Stale, Deflated]] = []
        for part in planned:
            if isinstance(part, Stale):
                piece = part.compress()
                fresh.append((part, piece))
                yield piece
            else:
                yield part
        if derived:
            yield deflate(b"".join(derived))
        if history:
            if cached is None:
                cached = deflate(b"".join(history))
                with self.lock:
                    self._history_gzip = (version, cached)
            yield cached
        if fresh:
            with self.lock:
                for stale, piece in fresh:
                    stale.rows.keep(stale, piece)

    def gzip(self) -> bytes:
        """The whole gzip body at once (tests and tools; the server streams `gzip_chunks`)."""
        return b"".join(gzip_stream(self.gzip_chunks()))

    def _all_rows(self) -> tuple[Rows, ...]:
        return (self.jobs, self.waiting.rows, self.waiting.positions, self.waiting.oldest,
                self.podgroups, self.pods, self.queues,
                *self.others.values())

    def _derived(self, parts: list[bytes]) -> None:
        """What is computed at scrape time rather than kept as rows (lock held): PodGroup counts per
        queue, the queue aggregates and the subtree roll-ups."""
        if self.emit_queues and self.options.families.allows(queue_families.PODGROUPS.name):
            lines = queue_families.podgroup_lines(self.podgroup_counts, self.queues.keys())
            if lines:
                parts += (queue_families.PODGROUPS.header.encode(), lines.encode())
        self.aggregates.write(parts)
        hierarchy.write(parts, self._queue_parents, self._queue_allocated if self.emit_queues else None,
                        self.aggregates.pod_requests, self.options.families.allows)

    def _history(self, out: list[bytes]) -> None:
        """The histograms and the eviction counter (what this process counted), unless denied."""
        served = self.options.families
        self.ledger.write(out, served.allows)
        self.evictions.write(out, served.allows)

    def families(self) -> tuple[Family, ...]:
        """Every family this store can serve (compatibility ones with their flag), denied ones included."""
        return (*job_families.FAMILIES, *job_families.PENDING, *podgroup_families.FAMILIES, *pod_families.FAMILIES,
                *(compat_families.FAMILIES if self.options.compat_ksm_fork else ()),
                *queue_families.FAMILIES, *queue_families.COUNTED, *queue_families.WAITING, *queue_families.DERIVED,
                *queue_wait.FAMILIES,
                *eviction_families.FAMILIES, *hierarchy.FAMILIES,
                *(family for families, _ in OTHER_KINDS.values() for family in families))
