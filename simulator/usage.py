"""What the containers of the simulated cluster use, and how that is published.

The model is deterministic: a container's usage is a function of its workload profile, its
requests and limits, and the scenario time since it started (a slow sine wave with a phase
derived from the pod and container names stands in for noise). It is published two ways:

- metrics.k8s.io/v1beta1 PodMetrics and NodeMetrics objects, as metrics-server serves them;
- Prometheus text (format 0.0.4) in the style of cAdvisor (`container_cpu_usage_seconds_total`,
  `container_memory_working_set_bytes`) and the DCGM exporter (`DCGM_FI_DEV_GPU_UTIL`).

The CPU counter is the exact integral of the CPU rate over real time, so it is monotonic and
independent of how often anyone samples it.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@dataclass(frozen=True, slots=True)
class UsageProfile:
    """How a workload's containers use what they asked for.

    cpu: fraction of the CPU request used on average (cores when the container requests no CPU).
    memory: fraction of the memory request (limit when there is no request) in the working set.
    memory_to_limit_after: OOM profile: scenario seconds for the working set to climb from `memory`
        to the memory limit, where the kernel kills the container.
    memory_need: what the program's working set grows to (bytes), from `memory` over
        `memory_ramp_seconds`, whatever it requested: the kernel kills it when that crosses the memory
        limit, and a limit at or above the need lets it run to its end (OOM auto scale-up is tested
        against this).
    gpu_util: average utilisation in percent of each GPU (of the whole card, also for a vGPU: what HAMi's
        per-container utilisation reports; HAMi-core caps it at the vGPU's core share); gpu_wobble its amplitude.
    gpu_memory: fraction of each vGPU's memory limit in use (HAMi's vGPU_device_memory_usage_in_bytes).
    """

    cpu: float = 0.5
    cpu_wobble: float = 0.1
    memory: float = 0.5
    memory_wobble: float = 0.03
    memory_to_limit_after: float | None = None
    memory_need: float | None = None
    memory_ramp_seconds: float = 60.0
    gpu_util: float = 0.0
    gpu_wobble: float = 0.0
    gpu_memory: float = 0.5
    period: float = 900.0


# Named profiles the scenarios use: the watchdog's detectors are tested against these.
BUSY = UsageProfile(cpu=0.75, memory=0.55)
LIGHT = UsageProfile(cpu=0.2, memory=0.3)
IDLE_GPU = UsageProfile(cpu=0.02, cpu_wobble=0.2, memory=0.1, gpu_util=1.0, gpu_wobble=1.0)
TRAINING = UsageProfile(cpu=0.7, memory=0.6, gpu_util=85.0, gpu_wobble=5.0)
TRAINING_SMALL = UsageProfile(cpu=0.6, memory=0.5, gpu_util=60.0, gpu_wobble=8.0)
OVER_REQUESTED = UsageProfile(cpu=1 / 16, cpu_wobble=0.05, memory=0.15)
WAITING = UsageProfile(cpu=0.01, cpu_wobble=0.0, memory=0.05, gpu_util=0.0)


def oom_profile(ramp_seconds: float, start_fraction: float = 0.3) -> UsageProfile:
    return UsageProfile(cpu=0.8, memory=start_fraction, memory_to_limit_after=ramp_seconds)


def needs_memory(need_bytes: float, ramp_seconds: float, start_fraction: float = 0.3) -> UsageProfile:
    """A program that needs `need_bytes` whatever it asked for: OOM-killed below that limit."""
    return UsageProfile(cpu=0.8, memory=start_fraction, memory_need=need_bytes, memory_ramp_seconds=ramp_seconds)


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    uuid: str
    model: str


@dataclass(frozen=True, slots=True)
class VgpuSlice:
    """One vGPU of a container on a sharing device plugin: its card, memory limit and core share (0: no cap)."""

    device: GpuDevice
    memory_mib: int
    cores: int


def _phase(*parts: str) -> float:
    return (zlib.crc32("/".join(parts).encode()) % 10_000) / 10_000 * 2 * math.pi


@dataclass(slots=True)
class ContainerUsage:
    """One running container; `started` is the real time its current instance started."""

    namespace: str
    pod: str
    container: str
    node: str
    started: float
    speed: float
    profile: UsageProfile
    cpu_request: float = 0.0
    memory_request: float = 0.0
    memory_limit: float | None = None
    gpus: tuple[GpuDevice, ...] = ()
    vgpu: tuple[VgpuSlice, ...] = ()
    pod_labels: dict[str, str] = field(default_factory=dict)
    phase: float = 0.0

    def __post_init__(self) -> None:
        self.phase = _phase(self.namespace, self.pod, self.container)

    def scenario_seconds(self, t: float) -> float:
        return max(0.0, t - self.started) * self.speed

    def _omega(self) -> float:
        return 2 * math.pi / self.profile.period

    def cpu_base(self) -> float:
        return self.profile.cpu * self.cpu_request if self.cpu_request > 0 else self.profile.cpu

    def cpu_cores(self, t: float) -> float:
        s = self.scenario_seconds(t)
        return self.cpu_base() * (1 + self.profile.cpu_wobble * math.sin(self._omega() * s + self.phase))

    def cpu_seconds(self, t: float) -> float:
        """Integral of cpu_cores over real time since the container started."""
        s = self.scenario_seconds(t)
        w, omega, phi = self.profile.cpu_wobble, self._omega(), self.phase
        scenario_integral = s + w * (math.cos(phi) - math.cos(omega * s + phi)) / omega
        return self.cpu_base() * scenario_integral / self.speed

    def memory_base(self) -> float:
        reference = self.memory_request or self.memory_limit or 256 * 2**20
        return self.profile.memory * reference

    def _need_start(self, need: float) -> float:
        return min(self.memory_base(), need)

    def memory_bytes(self, t: float) -> float:
        s = self.scenario_seconds(t)
        need = self.profile.memory_need
        if need is not None:
            start = self._need_start(need)
            value = start + (need - start) * min(1.0, s / max(self.profile.memory_ramp_seconds, 1e-9))
            return min(value, self.memory_limit) if self.memory_limit else value
        ramp = self.profile.memory_to_limit_after
        if ramp is not None and self.memory_limit:
            start = self.memory_base()
            return start + (self.memory_limit - start) * min(1.0, s / ramp)
        value = self.memory_base() * (1 + self.profile.memory_wobble * math.sin(self._omega() * s / 3 + self.phase))
        return min(value, self.memory_limit) if self.memory_limit else value

    def gpu_util(self, t: float, gpu: int) -> float:
        s = self.scenario_seconds(t)
        value = self.profile.gpu_util + self.profile.gpu_wobble * math.sin(self._omega() * s + self.phase + gpu)
        return min(100.0, max(0.0, value))

    def vgpu_util(self, t: float, slice_: VgpuSlice) -> float:
        """Percent of the card the container's processes use on this vGPU, capped by its core share."""
        value = self.gpu_util(t, slice_.device.index)
        return min(value, float(slice_.cores)) if slice_.cores > 0 else value

    def vgpu_memory_bytes(self, t: float, slice_: VgpuSlice) -> float:
        """Device memory in use on this vGPU: `gpu_memory` of its limit, with a small wobble, never above it."""
        s = self.scenario_seconds(t)
        limit = slice_.memory_mib * 2.0**20
        wobble = 1 + self.profile.memory_wobble * 0.3 * math.sin(self._omega() * s / 5 + self.phase)
        return min(limit, self.profile.gpu_memory * limit * wobble)

    def oom_after(self) -> float | None:
        """Scenario seconds after start at which the working set reaches the limit (OOM profiles), None
        when it never does (no limit, or a limit at or above what the program needs)."""
        need = self.profile.memory_need
        if need is not None:
            if not self.memory_limit or need <= self.memory_limit:
                return None
            start = self._need_start(need)
            if start >= self.memory_limit:
                return 0.0
            return self.profile.memory_ramp_seconds * (self.memory_limit - start) / (need - start)
        if self.profile.memory_to_limit_after is None or not self.memory_limit:
            return None
        return self.profile.memory_to_limit_after


