"""What a scenario is made of: the node, queue, task and workload specs the scenarios (simulator.scenario)
are written in, and the `scale` scenario's bulk parameters.

Kept apart from the scenarios themselves, which are data: the engine, the controllers and the object
renderers need these types and none of the catalogue. Durations are scenario seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from volcano_monitor.simulator.usage import BUSY, LIGHT, UsageProfile

A100 = "NVIDIA-A100-SXM4-80GB"

Exit = Literal["success", "error", "oom", "rejected"]
DevicePlugin = Literal["nvidia", "hami", "volcano-vgpu"]

# The extended resources of the two GPU-sharing device plugins (HAMi: Project-HAMi/HAMi; Volcano's vGPU:
# Project-HAMi/volcano-vgpu-device-plugin, scheduled by Volcano's deviceshare plugin). A container asks for a
# count of vGPUs, each with a share of one card's cores (percent) and memory (MiB): both plugins read limits.
HAMI_COUNT, HAMI_MEMORY, HAMI_CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"
VOLCANO_COUNT, VOLCANO_MEMORY = "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory"
VOLCANO_CORES = "volcano.sh/vgpu-cores"
# Resources the device plugin's scheduler side places card by card (simulator.vgpu), never counted against
# node allocatable: HAMi's node does not advertise them (the kubelet drops extended resources a node lacks) and
# Volcano's scheduler ignores its own vGPU memory and cores in its scalar checks.
DEVICE_MANAGED = frozenset({HAMI_MEMORY, HAMI_CORES, "nvidia.com/gpumem-percentage", VOLCANO_MEMORY, VOLCANO_CORES,
                            "volcano.sh/vgpu-memory-percentage"})


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu: int
    memory_gi: int
    gpus: int = 0
    gpu_product: str = A100
    instance_type: str = "m6i.8xlarge"
    zone: str = "zone-a"
    max_pods: int = 110
    system_reserved: bool = True  # allocatable = capacity - 0.5 cpu - 2Gi (kwok nodes reserve nothing)
    gpu_taint: bool = True  # GPU nodes carry the nvidia.com/gpu NoSchedule taint
    gpu_memory_mib: int = 81920  # per card (GPU feature discovery's nvidia.com/gpu.memory)
    # Which device plugin serves the GPUs: NVIDIA's (whole cards, nvidia.com/gpu = cards), HAMi's
    # (nvidia.com/gpu = cards x split, hami.io/node-nvidia-register) or Volcano's vGPU plugin
    # (volcano.sh/vgpu-number/-memory/-cores, volcano.sh/node-vgpu-register); see simulator.vgpu.
    device_plugin: DevicePlugin = "nvidia"
    split: int = 10  # vGPUs per card (the plugins' deviceSplitCount)
    register_format: Literal["json", "text"] = "json"  # HAMi's register annotation: JSON (v2.5+) or the old text


@dataclass(frozen=True)
class QueueSpec:
    name: str
    parent: str | None = "root"
    weight: int = 1
    reclaimable: bool = True
    capability: Mapping[str, str] | None = None
    deserved: Mapping[str, str] | None = None
    guarantee: Mapping[str, str] | None = None
    priority: int | None = None  # spec.priority (v1.10+; pruned where the release lacks it)


@dataclass(frozen=True)
class VgpuRequest:
    """A container's vGPUs on a sharing device plugin: `count` vGPUs (each on a different card), each with
    `cores` percent of its card's cores and `memory_mib` of its memory. None: not asked, as the plugins take
    it: memory then defaults to the whole card (HAMi's and Volcano's default of 100 %), cores to 0 (no cap)."""

    plugin: Literal["hami", "volcano-vgpu"]
    count: int = 1
    cores: int | None = None
    memory_mib: int | None = None

    def resources(self) -> dict[str, int]:
        """The container's limits (and requests: the API server copies extended limits to requests)."""
        count, memory, cores = (HAMI_COUNT, HAMI_MEMORY, HAMI_CORES) if self.plugin == "hami" else \
            (VOLCANO_COUNT, VOLCANO_MEMORY, VOLCANO_CORES)
        out = {count: self.count}
        if self.cores is not None:
            out[cores] = self.cores
        if self.memory_mib is not None:
            out[memory] = self.memory_mib
        return out


