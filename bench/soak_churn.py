"""bench/soak.py's workload driver: `Churn` plays Volcano's job controller and scheduler, the kubelet, the TTL
controller, the garbage collector and metrics-server by writing into the simulator's store, on the server's
loop, one batch per tick; `setup_cluster` writes the namespaces, nodes and queues it runs on.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from soak_workload import (
    NAMESPACE_NAMES,
    QUEUE_NAMES,
    Obj,
    PodRun,
    Run,
    event_object,
    job_object,
    make_run,
    pod_object,
    pod_status,
    podgroup_object,
    rfc3339,
    set_node,
)

from volcano_monitor.simulator.quantity import parse_quantity
from volcano_monitor.simulator.resources import (
    EVENTS,
    JOBS,
    NAMESPACES,
    NODES,
    POD_METRICS,
    PODGROUPS,
    PODS,
    QUEUES,
    ResourceType,
)
from volcano_monitor.simulator.store import ApiError, Store
from volcano_monitor.simulator.usage import ContainerUsage, pod_metrics

METRICS_PERIOD = 30.0  # wall seconds between PodMetrics refreshes of a running pod (the watchdog polls every 30 s)
QUEUE_STATUS_PERIOD = 10.0  # wall seconds
EVENT_TTL = 3600.0  # cluster seconds (kube-apiserver's --event-ttl)
GRACE = 30.0  # cluster seconds between a pod's deletionTimestamp and its removal
MAX_ACTIONS_PER_STEP = 4000  # keeps one batch on the server's loop short; the rest waits for the next tick


def go_duration(seconds: float) -> str:
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s" if minutes else f"{secs}s"


# ---- the churn: Volcano, the kubelet, the garbage collector, metrics-server ------------------------------

class Churn:
    """Runs on the simulator's event loop (every method is called through `SimulatorThread.call`)."""

    def __init__(self, store: Store, pods_per_second: float, speed: float, nodes: int, seed: int) -> None:
        self.store = store
        self.pods_per_second = pods_per_second
        self.speed = speed  # cluster seconds per wall second
        self.rng = random.Random(seed)
        self.heap: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self.seq = itertools.count()
        self.job_seq = itertools.count()
        self.credit = 0.0
        self.last: float | None = None
        self.submitting = True
        self.cpu_nodes = [f"cpu-{i:03d}" for i in range(nodes - nodes // 5)]
        self.gpu_nodes = [f"gpu-{i:03d}" for i in range(nodes // 5)]
        self.running: dict[tuple[str, str], PodRun] = {}
        self.runs = 0
        self.pods_created = 0
        self.writes: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.max_lag = 0.0
        self.actions = 0
        self.next_queue_status = 0.0

    # -- scheduling ----------------------------------------------------------------------------------------

    def after(self, cluster_seconds: float, fn: Callable[[Any], None], arg: Any) -> None:
        heapq.heappush(self.heap, (time.monotonic() + cluster_seconds / self.speed, next(self.seq), fn, arg))

    def after_wall(self, wall_seconds: float, fn: Callable[[Any], None], arg: Any) -> None:
        heapq.heappush(self.heap, (time.monotonic() + wall_seconds, next(self.seq), fn, arg))

    def step(self) -> None:
        now = time.monotonic()
        if self.last is not None and self.submitting:
            self.credit += (now - self.last) * self.pods_per_second
        self.last = now
        while self.credit > 0 and self.submitting:
            run = make_run(self.rng, next(self.job_seq))
            self.credit -= run.npods
            self.guard("submit", self.submit, run)
        done = 0
        while self.heap and self.heap[0][0] <= now and done < MAX_ACTIONS_PER_STEP:
            due, _, fn, arg = heapq.heappop(self.heap)
            self.max_lag = max(self.max_lag, now - due)
            self.guard(fn.__name__, fn, arg)
            done += 1
        self.actions += done
        if now >= self.next_queue_status:
            self.next_queue_status = now + QUEUE_STATUS_PERIOD
            self.guard("queue_status", self.queue_status, None)

    def guard(self, what: str, fn: Callable[[Any], None], arg: Any) -> None:
        try:
            fn(arg)
        except ApiError as exc:  # e.g. an object already gone: counted, the churn goes on
            self.errors[f"{what}: {exc.code} {exc.reason}"] += 1

    # -- store writes --------------------------------------------------------------------------------------

    def create(self, rtype: ResourceType, obj: Obj) -> Obj:
        self.writes[f"{rtype.plural}/create"] += 1
        return self.store.create(rtype, obj)

    def status(self, rtype: ResourceType, namespace: str, name: str, status: Obj) -> None:
        self.writes[f"{rtype.plural}/status"] += 1
        self.store.update(rtype, {"metadata": {"name": name, "namespace": namespace}, "status": status}, namespace,
                          "status")

    def change(self, rtype: ResourceType, namespace: str, name: str, edit: Callable[[Obj], None]) -> None:
        self.writes[f"{rtype.plural}/update"] += 1
        if self.store.mutate(rtype, namespace, name, edit) is None:
            raise self.store.not_found(rtype, name)

    def delete(self, rtype: ResourceType, namespace: str, name: str) -> None:
        self.writes[f"{rtype.plural}/delete"] += 1
        self.store.delete(rtype, namespace, name)

    # -- the lifecycle -------------------------------------------------------------------------------------

    def submit(self, run: Run) -> None:
        run.created = time.time()
        run.uid = uuid.uuid4().hex[:8]  # placeholder until the Job exists: the PodGroup is <job>-<job uid>
        job = self.create(JOBS, job_object(run))
        run.uid = job["metadata"]["uid"]
        self.runs += 1
        pg = self.create(PODGROUPS, podgroup_object(run))
        if run.wait:
            message = (f"{run.min_available}/{run.npods} tasks in gang unschedulable: pod group is not ready, "
                       f"{run.min_available} minAvailable")
            status = {"phase": "Pending", "conditions": [{
                "type": "Unschedulable", "status": "True", "transitionID": str(uuid.uuid4()),
                "lastTransitionTime": rfc3339(run.created), "reason": "NotEnoughResources", "message": message}]}
            self.change(PODGROUPS, run.namespace, run.pg_name, lambda o: o.__setitem__("status", status))
            self.event(run, "Warning", "Unschedulable", message, pg["metadata"]["uid"])
        self.after(run.wait + self.rng.uniform(0.5, 5), self.enqueue, run)

    def event(self, run: Run, kind: str, reason: str, message: str, uid: str) -> None:
        ev = self.create(EVENTS, event_object(run, time.time(), kind, reason, message, uid))
        self.after(EVENT_TTL, self.expire_event, (run.namespace, ev["metadata"]["name"]))

    def expire_event(self, key: tuple[str, str]) -> None:
        self.delete(EVENTS, *key)

    def enqueue(self, run: Run) -> None:
        if run.gone:
            return
        self.change(PODGROUPS, run.namespace, run.pg_name,
                    lambda o: o.__setitem__("status", {"phase": "Inqueue", "conditions": []}))
        now = time.time()
        for task in run.tasks:
            for index in range(task.replicas):
                pod = PodRun(run, task, index, f"{run.name}-{task.name}-{index}")
                run.pods.append(pod)
                self.create(PODS, pod_object(pod, now))
                self.pods_created += 1
        counts = {t.name: {"phase": {"Pending": t.replicas}} for t in run.tasks}
        run.conditions.append({"status": "Pending", "lastTransitionTime": rfc3339(now)})
        self.status(JOBS, run.namespace, run.name, {
            "state": {"phase": "Pending", "lastTransitionTime": rfc3339(run.created)},
            "minAvailable": run.min_available, "pending": run.npods, "taskStatusCount": counts,
            "conditions": list(run.conditions)})
        self.after(self.rng.uniform(0.5, 3), self.bind, run)

    def bind(self, run: Run) -> None:
        if run.gone:
            return
        gpu = any(t.gpus for t in run.tasks)
        nodes = self.gpu_nodes if gpu else self.cpu_nodes
        for pod in run.pods:
            pod.node = self.rng.choice(nodes)
            self.change(PODS, run.namespace, pod.name, functools.partial(set_node, node=pod.node))
        pg_uid = (self.store.get(PODGROUPS, run.namespace, run.pg_name) or {}).get("metadata", {}).get("uid", "")
        self.change(PODGROUPS, run.namespace, run.pg_name, lambda o: o.__setitem__("status", {
            "phase": "Running", "running": run.npods,
            "conditions": [{"type": "Scheduled", "status": "True", "transitionID": str(uuid.uuid4()),
                            "lastTransitionTime": rfc3339(time.time()),
                            "reason": "tasks in gang are ready to be scheduled", "message": ""}]}))
        self.event(run, "Normal", "Scheduled", "pod group is ready", pg_uid)
        self.after(self.rng.uniform(2, 30), self.start, run)

    def start(self, run: Run) -> None:
        if run.gone:
            return
        now = time.time()
        run.running_since = now
        for pod in run.pods:
            pod.phase, pod.started = "Running", now
            self.status(PODS, run.namespace, pod.name, pod_status(pod, now))
            task = pod.task
            pod.usage = ContainerUsage(run.namespace, pod.name, task.name, pod.node, now, self.speed, task.profile,
                                       cpu_request=parse_quantity(task.cpu),
                                       memory_request=parse_quantity(task.memory),
                                       memory_limit=parse_quantity(task.memory_limit) if task.memory_limit else None)
            self.running[(run.namespace, pod.name)] = pod
            self.after_wall(self.rng.uniform(0, METRICS_PERIOD), self.publish, pod)
            self.after(run.runtime * self.rng.uniform(0.9, 1.1), self.finish_pod, pod)
        counts = {t.name: {"phase": {"Running": t.replicas}} for t in run.tasks}
        run.conditions.append({"status": "Running", "lastTransitionTime": rfc3339(now)})
        self.status(JOBS, run.namespace, run.name, {
            "state": {"phase": "Running", "lastTransitionTime": rfc3339(now)}, "minAvailable": run.min_available,
            "running": run.npods, "taskStatusCount": counts, "conditions": list(run.conditions)})
        if run.outcome in ("fail", "oom"):
            self.after(run.runtime * self.rng.uniform(0.1, 0.8), self.fail, run.pods[-1])
        elif run.outcome == "cancel":
            self.after(run.runtime * self.rng.uniform(0.1, 0.8), self.cancel, run)

    def stop_pod(self, pod: PodRun, exit_code: int, reason: str) -> None:
        self.running.pop((pod.run.namespace, pod.name), None)
        pod.usage = None
        if pod.published:
            pod.published = False
            self.delete(POD_METRICS, pod.run.namespace, pod.name)
        pod.phase = "Succeeded" if exit_code == 0 else "Failed"
        self.status(PODS, pod.run.namespace, pod.name, pod_status(pod, time.time(), exit_code, reason))

    def finish_pod(self, pod: PodRun) -> None:
        run = pod.run
        if run.gone or run.finished or pod.phase != "Running":
            return
        self.stop_pod(pod, 0, "Completed")
        run.done_pods += 1
        if run.done_pods == run.npods:
            self.finish(run, "Completed", "", run.npods, 0)

    def fail(self, pod: PodRun) -> None:
        run = pod.run
        if run.gone or run.finished or pod.phase != "Running":
            return
        oom = run.outcome == "oom"
        self.stop_pod(pod, 137 if oom else 1, "OOMKilled" if oom else "Error")
        for other in run.pods:  # the job is aborted: its other running pods are deleted
            if other.phase == "Running":
                self.running.pop((run.namespace, other.name), None)
                self.terminate(other)
        self.finish(run, "Failed", "PodFailed", run.done_pods, 1)

    def finish(self, run: Run, phase: str, reason: str, succeeded: int, failed: int) -> None:
        now = time.time()
        run.finished = True
        self.outcomes[run.outcome] += 1
        run.conditions.append({"status": phase, "lastTransitionTime": rfc3339(now)})
        state: Obj = {"phase": phase, "lastTransitionTime": rfc3339(now)}
        if reason:
            state["reason"] = reason
        self.status(JOBS, run.namespace, run.name, {
            "state": state, "minAvailable": run.min_available, "succeeded": succeeded, "failed": failed,
            "conditions": list(run.conditions)})
        self.delete(PODGROUPS, run.namespace, run.pg_name)
        self.status(JOBS, run.namespace, run.name, {  # Volcano's last write: counts wiped, a new version
            "state": state, "minAvailable": run.min_available, "version": 1,
            "runningDuration": go_duration(now - run.created), "conditions": list(run.conditions)})
        self.after(run.ttl, self.collect, run)

    def terminate(self, pod: PodRun) -> None:
        """Graceful deletion: a deletionTimestamp now, the pod gone after the grace period."""
        if pod.gone or pod.deleting:
            return
        pod.deleting = True
        if pod.published:
            pod.published = False
            self.delete(POD_METRICS, pod.run.namespace, pod.name)
        pod.usage = None
        stamp = rfc3339(time.time() + GRACE)

        def mark(obj: Obj) -> None:
            obj["metadata"]["deletionTimestamp"] = stamp
            obj["metadata"]["deletionGracePeriodSeconds"] = int(GRACE)

        self.change(PODS, pod.run.namespace, pod.name, mark)
        self.after(GRACE * self.rng.uniform(0.1, 1.0), self.remove_pod, pod)

    def remove_pod(self, pod: PodRun) -> None:
        if not pod.gone:
            pod.gone = True
            self.delete(PODS, pod.run.namespace, pod.name)

    def cancel(self, run: Run) -> None:
        if run.gone or run.finished:
            return
        run.gone = run.finished = True
        self.outcomes["cancel"] += 1
        self.delete(JOBS, run.namespace, run.name)  # the garbage collector follows: pods, then the PodGroup
        for pod in run.pods:
            self.running.pop((run.namespace, pod.name), None)
            self.terminate(pod)
        self.after(GRACE, self.remove_podgroup, run)

    def remove_podgroup(self, run: Run) -> None:
        self.delete(PODGROUPS, run.namespace, run.pg_name)

    def collect(self, run: Run) -> None:
        """ttlSecondsAfterFinished: the Job goes, the garbage collector takes its pods."""
        if run.gone:
            return
        run.gone = True
        self.delete(JOBS, run.namespace, run.name)
        for pod in run.pods:
            if not pod.gone and not pod.deleting:
                pod.gone = True
                self.delete(PODS, run.namespace, pod.name)
        run.pods.clear()

    # -- metrics-server and Volcano's queue controller ------------------------------------------------------

    def publish(self, pod: PodRun) -> None:
        if pod.usage is None or pod.gone or pod.deleting:
            return
        now = time.time()
        run = pod.run
        labels = {"volcano.sh/job-name": run.name, "volcano.sh/queue-name": run.queue,
                  "volcano.sh/task-spec": pod.task.name}
        self.writes["podmetrics/upsert"] += 1
        self.store.upsert(POD_METRICS, pod_metrics(run.namespace, pod.name, [pod.usage], now, labels,
                                                   pod.metrics_since))
        pod.published = True
        pod.metrics_since = float(math.floor(now))
        self.after_wall(METRICS_PERIOD, self.publish, pod)

    def queue_status(self, _: Any) -> None:
        cpu: dict[str, float] = dict.fromkeys(QUEUE_NAMES, 0.0)
        memory: dict[str, float] = dict.fromkeys(QUEUE_NAMES, 0.0)
        for pod in self.running.values():
            cpu[pod.run.queue] += parse_quantity(pod.task.cpu)
            memory[pod.run.queue] += parse_quantity(pod.task.memory)
        for name in QUEUE_NAMES:
            self.status(QUEUES, "", name, {"allocated": {"cpu": f"{round(cpu[name] * 1000)}m",
                                                         "memory": str(round(memory[name]))},
                                           "reservation": {}, "state": "Open"})

    def population(self) -> dict[str, int]:
        return {"pods": len(self.store.bucket(PODS).objects), "jobs": len(self.store.bucket(JOBS).objects),
                "podgroups": len(self.store.bucket(PODGROUPS).objects),
                "running_pods": len(self.running), "events": len(self.store.bucket(EVENTS).objects),
                "podmetrics": len(self.store.bucket(POD_METRICS).objects), "pending_actions": len(self.heap)}


def setup_cluster(store: Store, nodes: int) -> None:
    now = rfc3339(time.time())
    for ns in (*NAMESPACE_NAMES, "default", "kube-system", "volcano-system"):
        store.create(NAMESPACES, {"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                                  "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    for i in range(nodes):
        gpu = i >= nodes - nodes // 5
        name = f"gpu-{i - (nodes - nodes // 5):03d}" if gpu else f"cpu-{i:03d}"
        capacity = {"cpu": "96", "memory": "754Gi", "pods": "110", **({"nvidia.com/gpu": "8"} if gpu else {})}
        store.create(NODES, {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                     "node-role/gpu": str(gpu).lower()}},
                             "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                                                  "effect": "NoSchedule"}]} if gpu else {},
                             "status": {"capacity": capacity, "allocatable": capacity,
                                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
    store.create(QUEUES, {"metadata": {"name": "root"},
                          "spec": {"weight": 1, "reclaimable": False, "dequeueStrategy": "traverse",
                                   "guarantee": {"resource": {"cpu": "0", "memory": "0"}}},
                          "status": {"allocated": {"cpu": "0", "memory": "0"}, "reservation": {}, "state": "Open"}})
    for i, name in enumerate(QUEUE_NAMES):
        store.create(QUEUES, {"metadata": {"name": name},
                              "spec": {"weight": 1 + i % 3, "reclaimable": True, "dequeueStrategy": "traverse",
                                       "parent": "root", "guarantee": {}},
                              "status": {"allocated": {"cpu": "0", "memory": "0"}, "reservation": {},
                                         "state": "Open"}})

