"""The workload driver: plays Volcano's job controller and scheduler, the Kubeflow training operator,
the kubelet and metrics-server against the in-memory store.

It is a discrete-event simulation on the real clock: every transition is scheduled at an exact time
(scenario durations divided by `speed`), and `tick()` runs everything due up to `clock()`, stamping
objects with the time each transition happened. Given the same clock readings it does the same
thing (object UIDs aside). Everything runs on the store's event loop thread; no locks.

Layers, each a module: Engine (state, event queue, writing to the store, Events) -> Kubelet (pods on
nodes, usage) -> Preemption (Volcano's preempt action) -> Allocation (Volcano's scheduler: enqueue,
allocate, PodGroup status) -> Controllers (submission, Volcano's job controller, the training
operator) -> Driver (this: the public interface). Scenarios live in simulator.scenario (their types in
simulator.specs), the usage model in simulator.usage, the `scale` scenario's bulk objects in simulator.bulk.

Deleting a Job (or a pod) through the API is noticed at the next tick: the run is cleaned up and
resubmitted after its pause (a lost pod is replaced, as Volcano's job controller does).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from volcano_monitor.simulator import extras
from volcano_monitor.simulator.bulk import populate
from volcano_monitor.simulator.cluster_objects import (
    namespace_object,
    node_object,
    priority_class_object,
    queue_object,
)
from volcano_monitor.simulator.commands import consume
from volcano_monitor.simulator.controllers import Controllers
from volcano_monitor.simulator.resources import (
    COMMANDS,
    HYPERNODES,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    QUEUES,
    ResourceType,
)
from volcano_monitor.simulator.resources import PRIORITY_CLASSES as PRIORITY_CLASS_TYPE
from volcano_monitor.simulator.scenario import PRIORITY_CLASSES, SCENARIOS
from volcano_monitor.simulator.state import make_node
from volcano_monitor.simulator.store import Store, WatchEvent
from volcano_monitor.simulator.usage import render_prometheus
from volcano_monitor.simulator.vgpu_metrics import card_usage, dcgm_card_lines, render_vgpu

log = logging.getLogger(__name__)


class Driver(Controllers):
    """Plays a scenario against `store`; see the module docstring."""

    def __init__(self, store: Store, scenario: str = "default", speed: float = 1.0,
                 clock: Callable[[], float] = time.time, **scenario_params: Any) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r} (known: {', '.join(sorted(SCENARIOS))})")
        if not (isinstance(speed, int | float) and math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number, not {speed!r}")
        needs = SCENARIOS[scenario].min_release
        if needs is not None and HYPERNODES not in store.buckets:
            raise ValueError(f"scenario {scenario!r} needs Volcano {needs} or later (HyperNode, PodGroup "
                             f"networkTopology): serve --volcano-release {needs} or later")
        super().__init__(store, SCENARIOS[scenario].configure(**scenario_params), speed, clock,
                         f"volcano-sim/{scenario}")
        self._deleted: list[tuple[ResourceType, str, str, str]] = []
        self._created_jobs: list[tuple[str, str, str]] = []  # Jobs ADDED through the store: ours or to adopt
        self._commands: list[tuple[str, str]] = []  # Commands created since the last tick
        store.listeners.append(self._on_store_event)

    # ---- public interface ----------------------------------------------------------------------------

    def setup(self) -> None:
        """Create namespaces, nodes and queues, and submit the workloads due at once."""
        if self.started_at is not None:
            return
        self.now = self.started_at = self.clock()
        for ns in self.scenario.namespaces:
            self.store.upsert(NAMESPACES, namespace_object(ns, self.now))
        classes = PRIORITY_CLASSES if self.scenario.priority_classes is None else self.scenario.priority_classes
        for name, value in classes.items():  # the classes the workloads name, as a cluster would have
            self.store.upsert(PRIORITY_CLASS_TYPE, priority_class_object(name, value, self.now))
        for spec in self.scenario.nodes:
            node = make_node(spec)
            self.nodes[spec.name] = node
            self.store.upsert(NODES, node_object(node, self.now))
        cluster = self._cluster_allocatable()
        for qspec in self.scenario.queues:
            self.store.upsert(QUEUES, queue_object(qspec, self.now, cluster))
        if self.scenario.bulk is not None:
            populate(self.store, self.scenario.bulk, self.now)
            return
        for workload in self.scenario.workloads:
            self._after(workload.start_after, functools.partial(self._submit, workload))
        if self.scenario.workloads:
            extras.setup(self)  # HyperNodes, a CronJob, a JobFlow: where the Volcano release serves them
        self._advance(self.now)
        self._refresh_queues()

    def tick(self) -> None:
        """Advance every object to clock()."""
        if self.started_at is None:
            self.setup()
        now = max(self.clock(), self.now)
        if self.scenario.bulk is not None:
            self.now = now
            return
        self._handle_deletions()
        self._adopt_created()
        if self._commands:
            commands, self._commands = self._commands, []
            consume(self, commands)
            self._flush()
        self._advance(now)
        self.now = now
        self._schedule()
        self._flush()
        self._refresh_queues()
        extras.refresh(self)
        self._refresh_usage()
        self._trim_events()

    async def run(self, interval: float = 0.5) -> None:
        """Tick forever (setup() was called by the caller)."""
        while True:
            try:
                self.tick()
            except Exception:  # keep the cluster alive; the log says what broke
                log.exception("simulator driver tick failed")
            await asyncio.sleep(interval)

    def prometheus_metrics(self) -> bytes:
        """cAdvisor/DCGM-style usage of the running containers, as of the last tick, and on a sharing device
        plugin's nodes DCGM per card and the vGPU monitor's families (simulator.vgpu_metrics)."""
        containers = [p.usage for p in self.pods.values() if p.usage is not None]
        shared = [n for n in self.nodes.values() if n.shared]
        if not shared:
            return render_prometheus(containers, self.now)
        cards = card_usage(containers, self.now)
        body = render_prometheus(containers, self.now, dcgm_card_lines(shared, cards))
        return body + render_vgpu(containers, shared, self.now).encode()

    # ---- objects deleted by someone else (kubectl, tests) -----------------------------------------

    def _on_store_event(self, rtype: ResourceType, event: WatchEvent) -> None:
        if event.type == "ADDED" and rtype is JOBS:
            meta = event.obj.get("metadata") or {}
            self._created_jobs.append((meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")))
        if event.type == "ADDED" and rtype is COMMANDS:
            meta = event.obj.get("metadata") or {}
            self._commands.append((meta.get("namespace", ""), meta.get("name", "")))
        if event.type == "DELETED" and rtype in (JOBS, PODS):
            meta = event.obj.get("metadata") or {}
            self._deleted.append((rtype, meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")))

    def _adopt_created(self) -> None:
        """Jobs created through the API by someone else (the driver's own are in `runs` by now)."""
        created, self._created_jobs = self._created_jobs, []
        for namespace, name, uid in created:
            run = self.runs.get((namespace, name))
            if run is not None and run.uid == uid:
                continue
            obj = self.store.get(JOBS, namespace, name)
            if obj is not None and obj["metadata"].get("uid") == uid and run is None:
                self._adopt(obj)
        self._flush()

    def _handle_deletions(self) -> None:
        deleted, self._deleted = self._deleted, []
        for rtype, namespace, name, uid in deleted:
            if rtype is JOBS:
                run = self.runs.get((namespace, name))
                if run is not None and run.is_vcjob and run.uid == uid:
                    was_finished = run.finished
                    self._orphan(run)
                    if not was_finished and run.workload.repeat:
                        self._after(run.workload.pause, functools.partial(self._submit, run.workload))
            else:
                pod = self.pods.get((namespace, name))
                if pod is not None and pod.uid == uid and not pod.removed:
                    self._remove_pod(pod, in_store=False)
                    run = pod.run
                    alive = run.phase in ("Pending", "Running") and not run.orphaned if run.is_vcjob else True
                    if alive and not run.finished and run.pg_phase != "Pending":
                        self._create_pod(run, pod.task, pod.index)  # the controller replaces a lost pod
                        self._request_schedule()
        self._flush()
