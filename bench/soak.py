"""Memory soak (issue 12): does the RSS of `volcano-exporter` and `volcano-watchdog` stay flat under a
day of pod churn? Prints one JSON object on stdout (progress on stderr).

    .venv/bin/python bench/soak.py                # 20 minutes: 300,000 pods/day, one day in 20 minutes
    .venv/bin/python bench/soak.py --minutes 2    # quick check, same churn rate
    .venv/bin/python bench/soak.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/soak

Both are the real programs (their console scripts, `--kubeconfig` from `write_kubeconfig`), the watchdog
on a fresh SQLite file in a temporary directory unless --database-url is given (used as is; a
PostgreSQL database should be empty or the watchdog's own). They watch the simulated API server
(`SimulatorThread`, no scenario: nothing but this script writes to its store), which runs in this
process. This script plays Volcano's job controller and scheduler, the kubelet, the TTL controller,
the garbage collector and metrics-server by writing into the store (through `SimulatorThread.call`,
on the server's loop, in one batch every --tick seconds):

- Jobs (batch.volcano.sh/v1alpha1) arrive so that --pods-per-day pods are created per simulated day,
  and a simulated day lasts --day-minutes of wall time (default 300,000 pods in 20 minutes, 250 pods/s,
  every cluster duration below divided by 72). Shapes: single-pod batch jobs (50%), 2-8 pod gangs (25%),
  GPU training jobs with a master and 3-15 workers (12%), 10-40 pod arrays with minAvailable 1 (13%);
  lognormal runtimes (median 10 min to 1 h of cluster time, capped at 3 h so that the live population
  is steady well before 20% of a 20-minute run); 10% of the gangs wait minutes in a Pending PodGroup
  (Unschedulable condition and Event) before they are enqueued.
- Lifecycle: Job (Pending) + PodGroup (`status: {}`) -> PodGroup Inqueue, pods created Pending, Job
  pending=N -> pods bound (spec.nodeName), PodGroup Running + a `Scheduled` Event -> pods Running, Job
  Running -> pods Succeeded (6% of jobs: one pod Failed exit 1, 2%: OOMKilled exit 137, the others
  deleted gracefully), Job Completed/Failed (then its final status without counts, as Volcano writes
  it), PodGroup deleted -> after ttlSecondsAfterFinished (5 min to 1 h) the Job and its pods are
  deleted. 2% of the jobs are deleted while running (pods get a deletionTimestamp, then go).
  Events are deleted after an hour of cluster time.
- Usage: metrics-server's PodMetrics (metrics.k8s.io) for every running pod, refreshed every 30 s of
  wall time from `simulator.usage` (ContainerUsage, pod_metrics), deleted when the pod stops; the
  watchdog polls them (its default 30 s), so it has samples (`watchdog_usage_samples`).
- Queues' status.allocated is rewritten every 10 s from the running pods.

Measured:
- exporter_rss_bytes / watchdog_rss_bytes: VmRSS of each process (/proc/PID/status) at 25, 50, 75 and
  100% of the run, each the median of the samples taken every 2 s over the 60 s before the checkpoint:
  a single reading can land inside a scrape (the exporter builds a 14 MB body) or a flush and say
  +3% for a moment, in either direction, and 60 s hold four scrapes and four of the programs' malloc
  trims (every 15 s), so where the checkpoint falls in their cycles does not decide the figure. The single
  readings are in `*_rss_bytes_instant`;
  `rss_timeline` also has one sample a minute (a single reading, and `*_median` of the last 60 s).
  The first ~20% of the run is warm-up
  (informer caches, the first relist, histograms, the live population reaching its steady size), so the
  growth ratios are RSS at 100% / RSS at 25% (target <= 1.05). `live_objects` gives the store's pod,
  job and PodGroup counts at the same points: growth with a flat population is retention.
  `*_rss_growth_ratio_at_equal_population` (a diagnostic, not the target) fits the timeline's medians from
  25% on to RSS = a + b * minute + c * live pods and gives 1 + b * (75% of the run) / RSS at 25%: the
  growth that time alone accounts for, since the live population drifts a few per cent either way.
- The exporter's /metrics is scraped every --scrape-interval seconds (15, as Prometheus), the
  watchdog's /metrics too; `scrapes` has counts, sizes and durations, and the events each applied
  (from their self-metrics).
- cpu_seconds of each process, so that the load of the soak itself can be judged (2 shared cores).

--debug-memory gc|tracemalloc runs both programs under a small bootstrap that dumps, on SIGUSR1, the
gc object counts by type, the allocator's figures (pymalloc blocks, arenas and free bytes, glibc heap in
use, free and mmapped, SQLite's own, and the RSS that glibc's malloc_trim(0) gives back: the dump trims),
the length and table bytes of the project's large containers and, with `tracemalloc`, a snapshot with 10
frames; the dumps are taken at 25 and 100% and the JSON gets the types, containers and
allocation sites that grew most (`memory_debug`). A dump is taken after its checkpoint's readings, and
what it allocates (a list of every object, ~8 MB) raises the readings after it; tracemalloc also slows
the programs: the ratios of a debug run are not the measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import heapq
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

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
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.simulator.store import ApiError, Store
from volcano_monitor.simulator.usage import (
    BUSY,
    LIGHT,
    OVER_REQUESTED,
    TRAINING,
    ContainerUsage,
    UsageProfile,
    oom_profile,
    pod_metrics,
)

Obj = dict[str, Any]
TARGET_RSS_GROWTH_RATIO = 1.05
CHECKPOINTS = (25, 50, 75, 100)
JOB_API = "batch.volcano.sh/v1alpha1"
PG_API = "scheduling.volcano.sh/v1beta1"
NAMESPACE_NAMES = ("team-a", "team-b", "team-c", "ml-research", "ml-prod", "data-eng", "analytics", "sim")
QUEUE_NAMES = ("default", "research", "production", "batch", "dev", "ml-training", "analytics")
METRICS_PERIOD = 30.0  # wall seconds between PodMetrics refreshes of a running pod (the watchdog polls every 30 s)
QUEUE_STATUS_PERIOD = 10.0  # wall seconds
EVENT_TTL = 3600.0  # cluster seconds (kube-apiserver's --event-ttl)
RUNTIME_CAP = 3 * 3600.0  # cluster seconds
GRACE = 30.0  # cluster seconds between a pod's deletionTimestamp and its removal
MAX_ACTIONS_PER_STEP = 4000  # keeps one batch on the server's loop short; the rest waits for the next tick
RSS_SAMPLE_SECONDS = 2.0  # wall seconds between RSS readings of both programs
RSS_WINDOW_SECONDS = 60.0  # a checkpoint's RSS is the median of the readings in this window before it
HISTORY_LIMIT = 30_000  # watch history per resource kept by the store (its default, 200,000, holds GBs of pods)

log_start = time.monotonic()

_ROOT = Path(__file__).resolve().parents[1]


def log(message: str) -> None:
    print(f"[soak {time.monotonic() - log_start:7.1f}s] {message}", file=sys.stderr, flush=True)


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def go_duration(seconds: float) -> str:
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s" if minutes else f"{secs}s"


# ---- workload shapes -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Task:
    name: str
    replicas: int
    cpu: str
    memory: str
    image: str
    command: tuple[str, ...]
    profile: UsageProfile
    gpus: int = 0
    memory_limit: str | None = None


@dataclass(eq=False, slots=True)
class PodRun:
    run: Run
    task: Task
    index: int
    name: str
    node: str = ""
    phase: str = "Pending"
    started: float = 0.0  # wall epoch
    usage: ContainerUsage | None = None
    metrics_since: float | None = None
    published: bool = False
    gone: bool = False
    deleting: bool = False


@dataclass(eq=False, slots=True)
class Run:
    name: str
    namespace: str
    queue: str
    shape: str
    tasks: tuple[Task, ...]
    min_available: int
    runtime: float  # cluster seconds
    outcome: str  # ok, fail, oom, cancel
    ttl: int  # ttlSecondsAfterFinished
    wait: float  # cluster seconds in a Pending PodGroup before Inqueue
    created: float = 0.0  # wall epoch
    uid: str = ""
    pods: list[PodRun] = field(default_factory=list)
    finished: bool = False
    gone: bool = False
    done_pods: int = 0
    conditions: list[Obj] = field(default_factory=list)
    running_since: float = 0.0

    @property
    def pg_name(self) -> str:
        return f"{self.name}-{self.uid}"

    @property
    def npods(self) -> int:
        return sum(t.replicas for t in self.tasks)


CPUS = ("250m", "500m", "1", "2", "4", "8")
MEMORIES = ("512Mi", "1Gi", "2Gi", "4Gi", "8Gi", "16Gi")
IMAGES = ("python:3.11-slim", "registry.example.com/etl/spark-runner:3.5.1", "busybox:1.36",
          "registry.example.com/ml/pytorch:2.3.0-cuda12.1", "registry.example.com/sim/solver:7.2")


def lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(rng.gauss(0.0, sigma))))


def make_run(rng: random.Random, seq: int) -> Run:
    roll = rng.random()
    profile = rng.choice((BUSY, BUSY, LIGHT, OVER_REQUESTED))
    cpu, memory = rng.choice(CPUS), rng.choice(MEMORIES)
    if roll < 0.50:
        shape, runtime = "batch", lognormal(rng, 600, 1.0, 30, RUNTIME_CAP)
        tasks: tuple[Task, ...] = (Task("main", 1, cpu, memory, rng.choice(IMAGES), ("python", "run.py"), profile),)
        min_available = 1
    elif roll < 0.75:
        shape, runtime = "gang", lognormal(rng, 1200, 0.9, 60, RUNTIME_CAP)
        replicas = rng.randint(2, 8)
        tasks = (Task("worker", replicas, cpu, memory, rng.choice(IMAGES), ("sh", "-c", "./work.sh"), profile),)
        min_available = replicas
    elif roll < 0.87:
        shape, runtime = "training", lognormal(rng, 3600, 0.8, 300, RUNTIME_CAP)
        image, gpus = IMAGES[3], rng.choice((1, 2, 4, 8))
        workers = rng.randint(3, 15)
        tasks = (Task("master", 1, "4", "16Gi", image, ("torchrun", "train.py"), TRAINING, gpus, "16Gi"),
                 Task("worker", workers, "8", "32Gi", image, ("torchrun", "train.py"), TRAINING, gpus, "32Gi"))
        min_available = 1 + workers
    else:
        shape, runtime = "array", lognormal(rng, 300, 0.8, 20, RUNTIME_CAP)
        tasks = (Task("shard", rng.randint(10, 40), cpu, memory, IMAGES[1], ("spark-submit", "job.py"), profile),)
        min_available = 1
    outcome_roll = rng.random()
    outcome = "fail" if outcome_roll < 0.06 else "oom" if outcome_roll < 0.08 else \
        "cancel" if outcome_roll < 0.10 else "ok"
    if outcome == "oom":
        task = tasks[-1]
        tasks = (*tasks[:-1], Task(task.name, task.replicas, task.cpu, task.memory, task.image, task.command,
                                   oom_profile(runtime / 2), task.gpus, task.memory))
    wait = lognormal(rng, 300, 0.8, 60, 1800) if shape != "batch" and rng.random() < 0.10 else 0.0
    return Run(name=f"{shape}-{seq:07d}", namespace=rng.choice(NAMESPACE_NAMES), queue=rng.choice(QUEUE_NAMES),
               shape=shape, tasks=tasks, min_available=min_available, runtime=runtime, outcome=outcome,
               ttl=rng.choice((300, 600, 1800, 3600)), wait=wait)


# ---- objects (shaped as in simulator/objects.py, i.e. as Volcano and the kubelet write them) -------------

def requests_of(task: Task) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu": task.cpu, "memory": task.memory}
    if task.gpus:
        out["nvidia.com/gpu"] = task.gpus
    return out


def limits_of(task: Task) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if task.memory_limit:
        out["memory"] = task.memory_limit
    if task.gpus:
        out["nvidia.com/gpu"] = task.gpus
    return out


def container(task: Task, env: list[Obj] | None = None) -> Obj:
    out: Obj = {"name": task.name, "image": task.image,
                "imagePullPolicy": "IfNotPresent", "command": list(task.command),
                "resources": {"requests": requests_of(task),
                              **({"limits": limits_of(task)} if limits_of(task) else {})},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    if env:
        out["env"] = env
    return out


def template(task: Task) -> Obj:
    spec: Obj = {"containers": [container(task)], "restartPolicy": "Never"}
    if task.gpus:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"labels": {"app.kubernetes.io/component": task.name}}, "spec": spec}


def job_object(run: Run) -> Obj:
    tasks = []
    for task in run.tasks:
        entry: Obj = {"name": task.name, "replicas": task.replicas, "template": template(task)}
        if run.shape == "array":
            entry["minAvailable"] = 1
        tasks.append(entry)
    spec: Obj = {"schedulerName": "volcano", "queue": run.queue, "minAvailable": run.min_available, "maxRetry": 3,
                 "ttlSecondsAfterFinished": run.ttl, "tasks": tasks}
    if run.shape == "training":
        spec["plugins"] = {"env": [], "svc": []}
        spec["policies"] = [{"event": "PodEvicted", "action": "RestartJob"}]
    return {"apiVersion": JOB_API, "kind": "Job",
            "metadata": {"name": run.name, "namespace": run.namespace,
                         "labels": {"app.kubernetes.io/name": run.shape, "app.kubernetes.io/managed-by": "soak"}},
            "spec": spec,
            "status": {"state": {"phase": "Pending", "lastTransitionTime": rfc3339(run.created)},
                       "minAvailable": run.min_available}}


def quantity_sum(tasks: tuple[Task, ...], min_available: int) -> dict[str, str]:
    cpu = memory = gpus = 0.0
    pods = 0
    left = min_available
    for task in tasks:
        n = min(left, task.replicas)
        left -= n
        pods += n
        cpu += parse_quantity(task.cpu) * n
        memory += parse_quantity(task.memory) * n
        gpus += task.gpus * n
    out = {"count/pods": str(pods), "cpu": f"{round(cpu * 1000)}m", "memory": f"{round(memory)}",
           "pods": str(pods), "requests.cpu": f"{round(cpu * 1000)}m", "requests.memory": f"{round(memory)}"}
    if gpus:
        out["requests.nvidia.com/gpu"] = str(int(gpus))
    return out


def podgroup_object(run: Run) -> Obj:
    return {"apiVersion": PG_API, "kind": "PodGroup",
            "metadata": {"name": run.pg_name, "namespace": run.namespace,
                         "ownerReferences": [{"apiVersion": JOB_API, "kind": "Job", "name": run.name, "uid": run.uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"minMember": run.min_available, "minResources": quantity_sum(run.tasks, run.min_available),
                     "queue": run.queue, "minTaskMember": {t.name: t.replicas if run.shape != "array" else 1
                                                           for t in run.tasks}},
            "status": {}}


def pod_object(pod: PodRun, created: float) -> Obj:
    run, task = pod.run, pod.task
    index = str(pod.index)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod.name, "namespace": run.namespace, "creationTimestamp": rfc3339(created),
            "labels": {"volcano.sh/job-name": run.name, "volcano.sh/job-namespace": run.namespace,
                       "volcano.sh/queue-name": run.queue, "volcano.sh/task-spec": task.name,
                       "volcano.sh/task-index": index, "app.kubernetes.io/component": task.name},
            "annotations": {"scheduling.k8s.io/group-name": run.pg_name, "volcano.sh/job-name": run.name,
                            "volcano.sh/job-retry-count": "0", "volcano.sh/job-version": "0",
                            "volcano.sh/queue-name": run.queue, "volcano.sh/task-spec": task.name,
                            "volcano.sh/task-index": index, "volcano.sh/template-uid": f"{run.name}-{task.name}"},
            "ownerReferences": [{"apiVersion": JOB_API, "kind": "Job", "name": run.name, "uid": run.uid,
                                 "controller": True, "blockOwnerDeletion": True}]},
        "spec": {**template(task)["spec"],
                 "containers": [container(task, [{"name": "VK_TASK_INDEX", "value": index},
                                                 {"name": "VC_TASK_INDEX", "value": index}])],
                 "schedulerName": "volcano", "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
                 "dnsPolicy": "ClusterFirst", "priority": 0, "enableServiceLinks": True},
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def set_node(obj: Obj, node: str) -> None:
    obj["spec"]["nodeName"] = node


def cond(kind: str, ok: bool, when: str, reason: str | None = None) -> Obj:
    out: Obj = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": when}
    if reason:
        out["reason"] = reason
    return out


def pod_ip(pod: PodRun) -> str:
    digest = hash(pod.name) & 0xFFFF
    return f"10.244.{digest >> 8}.{(digest & 0xFF) % 250 + 2}"


def pod_status(pod: PodRun, now: float, exit_code: int | None = None, reason: str = "") -> Obj:
    started, task = rfc3339(pod.started), pod.task
    cid = f"containerd://{uuid.uuid5(uuid.NAMESPACE_URL, pod.run.uid + pod.name).hex}"
    running = exit_code is None
    done_at = rfc3339(now)
    state: Obj = ({"running": {"startedAt": started}} if running else
                  {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started,
                                  "finishedAt": done_at, "containerID": cid}})
    ip = pod_ip(pod)
    return {
        "phase": "Running" if running else ("Succeeded" if exit_code == 0 else "Failed"),
        "conditions": [cond("PodReadyToStartContainers", True, started), cond("Initialized", True, started),
                       cond("Ready", running, started if running else done_at, None if running else "PodCompleted"),
                       cond("ContainersReady", running, started if running else done_at,
                            None if running else "PodCompleted"),
                       cond("PodScheduled", True, started)],
        "hostIP": f"10.0.{0 if pod.node.startswith('cpu') else 1}.{int(pod.node[-3:]) % 250 + 10}",
        "podIP": ip, "podIPs": [{"ip": ip}], "startTime": started, "qosClass": "Burstable",
        "containerStatuses": [{"name": task.name, "image": task.image,
                               "imageID": f"{task.image.split(':')[0]}@sha256:{'0' * 64}", "containerID": cid,
                               "ready": running, "started": running, "restartCount": 0, "state": state,
                               "lastState": {}}],
    }


def event_object(run: Run, now: float, kind: str, reason: str, message: str, uid: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{run.pg_name}.{time.time_ns():x}", "namespace": run.namespace},
            "involvedObject": {"kind": "PodGroup", "namespace": run.namespace, "name": run.pg_name, "uid": uid,
                               "apiVersion": PG_API},
            "reason": reason, "message": message, "type": kind, "source": {"component": "volcano"},
            "firstTimestamp": rfc3339(now), "lastTimestamp": rfc3339(now), "count": 1,
            "reportingComponent": "volcano", "reportingInstance": "volcano"}


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


# ---- the programs under test -----------------------------------------------------------------------------

# --debug-memory: run the CLI's main() after installing a SIGUSR1 handler that dumps, on a thread of its
# own, into $SOAK_DUMP_DIR/<n>.json (and <n>.snap): gc object counts by type; the length of every
# dict/list/set/deque attribute of the project's objects and modules (volcano_monitor.*) holding >= 100 items,
# as "module.Class.attribute" (the largest when a class has several instances); a tracemalloc snapshot.
BOOTSTRAP = r"""
import collections, gc, itertools, json, os, signal, sys, threading, tracemalloc
if os.environ.get("SOAK_TRACEMALLOC") == "1":
    tracemalloc.start(10)
