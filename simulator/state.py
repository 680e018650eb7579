"""The driver's view of the simulated workload: nodes with their free resources, runs (one
submission of a workload: a Volcano Job or a Kubeflow PyTorchJob, and its PodGroup) and pods."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from volcano_monitor.simulator.quantity import GIB, Resources, parse_quantity, parse_resources
from volcano_monitor.simulator.specs import (
    HAMI_COUNT,
    VOLCANO_CORES,
    VOLCANO_COUNT,
    VOLCANO_MEMORY,
    NodeSpec,
    TaskSpec,
    VgpuRequest,
    Workload,
)
from volcano_monitor.simulator.usage import ContainerUsage, GpuDevice, VgpuSlice

Obj = dict[str, Any]

JOB_API = "batch.volcano.sh/v1alpha1"
KUBEFLOW_API = "kubeflow.org/v1"
TERMINAL_JOB_PHASES = ("Completed", "Failed", "Aborted", "Terminated")


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def go_duration_precise(seconds: float) -> str:
    """metav1.Duration's text with nanoseconds, as the job controller's kill path writes it: 6.03059169s."""
    total = max(0.0, seconds)
    if total >= 60:
        return go_duration(total)
    text = f"{total:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


def go_duration(seconds: float) -> str:
    """metav1.Duration's text: 1h2m3s, 4m0s, 12s."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def stable_uuid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "volcano-sim/" + "/".join(parts)))


# ---- state -----------------------------------------------------------------------------------------

@dataclass
class CardUse:
    """What the vGPUs placed on one card take of it (sharing device plugins only)."""

    vgpus: int = 0
    memory_mib: int = 0
    cores: int = 0