@dataclass(frozen=True)
class TaskSpec:
    """One task of a workload. `runtime` is how long the container runs (scenario seconds) before it
    exits the way `exit` says; None runs until the job controller kills it."""

    name: str
    replicas: int = 1
    cpu: str = "1"  # "": no request
    memory: str = "2Gi"  # "": no request
    gpus: int = 0
    cpu_limit: str | None = None
    memory_limit: str | None = None
    image: str = "registry.example.com/batch/runner:1.4.2"
    command: tuple[str, ...] = ("python", "main.py")
    container: str = "main"
    runtime: float | None = 600.0
    exit: Exit = "success"
    exit_code: int = 0
    reject_reason: str = "OutOfcpu"
    profile: UsageProfile = BUSY
    node_selector: Mapping[str, str] = field(default_factory=dict)
    min_available: int | None = None
    policies: tuple[Mapping[str, str], ...] = ()
    restart_policy: str = "Never"
    # Replica 0 crashes (exit 1) this long after it starts and the kubelet restarts the container in
    # place (restartPolicy OnFailure): restartCount 1 and lastState.terminated show it.
    crash_after: float | None = None
    # False: the pod gets its GPUs but no DCGM exporter reports them (a node without dcgm-exporter):
    # no DCGM_FI_DEV_GPU_UTIL series for the container.
    dcgm: bool = True
    vgpu: VgpuRequest | None = None  # vGPUs from a sharing device plugin (then `gpus` is 0)


@dataclass(frozen=True)
class Workload:
    name: str
    namespace: str
    queue: str
    tasks: tuple[TaskSpec, ...]
    purpose: str
    kind: Literal["Job", "PyTorchJob"] = "Job"
    min_available: int | None = None  # None: all replicas
    max_retry: int = 3
    policies: tuple[Mapping[str, str], ...] = ()
    plugins: Mapping[str, tuple[str, ...]] | None = None
    gang: bool = True  # False: the scheduler binds pods one by one (a broken gang)
    start_after: float = 0.0
    pause: float = 300.0  # after a run finishes, the next run is submitted this much later
    repeat: bool = True
    ttl_after_finished: int = 1800
    priority_class: str | None = None
    delete_after: float | None = None  # someone deletes the Job this long after submitting it
    # Newer-release fields, written always and pruned by the served CRD schema (simulator.releases):
    network_topology: Mapping[str, Any] | None = None  # PodGroup (and Job) spec.networkTopology, v1.12+
    subgroup_policy: tuple[Mapping[str, Any], ...] = ()  # PodGroup spec.subGroupPolicy, v1.14+
    cron: str | None = None  # submitted by this Volcano CronJob (v1.13+): named <cron>-<minute>, owned by it
    annotations: Mapping[str, str] = field(default_factory=dict)  # on the Job (opt-ins such as OOM scale-up)

    @property
    def replicas(self) -> int:
        return sum(t.replicas for t in self.tasks)

    @property
    def min_member(self) -> int:
        return self.replicas if self.min_available is None else self.min_available


@dataclass(frozen=True)
class HyperNodeSpec:
    """A HyperNode: its tier and members, Nodes or HyperNodes by exact name."""

    name: str
    tier: int
    tier_name: str
    nodes: tuple[str, ...] = ()
    hypernodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class BulkSpec:
    """The `scale` scenario: objects created in their steady state, no churn."""

    pods: int = 1000
    jobs: int = 100
    queues: int = 10
    namespaces: int = 10
    pods_per_node: int = 100


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    namespaces: tuple[str, ...] = ()
    nodes: tuple[NodeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    workloads: tuple[Workload, ...] = ()
    bulk: BulkSpec | None = None
    # The cluster's PriorityClasses (name: value); None: simulator.scenario's PRIORITY_CLASSES.
    priority_classes: Mapping[str, int] | None = None
    # The HyperNode tree to write (where the release serves HyperNodes); None: one tier-1 HyperNode per zone
    # under one tier-2 (simulator.extras).
    hypernodes: tuple[HyperNodeSpec, ...] | None = None
    # The oldest Volcano release whose kinds the scenario needs (None: any): an older --volcano-release is
    # refused; without one, this release is served.
    min_release: str | None = None
    # Write the CronJob and JobFlow of simulator.extras where served (scenarios about something else say False).
    extra_kinds: bool = True

    def configure(self, **params: Any) -> Scenario:
        """This scenario with its parameters applied; unknown parameters are an error."""
        if not params:
            return self
        if self.bulk is None:
            raise ValueError(f"scenario {self.name!r} takes no parameters (got {', '.join(sorted(params))})")
        known = set(BulkSpec.__dataclass_fields__)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unknown parameters for scenario {self.name!r}: {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        values = {k: int(v) for k, v in params.items()}
        if any(v < 0 for v in values.values()):
            raise ValueError("scenario parameters must not be negative")
        return replace(self, bulk=replace(self.bulk, **values))


# ---- shorthands the scenarios are written with ---------------------------------------------------------

def busybox(name: str, replicas: int, cpu: str = "1", runtime: float | None = None, exit: Exit = "success",
             exit_code: int = 0, memory_limit: str | None = None) -> TaskSpec:
    """The recordings' busybox task: 1Gi requested, kwok plays it."""
    return TaskSpec(name, replicas, cpu=cpu, memory="1Gi", memory_limit=memory_limit, image="busybox",
                    container="main", runtime=runtime, exit=exit, exit_code=exit_code, profile=LIGHT)


def job(name: str, queue: str, tasks: tuple[TaskSpec, ...], purpose: str, **kwargs: Any) -> Workload:
    return Workload(name, "default", queue, tasks, purpose, repeat=False, **kwargs)