_seq = itertools.count(1)
def _allocator():
    # Where the bytes are that no Python object shows: pymalloc's blocks (small objects), glibc's heap in
    # use (big objects, SQLite's page caches and statements) and free (fragmentation), and SQLite's share.
    import ctypes, ctypes.util
    out = {"pymalloc_blocks": sys.getallocatedblocks()}
    try:
        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
        out |= {"glibc_in_use_bytes": info.uordblks, "glibc_free_bytes": info.fordblks, "glibc_mmap_bytes": info.hblkhd}
    except (OSError, AttributeError):
        pass
    try:  # SQLite's own allocations (page caches, schemas, statements), where _sqlite3 links it dynamically
        sqlite = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        sqlite.sqlite3_memory_used.restype = sqlite.sqlite3_memory_highwater.restype = ctypes.c_int64
        out |= {"sqlite_bytes": sqlite.sqlite3_memory_used(),
                "sqlite_highwater_bytes": sqlite.sqlite3_memory_highwater(0)}
    except (OSError, AttributeError):
        pass
    return out
def _measure(key, value, sizes, capacities):
    # A container's length, and its own table's bytes (a dict or set keeps the capacity of its busiest moment
    # until it next resizes): the largest when a class has several instances.
    if isinstance(value, (dict, list, set, frozenset, collections.deque)) and len(value) >= 100:
        sizes[key] = max(sizes.get(key, 0), len(value))
        capacities[key] = max(capacities.get(key, 0), sys.getsizeof(value))
