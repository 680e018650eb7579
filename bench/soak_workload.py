"""bench/soak.py's workload: the shapes of the Jobs it submits (batch, gangs, GPU training, arrays; runtimes,
outcomes, waits) and the objects it writes for them, shaped as Volcano, the kubelet and the API server write
them (see bench/soak.py's docstring for the mix). Nothing here writes to the store: soak_churn.py does.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from volcano_monitor.simulator.quantity import parse_quantity
from volcano_monitor.simulator.usage import (
    BUSY,
    LIGHT,
    OVER_REQUESTED,
    TRAINING,
    ContainerUsage,
    UsageProfile,
    oom_profile,
)

Obj = dict[str, Any]
JOB_API = "batch.volcano.sh/v1alpha1"
PG_API = "scheduling.volcano.sh/v1beta1"
NAMESPACE_NAMES = ("team-a", "team-b", "team-c", "ml-research", "ml-prod", "data-eng", "analytics", "sim")
QUEUE_NAMES = ("default", "research", "production", "batch", "dev", "ml-training", "analytics")
RUNTIME_CAP = 3 * 3600.0  # cluster seconds


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


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

