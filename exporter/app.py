"""Wiring: informers for Jobs, PodGroups, Pods, Queues and eviction Events feeding one `ExporterStore`.

Why an Events informer: a pod that Volcano evicts is deleted right after its condition is written, so a
watch gap (relist) can hide the condition; its `Evict` Event (kept an hour) still tells, and a
kube-scheduler `Preempted` Event names the preemptor. The predicate keeps only eviction Events about pods
(`core.eviction.about_eviction`): every other Event costs a dict lookup and is neither parsed nor cached.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kubernetes import client

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.containers import parse_containers
from volcano_monitor.core.eviction import about_eviction
from volcano_monitor.core.hypertree import HyperNodeSpec, parse_hypernode_spec
from volcano_monitor.core.kinds import HyperNode, parse_cronjob, parse_hypernode, parse_jobflow
from volcano_monitor.core.kube import informer as inf
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.resources import (
    CRONJOBS,
    EVENTS,
    HYPERNODES,
    JOBFLOWS,
    JOBS,
    OPTIONAL_NODES,
    PODGROUPS,
    PODS,
    PRIORITYCLASSES,
    QUEUES,
    ResourceKind,
)
from volcano_monitor.core.model import (
    Job,
    Pod,
    PodGroup,
    Queue,
    parse_job,
    parse_node,
    parse_pod,
    parse_podgroup,
    parse_queue,
)
from volcano_monitor.core.podview import is_volcano_pod
from volcano_monitor.core.queueorder import parse_priority_class
from volcano_monitor.exporter import selfmetrics
from volcano_monitor.exporter.cardinality import DEFAULTS, Options
from volcano_monitor.exporter.rows import Deflated, deflate, gzip_stream
from volcano_monitor.exporter.sharding import owns, raw_uid
from volcano_monitor.exporter.store import ExporterStore
from volcano_monitor.exporter.topology import NodeView, node_view

# An optional informer in one of these states has its answer: the kind is not served, or not granted.
_SETTLED_STATES = (inf.NOT_FOUND, inf.FORBIDDEN)


def _involved_uid(raw: Any) -> str:
    """The UID of the pod an Event is about (`about_eviction` has checked the shape)."""
    uid = raw["involvedObject"].get("uid")
    return uid if isinstance(uid, str) else ""


class Exporter:
    def __init__(self, api: client.ApiClient, namespaces: Sequence[str] = (), shard: int = 0, total_shards: int = 1,
                 backoff_base: float = 0.5, backoff_cap: float = 30.0, forbidden_retry_seconds: float = 60.0,
                 watch_timeout_seconds: int = 300, options: Options = DEFAULTS) -> None:
        # topology_fragmented needs every pod on the nodes: only an exporter that is neither sharded nor
        # limited to some namespaces says it (exporter/topology.py).
        whole = total_shards == 1 and not namespaces
        self.store = ExporterStore(emit_queues=shard == 0, options=options, topology=whole)
        self.informers: list[Informer[Any]] = []
        self._lock = threading.Lock()  # the informer list against the Nodes informer added later
        self._running = False
        self.optional: list[Informer[Any]] = []  # not waited for by /readyz (events: an older RBAC lacks them)
        self._scrape_seconds = 0.0
        self._scrapes = 0
        self._scrape_lock = threading.Lock()
        mine = owns(shard, total_shards)

        def add(kind: ResourceKind, transform: Callable[[Any], Any], handler: Callable[[str, Any], None],
                predicate: Callable[[Any], bool] | None, required: bool = True) -> None:
            scopes: list[str | None] = list(namespaces) if namespaces and kind.namespaced else [None]
            for namespace in scopes:
                informer: Informer[Any] = Informer(
                    api, kind, namespace=namespace, transform=transform, predicate=predicate,
                    backoff=Backoff(backoff_base, backoff_cap), forbidden_retry_seconds=forbidden_retry_seconds,
                    watch_timeout_seconds=watch_timeout_seconds)
                informer.add_handler(handler)
                self.informers.append(informer)
                if not required:
                    self.optional.append(informer)

        pod_view = pod_transform(options, compat=self.store.compat)
        job_view = job_transform(options)
        if total_shards > 1:
            add(JOBS, job_view, self.store.on_job, lambda raw: mine(raw_uid(raw)))
            add(PODS, pod_view, self.store.on_pod, lambda raw: is_volcano_pod(raw) and mine(raw_uid(raw)))
        else:  # one replica: no UID hashing on the hot path
            add(JOBS, job_view, self.store.on_job, None)
            add(PODS, pod_view, self.store.on_pod, is_volcano_pod)

        def on_podgroup(event_type: str, group: PodGroup) -> None:
            self.store.on_podgroup_owner(event_type, group)  # every shard attributes its pods through groups
            if mine(group.uid):
                self.store.on_podgroup(event_type, group)

        add(PODGROUPS, parse_podgroup, on_podgroup, None)
        add(EVENTS, self.store.parse_eviction_event, self.store.on_eviction_event,
            lambda raw: about_eviction(raw) and mine(_involved_uid(raw)), required=False)

        def on_queue(event_type: str, queue: Queue) -> None:
            self.store.on_queue_tree(event_type, queue)  # every shard rolls its pod sums up the tree
            self.store.on_queue(event_type, queue)  # rows: shard 0 only (the store knows); waiting jobs: all

        # Every shard: its waiting jobs are explained against the queue tree (only shard 0 renders queues).
        add(QUEUES, parse_queue, on_queue, None)
        self.store.waiting.queues_listed = self.informers[-1].synced.is_set
        # Every shard: the values its waiting jobs are ordered by. Not waited for: without them (RBAC) the
        # positions follow PodGroup age alone.
        add(PRIORITYCLASSES, parse_priority_class, self.store.on_priority_class, None, required=False)
        # Kinds only some releases serve: idle (404) where the CRD is missing, never holding back readiness.
        for kind, parse in ((CRONJOBS, parse_cronjob), (JOBFLOWS, parse_jobflow)):
            add(kind, parse, functools.partial(self.store.on_other, kind.plural),
                (lambda raw: mine(raw_uid(raw))) if total_shards > 1 else None)
        self._add = add
        if whole:  # HyperNodes with their members, for topology_fragmented
            add(HYPERNODES, _hypernode_views, self._on_hypernode, None)
        elif shard == 0:
            add(HYPERNODES, parse_hypernode, functools.partial(self.store.on_other, HYPERNODES.plural), None)

    def _on_hypernode(self, event_type: str, views: tuple[HyperNode, HyperNodeSpec]) -> None:
        """An unsharded exporter's HyperNode: its rows, and its members; the first one starts the Nodes
        informer (none runs on a cluster without HyperNodes)."""
        self.store.on_other(HYPERNODES.plural, event_type, views[0])
        if not self.store.on_hypernode_spec(event_type, views[1]):
            return
        with self._lock:
            self._add(OPTIONAL_NODES, _node_view, self.store.on_node, None, required=False)
            nodes = self.informers[-1]
            self.store.topology.nodes_listed = nodes.synced.is_set
            if self._running:
                nodes.start()

    def start(self) -> Exporter:
        with self._lock:
            self._running = True
            informers = list(self.informers)
        for informer in informers:
            informer.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._running = False
            informers = list(self.informers)
        for informer in informers:
            informer.stop()

    def ready(self) -> bool:
        return not self.not_synced()

    def not_synced(self) -> list[str]:
        """Informers still waiting for their first full list, as /readyz reports them. The eviction
        Events are never waited for (an older RBAC lacks them), even while they list."""
        return [i.name for i in self.informers if i not in self.optional and not self.settled(i)]

    def settled(self, informer: Informer[Any]) -> bool:
        """Whether `informer` has its answer for now: its first full list applied,
        or an optional kind (a CRD only some releases ship, or the eviction Events) that the API server
        does not serve (404) or RBAC does not grant (403). Volcano works without those, so neither
        /readyz nor `volcano_exporter_synced` (hence VolcanoExporterNotSynced) holds them against the
        exporter; `volcano_exporter_informer_state` and `_resource_served` still tell the cases apart."""
        if informer.synced.is_set():
            return True
        optional = informer.kind.optional or informer in self.optional
        return optional and informer.state in _SETTLED_STATES

    def scrape_chunks(self) -> Iterator[bytes]:
        """The /metrics body in pieces, for the server to write (and gzip) as they come."""
        started = time.perf_counter()
        yield from self.store.chunks()
        with self._scrape_lock:
            yield self._self_metrics()
            self._scrape_seconds = time.perf_counter() - started
            self._scrapes += 1

    def scrape_gzip_chunks(self) -> Iterator[bytes]:
        """The /metrics body as one gzip stream, most of it cached (see exporter/rows.py)."""
        yield from gzip_stream(self._gzip_pieces())

    def _gzip_pieces(self) -> Iterator[Deflated]:
        started = time.perf_counter()
        yield from self.store.gzip_chunks()
        with self._scrape_lock:
            yield deflate(self._self_metrics())
            self._scrape_seconds = time.perf_counter() - started
            self._scrapes += 1

    def _self_metrics(self) -> bytes:
        """The self-metrics (the scrape lock held)."""
        with self.store.lock:
            dropped = dict(self.store.caps.dropped)
        return selfmetrics.render(self.informers, dict(self.store.parse_problems), self._scrape_seconds,
                                  self._scrapes, dropped, settled=self.settled).encode()

    def scrape(self) -> bytes:
        """The whole body at once (tests and tools; the server streams `scrape_chunks`)."""
        return b"".join(self.scrape_chunks())


def _hypernode_views(raw: Any) -> tuple[HyperNode, HyperNodeSpec]:
    return parse_hypernode(raw), parse_hypernode_spec(raw)


def _node_view(raw: Any) -> NodeView:
    return node_view(parse_node(raw))


def pod_transform(options: Options, compat: bool) -> Callable[[Any], Pod]:
    """Raw pod -> the exporter's Pod view: no container statuses (nothing renders them) unless the
    compatibility families need them, and the Kubernetes labels --metric-labels-allowlist asks for."""
    labels = options.labels.wants("pods")
    if not labels and not compat:
        return functools.partial(parse_pod, statuses=False)

    def view(raw: Any) -> Pod:
        pod = parse_pod(raw, statuses=False)
        if labels:
            pod.labels = options.labels.select("pods", raw)
        if compat:
            probs: list[str] = []
            pod.containers = parse_containers(raw, probs)
            if probs:
                pod.problems += tuple(probs)
        return pod

    return view


def job_transform(options: Options) -> Callable[[Any], Job]:
    if not options.labels.wants("jobs"):
        return parse_job

    def view(raw: Any) -> Job:
        job = parse_job(raw)
        labels = options.labels.select("jobs", raw)
        return dataclasses.replace(job, labels=labels) if labels else job

    return view
