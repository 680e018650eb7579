"""Settings of the node detectors, GpuStranded and NodeHot (`detectors.gpu_stranded`, `detectors.node_hot`).

Amounts are Kubernetes quantities (`"4"`, `"500m"`, `"16Gi"`), held in base units (cores, bytes).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.core.settings import Section

__all__ = ["GpuStrandedSettings", "NodeHotSettings"]


def _positive_quantity(value: Any) -> float:
    amount = parse_quantity(value)  # QuantityError is a ValueError: pydantic reports it under the key
    if amount <= 0:
        raise ValueError(f"quantity must be positive: {value!r}")
    return amount


PositiveQuantity = Annotated[float, BeforeValidator(_positive_quantity)]


class GpuStrandedSettings(Section):
    """GpuStranded: free GPUs on a node that no GPU pod of the cluster's typical shape can use, because pods
    that request no GPU hold the node's CPU or memory. Reads the Node objects and the pods' requests."""

    enabled: bool = Field(default=True, description="Watch GPU nodes for GPUs held hostage by CPU-only pods.")
    cpu_per_gpu: PositiveQuantity = Field(
        default=4.0, description="CPU one GPU of a typical GPU pod needs (a quantity: `4`, `3500m`).")
    memory_per_gpu: PositiveQuantity = Field(
        default=16.0 * 2**30, description="Memory one GPU of a typical GPU pod needs (a quantity: `16Gi`).")
    window_seconds: float = Field(
        default=1800, ge=0, description="GPUs stranded this long raise GpuStranded (pending until then).")
    warning_gpu_hours: float = Field(
        default=2, ge=0, description="Stranded GPU-hours of an episode from which its severity is warning "
                                     "(info below).")
    critical_gpu_hours: float = Field(
        default=24, ge=0, description="Stranded GPU-hours of an episode from which its severity is critical.")
    max_pods_listed: int = Field(default=10, ge=1, le=100, description="CPU-only pods named in one alert.")

    @model_validator(mode="after")
    def _ordered(self) -> GpuStrandedSettings:
        if self.critical_gpu_hours < self.warning_gpu_hours:
            raise ValueError(f"critical_gpu_hours ({self.critical_gpu_hours:g}) must not be below "
                             f"warning_gpu_hours ({self.warning_gpu_hours:g})")
        return self


class NodeHotSettings(Section):
    """NodeHot: a node's used CPU or memory above a share of its allocatable for a window: CPU overcommit makes
    nodes run hot while requests look fine."""

    enabled: bool = Field(default=True, description="Watch nodes running hot.")
    source: Literal["node_metrics", "pods"] = Field(
        default="node_metrics",
        description="Node usage from `node_metrics` (metrics.k8s.io NodeMetrics, the whole node, polled by the "
                    "leader) or `pods` (the sum of the latest usage samples of the Volcano pods on the node, from "
                    "the configured usage sources: for clusters without metrics-server).")
    threshold: float = Field(default=0.9, gt=0, le=2,
                             description="Used / allocatable (CPU or memory) above which a node is hot.")
    window_seconds: float = Field(default=600, ge=0, description="A node hot this long raises NodeHot.")
    interval_seconds: float = Field(
        default=30, gt=0, description="Seconds between NodeMetrics polls; usage older than 3 of them (+1 min) is "
                                      "not judged, whatever the source.")
    max_pods_listed: int = Field(default=10, ge=1, le=100, description="Pods listed in one alert.")


class Detectors(Section):
    """Thresholds and windows of the failure and waste detectors (DESIGN §5)."""

    gang_unschedulable_seconds: float = Field(
        default=600, ge=0,
        description="A PodGroup Pending or Inqueue this long, no pod placed, raises GangUnschedulable (not when it "
                    "only waits for its queue or the cluster to free up: that is QueueStarved)."
    )
    partial_gang_seconds: float = Field(
        default=600, ge=0, description="Some pods running while the gang is incomplete this long raises PartialGang."
    )
    idle_window_seconds: float = Field(default=1800, gt=0, description="Window over which JobIdle looks at usage.")
    idle_cpu_ratio: float = Field(
        default=0.05, gt=0, le=1, description="JobIdle when CPU used / requested stays below."
    )
    idle_gpu_util_percent: float = Field(
        default=5, ge=0, le=100, description="JobIdle (GPU) when GPU util stays below."
    )
    over_requested_ratio: float = Field(
        default=0.25, gt=0, le=1, description="OverRequested when a finished job used less than this of its request."
    )
    over_requested_min_seconds: float = Field(
        default=600, ge=0, description="OverRequested only for jobs that ran at least this long."
    )
    queue_starved_seconds: float = Field(
        default=900, ge=0,
        description="QueueStarved when demand that would fit alone waits this long because its queue (or an "
                    "ancestor) is at capability or the cluster (root queue's deserved) is full."
    )
    retrying_min_retries: int = Field(default=1, ge=1, description="JobRetrying from this many retries.")
    check_interval_seconds: float = Field(
        default=15, gt=0, le=3600,
        description="Seconds between passes of the gang and queue detectors (GangUnschedulable, PartialGang, "
                    "QueueStarved, budgets): an alert comes up to this late after its threshold.")
    waste_interval_seconds: float = Field(
        default=60, gt=0, le=3600,
        description="Seconds between passes of JobIdle and OverRequested, which read usage from the database: a "
                    "shorter one finds waste sooner at the cost of more queries.")
    gpu_stranded: GpuStrandedSettings = GpuStrandedSettings()
    node_hot: NodeHotSettings = NodeHotSettings()
