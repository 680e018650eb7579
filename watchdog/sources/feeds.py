"""What feeds the writer: informers on Volcano's and Kubernetes' objects, and collectors polling usage.

Both only hand items to the writer's queue (`enqueue(what, event_type, obj)`); they never touch the
database or a detector, so a slow database slows nobody but the writer.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.containers import Containers, parse_containers
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.resources import (
    EVENTS,
    HYPERNODES,
    JOBS,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITYCLASSES,
    QUEUES,
    ResourceKind,
)
from volcano_monitor.core.model import Pod, parse_job, parse_node, parse_pod, parse_podgroup, parse_queue
from volcano_monitor.core.podview import is_volcano_pod
from volcano_monitor.core.queueorder import parse_priority_class
from volcano_monitor.core.topology import parse_hypernode_spec
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.sources.metrics_api import MetricsApiCollector
from volcano_monitor.watchdog.sources.node_metrics import NodeMetricsCollector
from volcano_monitor.watchdog.sources.prometheus import PrometheusCollector
from volcano_monitor.watchdog.sources.shared_gpus import shares_of
from volcano_monitor.watchdog.state.events import SchedulerNotes, about_podgroup
from volcano_monitor.watchdog.state.nodes import NodeTable
from volcano_monitor.watchdog.state.samples import PodLookup

log = logging.getLogger(__name__)

UsageSource = MetricsApiCollector | PrometheusCollector
Enqueue = Callable[[str, str, Any], None]


@dataclass
class CollectorStats:
    enabled: bool
    last_success: float | None = None
    errors: int = 0
    samples: int = 0


def informers(api: client.ApiClient, settings: Settings, notes: SchedulerNotes, enqueue: Enqueue,
              backoff: tuple[float, float]) -> list[Informer[Any]]:
    """One informer per kind (per namespace when the watchdog is limited to some), each handing its
    events to `enqueue` under the kind's plural. Pods are kept as views; Events only about PodGroups."""
    made: list[Informer[Any]] = []

    def add(kind: ResourceKind, transform: Callable[[Any], Any], predicate: Callable[[Any], bool] | None) -> None:
        scopes: list[str | None] = list(settings.namespaces) if settings.namespaces and kind.namespaced else [None]
        for namespace in scopes:
            informer: Informer[Any] = Informer(api, kind, namespace=namespace, transform=transform,
                                               predicate=predicate, backoff=Backoff(*backoff))
            informer.add_handler(functools.partial(enqueue, kind.plural))
            made.append(informer)

    add(JOBS, parse_job, None)
    add(PODGROUPS, parse_podgroup, None)
    add(PODS, functools.partial(pod_view, settings.recommendations.workload_label), is_volcano_pod)
    add(QUEUES, parse_queue, None)
    add(PRIORITYCLASSES, parse_priority_class, None)  # the queue order's first key (`/why`'s position)
    add(EVENTS, notes.parse, about_podgroup)  # Events about PodGroups only, dropped before parsing
    return made


def node_informer(api: client.ApiClient, on_node: Callable[[str, Any], None],
                  backoff: tuple[float, float]) -> Informer[Any]:
    """Nodes, for the node detectors (GpuStranded, NodeHot) only: straight into their locked table, not
    through the writer's queue (nothing about a node is stored)."""
    nodes: Informer[Any] = Informer(api, NODES, transform=parse_node, backoff=Backoff(*backoff))
    nodes.add_handler(on_node)
    return nodes


def hypernode_informer(api: client.ApiClient, on_hypernode: Callable[[str, Any], None],
                       backoff: tuple[float, float]) -> Informer[Any]:
    """HyperNodes (Volcano v1.12+), for the fragmentation view only (`findings.topology`): straight into their
    locked table. Optional: before v1.12 (404) or without RBAC (403) the informer waits and retries, the
    table stays empty, and readiness does not wait for it."""
    hypernodes: Informer[Any] = Informer(api, HYPERNODES, transform=parse_hypernode_spec, backoff=Backoff(*backoff))
    hypernodes.add_handler(on_hypernode)
    return hypernodes


_SHARED_CONTAINERS: dict[Any, Containers] = {}


def _resources_key(container: Any) -> Any:
    """A hashable key of one container's name and raw requests and limits (quantity strings as written)."""
    resources = container.get("resources") or {}
    return (container.get("name"), tuple(sorted((resources.get("requests") or {}).items())),
            tuple(sorted((resources.get("limits") or {}).items())))