def _rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
def _pymalloc():
    # pymalloc's own account (sys._debugmallocstats, written to fd 2): its arenas and the bytes in used and
    # free blocks; arenas that a few live blocks keep mapped show as free bytes growing with the arenas.
    import tempfile
    keys = {"# arenas allocated current": "arenas", "# bytes in allocated blocks": "allocated_bytes",
            "# bytes in available blocks": "available_bytes", "# bytes lost to pool headers": "pool_header_bytes",
            "# bytes lost to quantization": "quantization_bytes"}
    with tempfile.TemporaryFile("w+") as f:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        out = {}
        for line in f:
            name, _, value = line.rpartition("=")
            if name.strip() in keys:
                out[keys[name.strip()]] = int(value.strip().replace(",", ""))
        return out
def _trim():
    # What glibc gives back when asked (malloc_trim(0)): free pages still resident in its heaps.
    import ctypes, ctypes.util
    before = _rss()
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    return {"rss_before_trim": before, "trim_released_bytes": before - _rss()}
def _dump():
    base = os.path.join(os.environ["SOAK_DUMP_DIR"], str(next(_seq)))
    try:
        gc.collect()
        early = _allocator() | {"pymalloc_" + k: v for k, v in _pymalloc().items()}
        early |= _trim()
        objects = gc.get_objects()
        # Counts and bytes by type of what gc tracks (sys.getsizeof: a dict's or list's own table).
        counts, nbytes = collections.Counter(), collections.Counter()
        for o in objects:
            name = f"{type(o).__module__!s}.{type(o).__qualname__!s}"
            counts[name] += 1
            nbytes[name] += sys.getsizeof(o)
        sizes, capacities = {}, {}
        for o in objects:
            t = type(o)
            module = t.__module__
            if not isinstance(module, str) or not module.startswith("volcano_monitor.") or isinstance(o, type):
                continue
            try:
                attrs = dict(object.__getattribute__(o, "__dict__"))
            except Exception:
                attrs = {}
            for klass in t.__mro__:
                for name in klass.__dict__.get("__slots__", ()):
                    try:
                        attrs[name] = object.__getattribute__(o, name)
                    except Exception:
                        pass
            for name, value in attrs.items():
                _measure(f"{module}.{t.__qualname__}.{name}", value, sizes, capacities)
        del objects
        for module_name, module in list(sys.modules.items()):  # module-level caches (e.g. shared tuples)
            if module_name.startswith("volcano_monitor."):
                for name, value in list(vars(module).items()):
                    if not name.startswith("__"):
                        _measure(f"{module_name}.{name}", value, sizes, capacities)
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(base + ".snap")
        out = {"gc": counts, "gc_bytes": nbytes, "garbage": len(gc.garbage),
               "containers": sizes, "container_bytes": capacities, "allocator": early,
               "peaks": _peaks_report()}
    except Exception as exc:
        out = {"error": repr(exc)}
    with open(base + ".tmp", "w") as f:
        json.dump(out, f)
    os.rename(base + ".tmp", base + ".json")
