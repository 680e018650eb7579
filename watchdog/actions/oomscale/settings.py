"""The `oom_scale_up` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from volcano_monitor.core.settings import Section
from volcano_monitor.watchdog.actions.capability.settings import Quantity

MIB = 2**20


class OomScaleUpSettings(Section):
    """Resubmit OOM-killed Volcano Jobs with more memory (docs/watchdog.md, "OOM auto scale-up"). Off by
    default; dry-run until `mode: apply`; only the leader (leader_election) creates Jobs.

    Which Jobs: those in `namespaces` and `queues` (an empty list: all) unless annotated
    `volcano-monitor/oom-scale-up: "false"`, and any Job annotated `"true"`."""

    enabled: bool = Field(default=False, description="Watch for OOM-killed Jobs and resubmit them.")
    mode: Literal["dry-run", "apply"] = Field(
        default="dry-run", description="dry-run: record what would be submitted; apply: create the Jobs.")
    namespaces: list[str] = Field(default_factory=list,
                                  description="Namespaces whose Jobs take part (empty: all watched ones).")
    queues: list[str] = Field(default_factory=list, description="Queues whose Jobs take part (empty: all).")
    ratio: float = Field(default=1.5, gt=1, le=10,
                         description="New memory = max(peak x ratio, request x ratio, request + min_increase).")
    min_increase: Quantity = Field(default=100 * MIB, gt=0,
                                   description='Least memory added per attempt ("100Mi").')
    max_memory: Quantity | None = Field(
        default=None, description='Highest memory request/limit of one container ("64Gi"); unset: only the '
                                  "queue's capability caps it.")
    max_attempts: int = Field(default=3, ge=1, le=20, description="Resubmissions per lineage at most.")
    reconcile_interval_seconds: float = Field(default=15, gt=0,
                                              description="Seconds between looks at failed Jobs (a Job or "
                                                          "pod change also triggers one).")

    @model_validator(mode="after")
    def _room_to_grow(self) -> OomScaleUpSettings:
        if self.max_memory is not None and self.max_memory < self.min_increase:
            raise ValueError("max_memory is below min_increase: no container could ever grow")
        return self