def _containers(raw: Any) -> Containers:
    """The pod's containers' requests and limits (recommendations keep each container's limit/request
    ratio). Pods of one task have the same spec, so the view is looked up by the raw resources (no
    quantity parsed twice) and shared: 100k pods cost a few thousand objects, not 100k (the table is
    cleared when it grows past 65536 distinct specs). A shape the key cannot take is parsed as it is."""
    spec = raw.get("spec") if type(raw) is dict else None
    items = spec.get("containers") if type(spec) is dict else None
    try:
        key: Any = tuple([_resources_key(c) for c in items]) if type(items) is list else ()
        shared = _SHARED_CONTAINERS.get(key)
    except (AttributeError, TypeError):  # not mappings, unhashable values: parse_containers reports nothing
        return Containers(parse_containers(raw, []).spec, ())
    if shared is None:
        if len(_SHARED_CONTAINERS) >= 65536:
            _SHARED_CONTAINERS.clear()
        shared = _SHARED_CONTAINERS[key] = Containers(parse_containers(raw, []).spec, ())
    return shared


def pod_view(workload_label: str | None, raw: Any) -> tuple[Pod, str]:
    """The Pod view with its containers' resources, plus the value of the configured workload label (views
    keep no labels)."""
    value = ""
    if workload_label:
        labels = (raw.get("metadata") or {}).get("labels") if isinstance(raw, dict) else None
        found = labels.get(workload_label) if isinstance(labels, dict) else None
        value = found if isinstance(found, str) else ""
    pod = parse_pod(raw)
    pod.containers = _containers(raw)
    return pod, value


def essential_synced(running: list[Informer[Any]]) -> bool:
    """Every informer but the Events, Nodes, PriorityClasses and HyperNodes ones has synced. Events only refine
    GangUnschedulable's reason, Nodes only feed the node detectors (which wait for them), PriorityClasses
    only order `/why`'s queue position, HyperNodes only feed the fragmentation view: a cluster whose RBAC
    does not grant them yet (or that predates the kind) must not keep the watchdog unready."""
    essential = [i for i in running if i.kind not in (EVENTS, NODES, PRIORITYCLASSES, HYPERNODES)]
    return bool(essential) and all(i.synced.is_set() for i in essential)


def usage_sources(settings: Settings, api: client.ApiClient | None, pods: PodLookup | None = None
                  ) -> tuple[dict[str, CollectorStats], list[tuple[str, float, UsageSource]]]:
    """The configured usage sources (name, poll interval, collector) and a stats record for each. `pods` gives
    Prometheus each pod's physical GPUs, to read shared cards (watchdog.sources.shared_gpus)."""
    stats: dict[str, CollectorStats] = {}
    sources: list[tuple[str, float, UsageSource]] = []
    metrics_api = settings.sources.metrics_api
    stats["metrics_api"] = CollectorStats(metrics_api.enabled and api is not None)
    if metrics_api.enabled and api is not None:
        sources.append(("metrics_api", metrics_api.interval_seconds, MetricsApiCollector(api, settings.namespaces)))
    prom = settings.sources.prometheus
    stats["prometheus"] = CollectorStats(prom.enabled)
    if prom.enabled:
        shares = shares_of(pods) if pods is not None else None
        sources.append(("prometheus", prom.interval_seconds,
                        PrometheusCollector(prom, settings.namespaces, shares=shares)))
    return stats, sources


def poll_usage(name: str, interval: float, source: UsageSource, stats: CollectorStats, *,
               leading: Callable[[], bool], enqueue: Enqueue, stop: threading.Event,
               clock: Callable[[], float]) -> None:
    """Poll one usage source until `stop`. Its own counters say how it is doing (a failed request is
    counted there and yields no samples); an exception escaping it is a bug, counted here. Usage is
    the leader's alone: two replicas collecting would add it twice."""
    crashes = 0
    while not stop.is_set():
        started = time.monotonic()
        if not leading():
            stop.wait(interval)
            continue
        try:
            samples = source.collect(clock()) if isinstance(source, PrometheusCollector) else source.collect()
        except Exception:  # a collector bug must not stop collection
            crashes += 1
            log.exception("usage collector %s failed", name)
            samples = []
        stats.errors = sum(source.errors.values()) + crashes
        stats.last_success = source.last_success
        if samples:
            stats.samples += len(samples)
            enqueue("samples", name, samples)
        stop.wait(max(0.0, interval - (time.monotonic() - started)))


def poll_node_metrics(collector: NodeMetricsCollector, nodes: NodeTable, interval: float, *,
                      leading: Callable[[], bool], stop: threading.Event, clock: Callable[[], float]) -> None:
    """Poll NodeMetrics for NodeHot, on the leader (the only replica that checks). A failed poll keeps
    the last values: NodeHot ignores them once stale."""
    while not stop.is_set():
        if leading():
            usage = collector.collect()
            if usage is not None:
                nodes.set_usage(usage, clock())
        stop.wait(interval)