_peaks = {"events": 0, "at_peaks": collections.Counter(), "at_random": collections.Counter(), "timeline": []}
def _where(frames, me, names):
    # Each thread's innermost project frames, as "thread | [package running] file:function:line < ...".
    for ident, frame in frames.items():
        if ident == me:
            continue
        where, inner = [], frame.f_code.co_filename.split("/site-packages/")[-1].split("/")[0]
        while frame is not None and len(where) < 3:
            code = frame.f_code
            if "volcano_monitor" in code.co_filename:
                where.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}:{frame.f_lineno}")
            frame = frame.f_back
        yield f"{names.get(ident, ident)} | [{inner}] {' < '.join(where)}"
def _watch_peaks(after):
    # Who makes pymalloc grow after the warm-up: at each new high of its allocated blocks, what every other
    # thread runs, weighted by the blocks the high added; and the same taken once a second at random, so that
    # a thread waiting in the same place all along (an informer reading its socket) can be told apart from
    # the one that makes the peaks (`lift`: its share at the peaks over its share at random).
    import time
    start, high, me, tick = time.monotonic(), 0, threading.get_ident(), 0
    while True:
        time.sleep(0.02)
        tick += 1
        blocks = sys.getallocatedblocks()
        late = time.monotonic() - start >= after
        names = None
        if late and tick % 50 == 0:
            names = {t.ident: t.name for t in threading.enumerate()}
            _peaks["at_random"].update(_where(sys._current_frames(), me, names))
        if blocks <= high:
            continue
        grown, high = blocks - high, blocks
        if not late:
            continue
        names = names or {t.ident: t.name for t in threading.enumerate()}
        _peaks["events"] += 1
        _peaks["timeline"].append((round(time.monotonic() - start), blocks))
        for key in _where(sys._current_frames(), me, names):
            _peaks["at_peaks"][key] += grown