@dataclass
class NodeSim:
    spec: NodeSpec
    allocatable: Resources
    capacity: Resources
    used: Resources = field(default_factory=dict)
    devices: tuple[GpuDevice, ...] = ()
    free_gpus: list[int] = field(default_factory=list)
    cards: list[CardUse] = field(default_factory=list)  # per device, on a sharing device plugin's node

    @property
    def shared(self) -> bool:
        """Its GPUs are served by a sharing device plugin (HAMi, Volcano's vGPU)."""
        return self.spec.device_plugin != "nvidia" and bool(self.spec.gpus)

    @property
    def name(self) -> str:
        return self.spec.name

    def free(self) -> Resources:
        return {k: v - self.used.get(k, 0.0) for k, v in self.allocatable.items()}

    @property
    def labels(self) -> dict[str, str]:
        spec = self.spec
        labels = {
            "kubernetes.io/hostname": spec.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": spec.instance_type,
            "topology.kubernetes.io/zone": spec.zone,
        }
        if spec.gpus:
            labels |= {"node-role/gpu": "true", "nvidia.com/gpu.present": "true",
                       "nvidia.com/gpu.product": spec.gpu_product, "nvidia.com/gpu.count": str(spec.gpus),
                       "nvidia.com/gpu.memory": str(spec.gpu_memory_mib)}
        return labels

    @property
    def taints(self) -> list[Obj]:
        if not (self.spec.gpus and self.spec.gpu_taint):
            return []
        return [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def make_node(spec: NodeSpec) -> NodeSim:
    capacity: Resources = {"cpu": float(spec.cpu), "memory": float(spec.memory_gi * GIB),
                           "pods": float(spec.max_pods), "ephemeral-storage": float(200 * GIB)}
    allocatable = dict(capacity)
    if spec.system_reserved:
        allocatable["cpu"] = spec.cpu - 0.5
        allocatable["memory"] = capacity["memory"] - 2 * GIB
    allocatable["ephemeral-storage"] = float(180 * GIB)
    if spec.gpus:
        for name, amount in gpu_resources(spec).items():
            capacity[name] = allocatable[name] = amount
    model = spec.gpu_product.replace("-", " ", 1) if spec.gpus else ""
    devices = tuple(GpuDevice(i, "GPU-" + stable_uuid(spec.name, "gpu", str(i)), model) for i in range(spec.gpus))
    cards = [CardUse() for _ in devices] if spec.device_plugin != "nvidia" else []
    return NodeSim(spec, allocatable, capacity, devices=devices, free_gpus=list(range(spec.gpus)), cards=cards)


def gpu_resources(spec: NodeSpec) -> Resources:
    """What the node's device plugin registers with the kubelet: NVIDIA's one `nvidia.com/gpu` per card;
    HAMi's `nvidia.com/gpu` per vGPU (cards x split); Volcano's vGPU plugin three resources, vGPUs, memory
    (MiB, memory factor 1) and cores (100 per card)."""
    if spec.device_plugin == "hami":
        return {HAMI_COUNT: float(spec.gpus * spec.split)}
    if spec.device_plugin == "volcano-vgpu":
        return {VOLCANO_COUNT: float(spec.gpus * spec.split), VOLCANO_MEMORY: float(spec.gpus * spec.gpu_memory_mib),
                VOLCANO_CORES: float(spec.gpus * 100)}
    return {"nvidia.com/gpu": float(spec.gpus)}


@dataclass(eq=False)
class PodSim:
    run: RunSim
    task: TaskSpec
    index: int
    name: str
    created: float
    requests: Resources
    uid: str = ""
    node: str | None = None
    gpus: tuple[GpuDevice, ...] = ()
    vgpu: tuple[VgpuSlice, ...] = ()  # its vGPUs on a sharing device plugin's node (simulator.vgpu)
    vgpu_request: VgpuRequest | None = None  # what they were placed for
    holding: bool = False  # counted against its node and queue
    phase: str = "Pending"
    bound_at: float | None = None
    started_at: float | None = None  # the current container instance
    first_started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    term_reason: str | None = None
    pod_reason: str | None = None
    pod_message: str | None = None
    restart_count: int = 0
    last_state: Obj = field(default_factory=dict)
    deleting_at: float | None = None
    evicted: tuple[str, float] | None = None  # the scheduler's eviction: message, when
    removed: bool = False
    unschedulable: str | None = None  # PodScheduled=False message
    unschedulable_reason: str = "Unschedulable"  # or "Schedulable": would fit once the gang does
    unschedulable_since: float | None = None
    usage: ContainerUsage | None = None

    @property
    def namespace(self) -> str:
        return self.run.namespace

    @property
    def active(self) -> bool:
        return not self.removed and self.deleting_at is None


@dataclass(eq=False)
class RunSim:
    """One run (submission) of a workload: a Volcano Job or a PyTorchJob and its PodGroup."""

    workload: Workload
    name: str
    created: float
    uid: str = ""
    pg_name: str = ""
    pg_uid: str = ""
    owner_uid: str = ""
    phase: str = "Pending"
    # How the job controller last wrote the status: "sync" (counts, taskStatusCount), "kill" (the
    # kill path: only terminating, a nanosecond runningDuration and a new version) or "final" (a
    # finished job: counts wiped, runningDuration in whole seconds).
    status_mode: str = "sync"
    status_core: tuple[object, ...] = ()  # what the last status write showed; a change appends a condition
    state_reason: str = ""
    state_message: str = ""
    state_time: float = 0.0
    conditions: list[tuple[str, float]] = field(default_factory=list)
    retry_count: int = 0
    version: int = 0
    pods: dict[str, PodSim] = field(default_factory=dict)
    pg_phase: str = ""  # "": the scheduler has not seen the PodGroup yet (Volcano writes `status: {}`)
    pg_counts: tuple[int, int, int] = (0, 0, 0)  # running, succeeded, failed at the last Scheduled rewrite
    pg_deleted: bool = False  # the job controller deleted it (restart, finish)
    orphaned: bool = False  # the Job was deleted; the garbage collector removes pods and PodGroup later
    pg_conditions: dict[str, Obj] = field(default_factory=dict)
    pg_unschedulable: bool = False
    finished_at: float | None = None
    min_resources: Resources = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.workload.namespace

    @property
    def queue(self) -> str:
        return self.workload.queue

    @property
    def is_vcjob(self) -> bool:
        return self.workload.kind == "Job"

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


def task_requests(task: TaskSpec) -> Resources:
    req = parse_resources({k: v for k, v in (("cpu", task.cpu), ("memory", task.memory)) if v})
    if task.gpus:
        req["nvidia.com/gpu"] = float(task.gpus)
    if task.vgpu is not None:
        req |= {name: float(amount) for name, amount in task.vgpu.resources().items()}
    return req


def task_limits(task: TaskSpec) -> dict[str, str | int]:
    limits: dict[str, str | int] = {}
    if task.cpu_limit:
        limits["cpu"] = task.cpu_limit
    if task.memory_limit:
        limits["memory"] = task.memory_limit
    if task.gpus:
        limits["nvidia.com/gpu"] = task.gpus
    if task.vgpu is not None:
        limits |= task.vgpu.resources()
    return limits


def min_resources(workload: Workload) -> Resources:
    """What the gang needs to start: the requests of the first minAvailable pods, in task order."""
    total: Resources = {"cpu": 0.0, "memory": 0.0}
    for task, n in _min_tasks(workload):
        for name, amount in task_requests(task).items():
            total[name] = total.get(name, 0.0) + amount * n
    return total


def min_resource_list(workload: Workload) -> Resources:
    """`spec.minResources` as Volcano's job controller writes it: the pods' quota usage (the
    ResourceQuota evaluator's names: `count/pods`, `pods`, `cpu` + `requests.cpu`, `memory` +
    `requests.memory`, `limits.X`, `requests.<extended>`) summed over the first minAvailable pods."""
    total: Resources = {}
    for task, n in _min_tasks(workload):
        usage: Resources = {"count/pods": 1.0, "pods": 1.0}
        for name, amount in task_requests(task).items():
            if name in ("cpu", "memory"):
                usage[name] = usage[f"requests.{name}"] = amount
            else:
                usage[f"requests.{name}"] = amount
        for name, value in task_limits(task).items():
            if name in ("cpu", "memory"):
                usage[f"limits.{name}"] = parse_quantity(value)
        for name, amount in usage.items():
            total[name] = total.get(name, 0.0) + amount * n
    return total


def _min_tasks(workload: Workload) -> list[tuple[TaskSpec, int]]:
    out = []
    left = workload.min_member
    for task in workload.tasks:
        n = min(left, task.replicas)
        if n > 0:
            out.append((task, n))
        left -= n
    return out


def pod_counts(run: RunSim) -> dict[str, int]:
    counts = dict.fromkeys(("pending", "running", "succeeded", "failed", "terminating", "unknown"), 0)
    for pod in run.pods.values():
        if pod.removed:
            continue
        if pod.deleting_at is not None:
            counts["terminating"] += 1
        else:
            counts[pod.phase.lower() if pod.phase in ("Pending", "Running", "Succeeded", "Failed") else "unknown"] += 1
    return counts
