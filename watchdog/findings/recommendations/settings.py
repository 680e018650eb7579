"""Settings of the request recommendations (`recommendations:`), in the manner of the VPA recommender."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from volcano_monitor.core.settings import Section
from volcano_monitor.watchdog.actions.capability.settings import Quantity


class ContainerPolicy(Section):
    """Caps of the recommendations of the containers it selects, like a VPA containerPolicy. Selectors are
    exact names or shell globs (`team-*`, `*`); of the policies that select a container, the most specific
    (most selectors other than `*`) applies, the first listed on a tie."""

    namespace: str = Field(default="*", max_length=253, description="Namespace selector.")
    queue: str = Field(default="*", max_length=253, description="Queue selector.")
    workload: str = Field(default="*", max_length=253, description="Workload selector.")
    container: str = Field(default="*", max_length=253, description="Container name selector.")
    min_allowed: dict[Literal["cpu", "memory"], Quantity] = Field(
        default_factory=dict, description="Lowest request recommended (quantities: `cpu: 100m`, `memory: 1Gi`).")
    max_allowed: dict[Literal["cpu", "memory"], Quantity] = Field(
        default_factory=dict, description="Highest request recommended.")

    @model_validator(mode="after")
    def _ordered(self) -> ContainerPolicy:
        for name, low in self.min_allowed.items():
            high = self.max_allowed.get(name)
            if high is not None and high < low:
                raise ValueError(f"max_allowed.{name} is below min_allowed.{name}")
        return self


class Recommendations(Section):
    """Request recommendations in the manner of the VPA recommender."""

    cpu_percentile: float = Field(default=0.9, gt=0, lt=1, description="Percentile of CPU usage for the target.")
    memory_percentile: float = Field(default=0.9, gt=0, lt=1, description="Percentile of per-interval memory peaks.")
    safety_margin: float = Field(default=0.15, ge=0, description="Added to targets (0.15 = +15%).")
    half_life_hours: float = Field(default=24, gt=0, description="Half-life of sample weights in the histograms.")
    memory_interval_hours: float = Field(default=24, gt=0, description="Interval whose memory peak is one sample.")
    oom_bump_ratio: float = Field(default=1.2, ge=1, description="After an OOM kill: at least peak x this.")
    oom_min_bump_bytes: int = Field(default=100 * 2**20, ge=0, description="After an OOM kill: at least peak + this.")
    min_cpu_cores: float = Field(default=0.025, ge=0, description="Lowest CPU recommendation.")
    min_memory_bytes: int = Field(default=250 * 2**20, ge=0, description="Lowest memory recommendation.")
    workload_label: str | None = Field(
        default=None, description="Pod label naming the workload; default: namespace + job name without its run suffix."
    )
    min_confidence: float = Field(
        default=0.14, ge=0, le=1,
        description="Below this confidence (history in days / 7) a recommendation shows no patch, only \"not enough "
                    "history\". 0.14: about a day of one-a-minute samples, the first complete daily memory peak; "
                    "before that the upper bound is more than twice the p95.")
    container_policies: list[ContainerPolicy] = Field(
        default_factory=list,
        description="Per-container caps, like the VPA's containerPolicies: each {namespace, queue, workload, "
                    "container (names or globs, default `*`), min_allowed, max_allowed ({cpu, memory} "
                    "quantities)}; the most specific match applies (docs/watchdog.md).")