def _peaks_report():
    peaks, randoms = _peaks["at_peaks"], _peaks["at_random"]
    total_p, total_r = sum(peaks.values()) or 1, sum(randoms.values()) or 1
    rows = [{"where": k, "peak_blocks": v, "lift": round((v / total_p) / max(randoms[k] / total_r, 1 / total_r), 2)}
            for k, v in peaks.items()]
    rows.sort(key=lambda r: -r["peak_blocks"] * (min(r["lift"], 50) - 1))
    return {"events": _peaks["events"], "timeline": _peaks["timeline"][-200:], "by_thread_frame": rows[:30]}
if os.environ.get("SOAK_PEAKS_AFTER"):
    threading.Thread(target=_watch_peaks, args=(float(os.environ["SOAK_PEAKS_AFTER"]),), daemon=True).start()
signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=_dump, daemon=True).start())
module = __import__(sys.argv[1] + ".cli", fromlist=["main"])
sys.exit(module.main(sys.argv[2:]))
"""


def read_rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def read_cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Child:
    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.log = self.log_path.open("wb")
        setpriv = shutil.which("setpriv")
        # Dies with this script even on SIGKILL (PR_SET_PDEATHSIG), without a preexec_fn.
        prefix = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
        self.proc = subprocess.Popen(prefix + argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=_ROOT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLCANO_EXPORTER_", "VOLCANO_WATCHDOG_"))}
    return env | extra


def wait_until(condition: Callable[[], bool], timeout: float, what: str, children: list[Child]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for child in children:
            if not child.alive():
                raise SystemExit(f"bench/soak: {child.name} exited ({child.proc.returncode}):\n{child.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/soak: timed out waiting for {what}")
        time.sleep(0.25)


def ready(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# ---- scraping --------------------------------------------------------------------------------------------

SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", re.M)


def sums(body: bytes, prefix: bytes, names: tuple[str, ...]) -> dict[str, float]:
    """Totals of the named families (every label set added up), from the lines starting with `prefix`."""
    out = dict.fromkeys(names, 0.0)
    for match in SAMPLE.finditer(body):
        name = match.group(1)
        if name.startswith(prefix):
            key = name.decode()
            if key in out:
                with contextlib.suppress(ValueError):
                    out[key] += float(match.group(3))
    return out


ERROR_FAMILIES = ("volcano_exporter_handler_errors_total", "volcano_exporter_request_errors_total")


def error_series(body: bytes) -> dict[str, float]:
    """The exporter's non-zero error counters by label set (same parse as `sums`), so that
    `exporter_errors` can be read without the logs."""
    out: dict[str, float] = {}
    for match in SAMPLE.finditer(body):
        if match.group(1).decode() in ERROR_FAMILIES:
            with contextlib.suppress(ValueError):
                if value := float(match.group(3)):
                    out[(match.group(1) + (match.group(2) or b"")).decode(errors="replace")] = value
    return out


@dataclass
class Scrapes:
    count: int = 0
    failures: int = 0
    durations: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    last: bytes = b""

    def get(self, http: httpx.Client, url: str) -> None:
        started = time.perf_counter()
        try:
            response = http.get(url, timeout=30)
            response.raise_for_status()
        except httpx.HTTPError:
            self.failures += 1
            return
        self.durations.append(time.perf_counter() - started)
        self.count += 1
        self.sizes.append(len(response.content))
        self.last = response.content

    def summary(self) -> Obj:
        ordered = sorted(self.durations)
        return {"count": self.count, "failures": self.failures,
                "ms_p50": round(ordered[len(ordered) // 2] * 1000, 1) if ordered else None,
                "ms_max": round(ordered[-1] * 1000, 1) if ordered else None,
                "bytes_first": self.sizes[0] if self.sizes else None,
                "bytes_last": self.sizes[-1] if self.sizes else None,
                "bytes_max": max(self.sizes) if self.sizes else None}


# ---- memory debugging ------------------------------------------------------------------------------------

def wait_for_dumps(dump_dir: Path, count: int, timeout: float = 120) -> list[Path]:
    """The dumps a child wrote on SIGUSR1 (1.json, 2.json, ...), once all `count` are there."""
    paths = [dump_dir / f"{n}.json" for n in range(1, count + 1)]
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [p for p in paths if p.exists()]


def compare_dumps(first: Path, last: Path, top: int = 15) -> Obj:
    before, after = json.loads(first.read_text()), json.loads(last.read_text())
    if "gc" not in before or "gc" not in after:
        return {"errors": [before.get("error"), after.get("error")]}
    growth = Counter(after["gc"])
    growth.subtract(before["gc"])
    out: Obj = {"gc_objects_growth": dict(growth.most_common(top)), "gc_garbage": after["garbage"],
                **{f"{key}_growth": dict(sorted(((k, v - before.get(key, {}).get(k, 0))
                                                 for k, v in after.get(key, {}).items()), key=lambda kv: -kv[1])[:top])
                   for key in ("gc_bytes",)},
                "allocator": {k: {"at_25": before.get("allocator", {}).get(k), "at_100": v}
                              for k, v in after.get("allocator", {}).items()}}
    lengths = {k: (before["containers"].get(k, 0), n) for k, n in after["containers"].items()}
    out["container_lengths_growth"] = {k: {"at_25": a, "at_100": b} for k, (a, b) in
                                       sorted(lengths.items(), key=lambda kv: kv[1][0] - kv[1][1])[:top]}
    capacities = {k: (before.get("container_bytes", {}).get(k, 0), n)
                  for k, n in after.get("container_bytes", {}).items()}
    out["container_bytes_growth"] = {k: {"at_25": a, "at_100": b} for k, (a, b) in
                                     sorted(capacities.items(), key=lambda kv: kv[1][0] - kv[1][1])[:top]}
    if after.get("peaks", {}).get("events"):
        out["peaks_after_25"] = after["peaks"]
    out["container_bytes_total"] = {"at_25": sum(before.get("container_bytes", {}).values()),
                                    "at_100": sum(capacities[k][1] for k in capacities)}
    snap_a, snap_b = first.with_suffix(".snap"), last.with_suffix(".snap")
    if snap_a.exists() and snap_b.exists():
        import tracemalloc

        old, new = tracemalloc.Snapshot.load(str(snap_a)), tracemalloc.Snapshot.load(str(snap_b))
        flt = [tracemalloc.Filter(False, tracemalloc.__file__),
               tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
        old, new = old.filter_traces(flt), new.filter_traces(flt)
        out["tracemalloc_growth_by_line"] = [
            {"where": f"{s.traceback[0].filename.replace(str(_ROOT) + '/', '')}:{s.traceback[0].lineno}",
             "size_diff": s.size_diff, "count_diff": s.count_diff, "size": s.size}
            for s in new.compare_to(old, "lineno")[:top]]
        out["tracemalloc_growth_by_traceback"] = [
            {"size_diff": s.size_diff, "count_diff": s.count_diff,
             "traceback": [f"{f.filename.replace(str(_ROOT) + '/', '')}:{f.lineno}" for f in s.traceback][:6]}
            for s in new.compare_to(old, "traceback")[:5]]
    return out


# ---- the run ---------------------------------------------------------------------------------------------

def ratio(points: dict[str, int | None]) -> float | None:
    first, last = points.get("25"), points.get("100")
    return round(last / first, 4) if first and last else None


def window_median(readings: list[tuple[float, int]]) -> int | None:
    """The median of the RSS readings of the last RSS_WINDOW_SECONDS: one reading can land inside a scrape."""
    values = sorted(value for _, value in readings)
    return values[len(values) // 2] if values else None


def growth_at_equal_population(samples: list[tuple[float, float, float]], span_minutes: float,
                               base: float) -> float | None:
    """The growth ratio that time alone accounts for, the live pod count held equal: a least-squares fit
    rss = a + b * minute + c * live_pods over (minute, live_pods, rss) samples, as 1 + b * span / base.

    Why: the live population drifts by several per cent between two checkpoints (jobs of up to 40 pods
    running up to 3 hours), and every live pod holds memory, so the plain ratio moves with it in either
    direction; a leak shows in b whatever the population does. A diagnostic beside the ratio, not the target.
    None when the samples cannot separate the two (fewer than four, or the count moved in step with time).
    """
    if len(samples) < 4 or base <= 0:
        return None
    n = len(samples)
    mean_t, mean_p, mean_r = (sum(s[i] for s in samples) / n for i in range(3))
    tt = sum((t - mean_t) ** 2 for t, _, _ in samples)
    pp = sum((p - mean_p) ** 2 for _, p, _ in samples)
    tp = sum((t - mean_t) * (p - mean_p) for t, p, _ in samples)
    tr = sum((t - mean_t) * (r - mean_r) for t, _, r in samples)
    pr = sum((p - mean_p) * (r - mean_r) for _, p, r in samples)
    det = tt * pp - tp * tp
    if det <= 1e-9 * tt * pp:  # also when either never moved (tt or pp 0, so tp 0 and det 0)
        return None
    per_minute = (tr * pp - pr * tp) / det
    return round(1 + per_minute * span_minutes / base, 4)


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM (and SIGHUP) end the run like Ctrl-C: through the `finally` blocks that stop the children."""
    def handler(signum: int, _: FrameType | None) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the cleanup
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def measure(args: argparse.Namespace) -> Obj:
    duration = args.minutes * 60.0
    speed = 1440.0 / args.day_minutes
    pods_per_second = args.pods_per_day / (args.day_minutes * 60.0)
    children: list[Child] = []
    sim: SimulatorThread | None = None
    workdir = Path(tempfile.mkdtemp(prefix="volcano-soak-"))
    try:
        store = Store(history_limit=HISTORY_LIMIT)
        sim = SimulatorThread(store=store, bookmark_interval=5).start()
        churn = Churn(store, pods_per_second, speed, args.nodes, args.seed)
        sim.call(setup_cluster, store, args.nodes)
        kubeconfig = workdir / "kubeconfig"
        write_kubeconfig(kubeconfig, sim.url)
        database_url = args.database_url or f"sqlite:///{workdir}/watchdog.db"
        exporter_port, watchdog_port = free_port(), free_port()
        debug = args.debug_memory != "off"
        common = ["--kubeconfig", str(kubeconfig), "--log-level", args.log_level]
        for program, port, extra in (("exporter", exporter_port, []),
                                     ("watchdog", watchdog_port, ["--database-url", database_url, "run"])):
            env = child_env({})
            command = [str(Path(sys.executable).parent / f"volcano-{program}")]
            if debug:
                (workdir / f"dumps-{program}").mkdir()
                env |= {"SOAK_DUMP_DIR": str(workdir / f"dumps-{program}"),
                        "SOAK_TRACEMALLOC": str(int(args.debug_memory == "tracemalloc"))}
                if args.debug_memory == "peaks":
                    env["SOAK_PEAKS_AFTER"] = str(args.minutes * 60 / 4)
                command = [sys.executable, "-c", BOOTSTRAP, program]
            children.append(Child(program, [*command, *common, "--listen", f"127.0.0.1:{port}", *extra], workdir, env))
        exporter, watchdog = children
        exporter_url, watchdog_url = f"http://127.0.0.1:{exporter_port}", f"http://127.0.0.1:{watchdog_port}"
        with httpx.Client() as http:
            wait_until(lambda: ready(http, f"{exporter_url}/readyz") and ready(http, f"{watchdog_url}/readyz"), 120,
                       "the exporter and the watchdog to be ready", children)
            log(f"ready: simulator {sim.url}, exporter pid {exporter.pid}, watchdog pid {watchdog.pid}; "
                f"{pods_per_second:.0f} pods/s for {args.minutes:g} min (speed {speed:g}x), logs in {workdir}")
            cpu_start = {c.name: read_cpu_seconds(c.pid) or 0.0 for c in children}
            bench_cpu_start = time.process_time()
            started = time.monotonic()
            end = started + duration
            exporter_scrapes, watchdog_scrapes = Scrapes(), Scrapes()
            stop_scraping = threading.Event()

            def scrape() -> None:  # Prometheus: both targets every --scrape-interval, off the churn's thread
                while not stop_scraping.is_set() and time.monotonic() < end + 30:
                    exporter_scrapes.get(http, f"{exporter_url}/metrics")
                    watchdog_scrapes.get(http, f"{watchdog_url}/metrics")
                    stop_scraping.wait(args.scrape_interval)

            scraper = threading.Thread(target=scrape, name="scraper", daemon=True)
            scraper.start()
            next_minute = started + 60
            pending_checkpoints = list(CHECKPOINTS)
            rss: dict[str, dict[str, int | None]] = {"exporter": {}, "watchdog": {}}
            instant: dict[str, dict[str, int | None]] = {"exporter": {}, "watchdog": {}}
            readings: dict[str, list[tuple[float, int]]] = {"exporter": [], "watchdog": []}
            next_reading = started
            population: dict[str, dict[str, int]] = {}
            timeline: list[Obj] = []
            dumps_requested = 0
            step_seconds: list[float] = []
            while True:
                now = time.monotonic()
                if now >= end + 30:  # bounded even if a step or scrape hangs
                    raise SystemExit("bench/soak: the run overran its end by 30 s")
                for child in children:
                    if not child.alive():
                        raise SystemExit(f"bench/soak: {child.name} exited ({child.proc.returncode}):\n"
                                         f"{child.tail()}")
                t0 = time.perf_counter()
                sim.call(churn.step)
                step_seconds.append(time.perf_counter() - t0)
                elapsed = now - started
                if now >= next_reading:
                    next_reading += RSS_SAMPLE_SECONDS
                    for child in children:
                        value = read_rss(child.pid)
                        if value is not None:
                            kept = [r for r in readings[child.name] if r[0] > now - RSS_WINDOW_SECONDS]
                            readings[child.name] = [*kept, (now, value)]
                if now >= next_minute:
                    next_minute += 60
                    pop = sim.call(churn.population)
                    timeline.append({"minute": round(elapsed / 60), "exporter": read_rss(exporter.pid),
                                     "watchdog": read_rss(watchdog.pid), "live_pods": pop["pods"],
                                     "running_pods": pop["running_pods"],
                                     **{f"{name}_median": window_median(values) for name, values in readings.items()}})
                    log(f"minute {timeline[-1]['minute']}: exporter {timeline[-1]['exporter']} B, watchdog "
                        f"{timeline[-1]['watchdog']} B, {pop}, pods created {churn.pods_created}, "
                        f"max lag {churn.max_lag:.2f} s")
                while pending_checkpoints and elapsed >= duration * pending_checkpoints[0] / 100:
                    percent = str(pending_checkpoints.pop(0))
                    for child in children:
                        instant[child.name][percent] = read_rss(child.pid)
                        rss[child.name][percent] = window_median(readings[child.name]) or instant[child.name][percent]
                    population[percent] = sim.call(churn.population)
                    log(f"{percent}%: exporter {rss['exporter'][percent]} B, watchdog {rss['watchdog'][percent]} B, "
                        f"live {population[percent]}")
                    if debug and percent in ("25", "100"):
                        dumps_requested += 1
                        for child in children:
                            os.kill(child.pid, signal.SIGUSR1)
                if not pending_checkpoints:
                    break
                time.sleep(max(0.0, args.tick - (time.monotonic() - now)))
            elapsed = time.monotonic() - started
            cpu = {c.name: round((read_cpu_seconds(c.pid) or 0.0) - cpu_start[c.name], 1) for c in children}
            bench_cpu = round(time.process_time() - bench_cpu_start, 1)
            stop_scraping.set()
            scraper.join(60)
            exporter_scrapes.get(http, f"{exporter_url}/metrics")
            watchdog_scrapes.get(http, f"{watchdog_url}/metrics")
        exporter_self = sums(exporter_scrapes.last, b"volcano_exporter_",
                             ("volcano_exporter_events_total", "volcano_exporter_relists_total",
                              *ERROR_FAMILIES,
                              "volcano_exporter_objects"))
        watchdog_self = sums(watchdog_scrapes.last, b"volcano_watchdog_",
                             ("volcano_watchdog_collector_samples_total", "volcano_watchdog_collector_errors_total",
                              "volcano_watchdog_alerts"))
        ordered_steps = sorted(step_seconds)
        samples = int(watchdog_self["volcano_watchdog_collector_samples_total"])
        result: Obj = {
            "exporter_rss_bytes": rss["exporter"],
            "watchdog_rss_bytes": rss["watchdog"],
            "exporter_rss_bytes_instant": instant["exporter"],
            "watchdog_rss_bytes_instant": instant["watchdog"],
            "exporter_rss_growth_ratio": ratio(rss["exporter"]),
            "watchdog_rss_growth_ratio": ratio(rss["watchdog"]),
            "target_rss_growth_ratio": TARGET_RSS_GROWTH_RATIO,
        }
        after_warmup = [r for r in timeline if r["minute"] >= args.minutes * CHECKPOINTS[0] / 100]
        for name in ("exporter", "watchdog"):
            result[f"{name}_rss_growth_ratio_at_equal_population"] = growth_at_equal_population(
                [(r["minute"], r["live_pods"], r[f"{name}_median"]) for r in after_warmup if r[f"{name}_median"]],
                args.minutes * (100 - CHECKPOINTS[0]) / 100, rss[name].get("25") or 0)
        ratios = (result["exporter_rss_growth_ratio"], result["watchdog_rss_growth_ratio"])
        result["meets_target"] = all(r is not None and r <= TARGET_RSS_GROWTH_RATIO for r in ratios)
        result |= {
            "minutes": round(elapsed / 60, 2),
            "pods_created": churn.pods_created,
            "jobs_created": churn.runs,
            "pods_per_second": round(churn.pods_created / elapsed, 1),
            "job_outcomes": dict(churn.outcomes),
            "api_writes": sum(churn.writes.values()),
            "api_writes_by_kind": dict(sorted(churn.writes.items())),
            "exporter_events": int(exporter_self["volcano_exporter_events_total"]),
            "exporter_relists": int(exporter_self["volcano_exporter_relists_total"]),
            "exporter_errors": int(sum(exporter_self[name] for name in ERROR_FAMILIES)),
            "exporter_error_series": error_series(exporter_scrapes.last),
            "watchdog_usage_samples": samples,
            "usage_samples_present": samples > 0,
            "watchdog_collector_errors": int(watchdog_self["volcano_watchdog_collector_errors_total"]),
            "live_objects": population,
            "rss_timeline": timeline,
            "scrapes": {"exporter": exporter_scrapes.summary(), "watchdog": watchdog_scrapes.summary()},
            "cpu_seconds": {**cpu, "bench_and_simulator": bench_cpu},
            "driver": {"step_ms_p50": round(ordered_steps[len(ordered_steps) // 2] * 1000, 1),
                       "step_ms_max": round(ordered_steps[-1] * 1000, 1), "max_lag_seconds": round(churn.max_lag, 2),
                       "actions": churn.actions, "store_errors": dict(churn.errors)},
            "config": {"pods_per_day": args.pods_per_day, "day_minutes": args.day_minutes, "speed": speed,
                       "nodes": args.nodes, "namespaces": len(NAMESPACE_NAMES), "queues": len(QUEUE_NAMES) + 1,
                       "database": "sqlite (fresh file)" if not args.database_url else "given --database-url",
                       "scrape_interval_seconds": args.scrape_interval, "podmetrics_period_seconds": METRICS_PERIOD,
                       "store_history_limit": HISTORY_LIMIT, "debug_memory": args.debug_memory,
                       "growth_ratio": "RSS at 100% / RSS at 25% (the first ~20% is warm-up)"},
        }
        if debug:
            result["memory_debug"] = {}
            for child in children:
                paths = wait_for_dumps(workdir / f"dumps-{child.name}", dumps_requested)
                result["memory_debug"][child.name] = (compare_dumps(paths[0], paths[-1]) if len(paths) >= 2
                                                      else "no dumps")
        return result
    finally:
        for child in children:
            child.stop()
        if sim is not None:
            sim.stop()
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=20.0, help="length of the run in wall minutes (20)")
    parser.add_argument("--pods-per-day", type=int, default=300_000, help="pods created per simulated day")
    parser.add_argument("--day-minutes", type=float, default=20.0,
                        help="wall minutes a simulated day lasts (20: 300,000 pods in 20 minutes)")
    parser.add_argument("--nodes", type=int, default=200, help="simulated nodes (a fifth with GPUs)")
    parser.add_argument("--database-url", default="",
                        help="watchdog database (default: a fresh SQLite file), e.g. "
                        "postgresql+psycopg://postgres@127.0.0.1:5432/soak")
    parser.add_argument("--scrape-interval", type=float, default=15.0, help="seconds between /metrics scrapes")
    parser.add_argument("--tick", type=float, default=0.25, help="seconds between churn batches")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="log level of the exporter and the watchdog (their logs go to files)")
    parser.add_argument("--debug-memory", default="off", choices=("off", "gc", "peaks", "tracemalloc"),
                        help="dump gc counts (and tracemalloc snapshots) of both programs at 25%% and 100%%; "
                             "peaks: also, after 25%%, what every thread was running at each new high of "
                             "pymalloc's blocks")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, database)")
    args = parser.parse_args()
    with terminate_as_exit():
        print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
