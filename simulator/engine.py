"""The simulation engine under the driver: the driver's state, the event queue on the real clock, and
writing that state to the store (objects, queue status, Kubernetes Events).

Layers: Engine (this) -> Kubelet (simulator.kubelet) -> Preemption (simulator.preempt) -> Allocation
(simulator.allocate, Volcano's scheduler) -> Controllers (simulator.controllers, Volcano's job controller,
the training operator) -> Driver (simulator.driver, the public face).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from volcano_monitor.simulator import objects as o
from volcano_monitor.simulator import vgpu
from volcano_monitor.simulator.cluster_objects import event_object
from volcano_monitor.simulator.quantity import Resources, add, format_resources
from volcano_monitor.simulator.resources import EVENTS, JOBS, PODGROUPS, PODS, QUEUES, ResourceType
from volcano_monitor.simulator.scheduler import queue_chain, queue_view
from volcano_monitor.simulator.specs import Scenario
from volcano_monitor.simulator.state import JOB_API, NodeSim, Obj, PodSim, RunSim, pod_counts, rfc3339
from volcano_monitor.simulator.store import Store

REF_TYPES = {"Pod": PODS, "PodGroup": PODGROUPS, "Job": JOBS}
SCHEDULE_DELAY = 1.0  # scenario seconds: Volcano's schedule period
EVENT_REPEAT = 300.0  # scenario seconds: a repeated Event (FailedScheduling, ...) is rewritten at most this often


class Engine:
    def __init__(self, store: Store, scenario: Scenario, speed: float, clock: Callable[[], float],
                 seed: str) -> None:
        self.store = store
        self.scenario = scenario
        self.speed = float(speed)
        self.clock = clock
        self.now = 0.0
        self.started_at: float | None = None
        # PodMetrics/NodeMetrics refresh period (real seconds): ~15 s, or a scenario minute when faster.
        self.metrics_interval = max(1.0, min(15.0, 60.0 / self.speed))
        self.max_events = 300
        self.nodes: dict[str, NodeSim] = {}
        self.runs: dict[tuple[str, str], RunSim] = {}
        self.pods: dict[tuple[str, str], PodSim] = {}
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._rng = random.Random(seed)
        self._schedule_queued = False
        self._epoch = 0
        self._scheduled_at: tuple[Any, ...] = ()
        self._dirty_pods: dict[PodSim, None] = {}
        self._dirty_runs: dict[RunSim, None] = {}
        self._last_metrics = -math.inf
        self._published: set[tuple[str, str]] = set()
        self._published_at: dict[tuple[str, str], float] = {}  # whole-second time of the last PodMetrics
        self._events: deque[tuple[str, str]] = deque()
        self._series: dict[tuple[str, ...], list[Any]] = {}  # key -> [ns, name, count, written_at, obj]
        self._event_seq = itertools.count()

    # ---- implemented by the layers above ------------------------------------------------------------

    def _schedule(self) -> None:
        raise NotImplementedError

    def _sync_run(self, run: RunSim) -> None:
        raise NotImplementedError

    def _pod_finished(self, pod: PodSim) -> None:
        raise NotImplementedError

    # ---- the event queue ------------------------------------------------------------------------------

    def _after(self, scenario_seconds: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.now + scenario_seconds / self.speed, next(self._seq), action))

    def _advance(self, until: float) -> None:
        while self._heap and self._heap[0][0] <= until:
            when, _, action = heapq.heappop(self._heap)
            self.now = max(self.now, when)
            action()
            self._flush()

    def _request_schedule(self) -> None:
        self._epoch += 1  # something the scheduler looks at changed
        if not self._schedule_queued:
            self._schedule_queued = True
            self._after(SCHEDULE_DELAY, self._scheduled_pass)

    def _scheduled_pass(self) -> None:
        self._schedule_queued = False
        self._schedule()

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _queue_allocated(self) -> dict[str, Resources]:
        """What the pods holding resources request, per queue including its descendants."""
        queues = queue_view(self.store.objects(QUEUES))
        allocated: dict[str, Resources] = {}
        for pod in self.pods.values():
            if pod.holding:
                for name in queue_chain(pod.run.queue, queues):
                    add(allocated.setdefault(name, {}), {**pod.requests, "pods": 1.0})
        return allocated

    def _delete(self, rtype: ResourceType, namespace: str, name: str) -> None:
        if self.store.get(rtype, namespace, name) is not None:
            self.store.delete(rtype, namespace, name)

    def _flush(self) -> None:
        """Write the objects whose rendering changed."""
        pods, self._dirty_pods = self._dirty_pods, {}
        for pod in pods:
            if not pod.removed:
                self._write_pod(pod)
        runs, self._dirty_runs = self._dirty_runs, {}
        for run in runs:
            if self.runs.get((run.namespace, run.name)) is run:
                self._write_run(run)

    def _write_pod(self, pod: PodSim) -> None:
        current = self.store.get(PODS, pod.namespace, pod.name)
        if current is None or current["metadata"].get("uid") != pod.uid:
            return
        obj = o.pod_object(pod)
        meta = current["metadata"]
        added = {k: v for k, v in vgpu.pod_annotations(pod).items() if (meta.get("annotations") or {}).get(k) != v}
        if current.get("spec") != obj["spec"] or meta.get("deletionTimestamp") != obj["metadata"].get(
                "deletionTimestamp") or added:
            new = self.store.get_copy(PODS, pod.namespace, pod.name) or {}
            new["spec"] = obj["spec"]
            if added:  # the device plugin's annotations, once its vGPUs are placed (others' are kept)
                new["metadata"]["annotations"] = {**(new["metadata"].get("annotations") or {}), **added}
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                if key in obj["metadata"]:
                    new["metadata"][key] = obj["metadata"][key]
            new["metadata"]["resourceVersion"] = None
            self.store.update(PODS, new)
        if current.get("status") != obj["status"]:
            self.store.update(PODS, {"metadata": {"name": pod.name, "namespace": pod.namespace},
                                     "status": obj["status"]}, subresource="status")

    def _write_run(self, run: RunSim) -> None:
        if run.is_vcjob and not run.orphaned:
            current = self.store.get(JOBS, run.namespace, run.name)
            if current is not None and current["metadata"].get("uid") == run.uid:
                self._note_condition(run)
                status = o.job_status(run, self.now)
                old = dict(current.get("status") or {})
                if old.get("runningDuration", "").count(".") or status.get("runningDuration", "").count("."):
                    old.pop("runningDuration", None)  # nanoseconds: rewrite only when something else changed
                    compare = {k: v for k, v in status.items() if k != "runningDuration"}
                else:
                    compare = status
                if compare != old:
                    self.store.update(JOBS, {"metadata": {"name": run.name, "namespace": run.namespace},
                                             "status": status}, subresource="status")
        if run.pg_deleted:
            return
        pg = self.store.get(PODGROUPS, run.namespace, run.pg_name)
        if pg is not None:
            status = o.podgroup_status(run)
            if pg.get("status") != status:
                new = self.store.get_copy(PODGROUPS, run.namespace, run.pg_name) or {}
                new["status"] = status
                new["metadata"]["resourceVersion"] = None
                self.store.update(PODGROUPS, new)

    def _note_condition(self, run: RunSim) -> None:
        """Volcano's job controller appends a condition on every status write that changes the phase
        or, on its sync path, the pod counts (a running job collects one per pod start and finish);
        `state.lastTransitionTime` moves with each. The final writes of a finished job append none."""
        if run.status_mode == "final":
            return
        core: tuple[object, ...] = (run.phase,)
        if run.status_mode == "sync":
            core += tuple(sorted(pod_counts(run).items()))
        if core != run.status_core or not run.conditions:
            run.status_core = core
            run.state_time = self.now
            run.conditions.append((run.phase, self.now))

    def _refresh_queues(self) -> None:
        """Queue status as v1.12's scheduler and queue controller write it: allocated (cpu and memory
        always, pods and other resources while in use), `reservation: {}`, state; no PodGroup counts.
        A queue created without them gets `parent: root` and `dequeueStrategy: traverse`."""
        allocated = self._queue_allocated()
        for queue in self.store.objects(QUEUES):
            name = queue["metadata"]["name"]
            spec = queue.get("spec") or {}
            spec = spec if isinstance(spec, dict) else {}
            if "dequeueStrategy" not in spec or (name != "root" and not spec.get("parent")):
                new = self.store.get_copy(QUEUES, "", name) or {}
                new["spec"] = {**spec, "dequeueStrategy": spec.get("dequeueStrategy") or "traverse"}
                if name != "root":
                    new["spec"]["parent"] = spec.get("parent") or "root"
                new["metadata"]["resourceVersion"] = None
                pruner = self.store.pruners.get(QUEUES)  # a release without the field drops it: write once
                if pruner is not None:
                    pruner(new)
                if new["spec"] != spec:
                    self.store.update(QUEUES, new)
            current = queue.get("status") or {}
            status: Obj = {
                "allocated": format_resources({"cpu": 0.0, "memory": 0.0, **allocated.get(name, {})},
                                              keep=("cpu", "memory")),
                "reservation": {},
                "state": current.get("state") or "Open",
            }
            if current != status:
                self.store.update(QUEUES, {"metadata": {"name": name}, "status": status}, subresource="status")

    @staticmethod
    def _pod_ref(pod: PodSim) -> Obj:
        return {"kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid, "apiVersion": "v1"}

    @staticmethod
    def _pg_ref(run: RunSim) -> Obj:
        return {"kind": "PodGroup", "namespace": run.namespace, "name": run.pg_name, "uid": run.pg_uid,
                "apiVersion": "scheduling.volcano.sh/v1beta1"}

    @staticmethod
    def _job_ref(run: RunSim) -> Obj:
        return {"kind": "Job", "namespace": run.namespace, "name": run.name, "uid": run.uid,
                "apiVersion": JOB_API}

    def _record(self, ref: Obj, kind: str, reason: str, message: str, component: str = "volcano",
                host: str | None = None, series: tuple[str, ...] | None = None) -> None:
        """Create an Event; a repeated one (same series and message) bumps its count instead, and is
        rewritten at most every EVENT_REPEAT scenario seconds."""
        namespace = ref.get("namespace") or "default"
        rtype = REF_TYPES.get(str(ref.get("kind")))
        current = self.store.get(rtype, ref.get("namespace", ""), ref["name"]) if rtype is not None else None
        if current is not None:  # the recorder names the version it saw
            ref = {**ref, "resourceVersion": current["metadata"].get("resourceVersion")}
        key = (*series, namespace, ref["name"], message) if series is not None else None
        entry = self._series.get(key) if key is not None else None
        if entry is not None and self.store.get(EVENTS, entry[0], entry[1]) is not None:
            entry[2] += 1
            if (self.now - entry[3]) * self.speed >= EVENT_REPEAT:
                obj = dict(entry[4], count=entry[2], lastTimestamp=rfc3339(self.now))
                obj["metadata"] = {**obj["metadata"], "resourceVersion": None}
                entry[3], entry[4] = self.now, obj
                self.store.update(EVENTS, obj)
            return
        name = f"{ref['name']}.{int(self.now * 1e9) + next(self._event_seq):x}"
        obj = event_object(name, namespace, ref, kind, reason, message, component, self.now, self.now, 1, host)
        self.store.create(EVENTS, obj)
        self._events.append((namespace, name))
        if key is not None:
            self._series[key] = [namespace, name, 1, self.now, obj]

    def _trim_events(self) -> None:
        while len(self._events) > self.max_events:
            namespace, name = self._events.popleft()
            self._delete(EVENTS, namespace, name)
        if len(self._series) > self.max_events:
            live = set(self._events)
            self._series = {k: v for k, v in self._series.items() if (v[0], v[1]) in live}