# ---- publishing ----------------------------------------------------------------------------------

def format_nanocores(cores: float) -> str:
    return f"{max(0, round(cores * 1e9))}n"


def format_kibibytes(amount: float) -> str:
    return f"{max(0, round(amount / 1024))}Ki"


def pod_metrics(pod_ns: str, pod_name: str, containers: Iterable[ContainerUsage], t: float,
                labels: dict[str, str], since: float | None = None) -> Obj:
    """PodMetrics as metrics-server reports them: CPU is the average rate over the window that ends
    at `timestamp` (from `since`, the previous report), so consecutive reports add up to the counter."""
    t = float(math.floor(t))  # metav1.Time has whole seconds: make the window match what is published
    window = t - since if since is not None and t > since else 30.0

    def cpu(c: ContainerUsage) -> float:
        if since is not None and t > since:
            return (c.cpu_seconds(t) - c.cpu_seconds(since)) / (t - since)
        return c.cpu_cores(t)

    return {
        "kind": "PodMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": pod_name, "namespace": pod_ns, "creationTimestamp": rfc3339(t), "labels": labels},
        "timestamp": rfc3339(t),
        "window": f"{window:g}s",
        "containers": [
            {"name": c.container,
             "usage": {"cpu": format_nanocores(cpu(c)), "memory": format_kibibytes(c.memory_bytes(t))}}
            for c in containers
        ],
    }


