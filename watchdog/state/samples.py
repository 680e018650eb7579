"""What usage collectors produce and what the recorder needs to attribute it.

A `UsageSample` is one container's usage at one instant, from whichever source saw it: the metrics
API knows CPU and memory, Prometheus may add GPU utilisation, so every value may be missing (None).
A `PodInfo` is what the informer caches say about the pod right now (job, task, queue, requests);
the recorder looks it up through a `PodLookup` so it never touches the caches itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True, frozen=True)
class UsageSample:
    ts: float  # epoch seconds of the measurement (not of the poll)
    namespace: str
    pod: str
    container: str
    cpu_cores: float | None
    memory_bytes: float | None
    # GPU utilisation, 0..100, of `gpus` physical GPUs: on whole cards the mean over the container's cards, on
    # a shared card the part of the container's share it used (watchdog.sources.shared_gpus), so that
    # `gpu_util_percent / 100 * gpus` is the physical GPUs it kept busy (what the ledger's GPU-seconds used add).
    gpu_util_percent: float | None = None
    gpus: float = 0  # physical GPUs the percentage is of, 0.25 for a quarter of a card (0: unknown, the pod's)
    # Seconds before `ts` the values stand for (metrics-server's `window`, Prometheus' rate range);
    # 0 when unknown. The first sample of a pod is credited with it (capped), not with nothing.
    window: float = 0.0


@dataclass(frozen=True, slots=True)
class PodInfo:
    job_uid: str  # the Volcano Job's UID; for a Kubeflow/Spark pod, its PodGroup's UID ("" if none)
    job_name: str
    namespace: str
    workload: str
    task: str
    queue: str
    phase: str
    cpu_request_cores: float  # the pod's effective request (all containers)
    memory_request_bytes: float
    gpus: float  # physical GPUs it holds (`core.gpushare`): 0.25 for a quarter of a shared card
    node: str = ""  # the node the pod runs on ("" while unscheduled): its price (watchdog.state.prices)
    gpu_resource: str = ""  # the GPU resource it requests (nvidia.com/gpu, amd.com/gpu; "" for none)


class PodLookup(Protocol):
    """Attribution of a pod by namespace and name; None when the caches do not know it."""

    def __call__(self, namespace: str, pod: str) -> PodInfo | None: ...