def node_metrics(node: str, labels: dict[str, str], cores: float, memory: float, t: float) -> Obj:
    return {
        "kind": "NodeMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": node, "creationTimestamp": rfc3339(t), "labels": labels},
        "timestamp": rfc3339(t),
        "window": "30s",
        "usage": {"cpu": format_nanocores(cores), "memory": format_kibibytes(memory)},
    }


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def _value(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


FAMILIES = (
    ("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed in seconds."),
    ("container_memory_working_set_bytes", "gauge", "Current working set in bytes."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
)


def render_prometheus(containers: Iterable[ContainerUsage], t: float, card_lines: Iterable[str] = ()) -> bytes:
    """cAdvisor- and DCGM-exporter-style series for the running containers at real time t. `card_lines`: more
    DCGM_FI_DEV_GPU_UTIL samples (the shared cards', per card; simulator.vgpu_metrics)."""
    items = sorted(containers, key=lambda c: (c.namespace, c.pod, c.container))
    cpu: list[str] = []
    mem: list[str] = []
    gpu: list[str] = []
    for c in items:
        ident = _labels((("namespace", c.namespace), ("pod", c.pod), ("container", c.container)))
        cpu.append(f"container_cpu_usage_seconds_total{{{ident}}} {c.cpu_seconds(t):.6f}")
        mem.append(f"container_memory_working_set_bytes{{{ident}}} {_value(round(c.memory_bytes(t)))}")
        for dev in c.gpus:
            labels = _labels((
                ("gpu", str(dev.index)), ("UUID", dev.uuid), ("device", f"nvidia{dev.index}"),
                ("modelName", dev.model), ("Hostname", c.node), ("namespace", c.namespace),
                ("pod", c.pod), ("container", c.container),
            ))
            gpu.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {_value(round(c.gpu_util(t, dev.index), 1))}")
    gpu.extend(card_lines)
    out: list[str] = []
    for (name, kind, help_text), lines in zip(FAMILIES, (cpu, mem, gpu), strict=True):
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return ("\n".join(out) + "\n").encode()
