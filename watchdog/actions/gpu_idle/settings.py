"""Settings of GPU idle time (`gpu_idle:`): the idle threshold, per-queue limits, and the opt-in abort.

Why the abort is opt-in twice (`abort.enabled` and a queue's `abort: true`): aborting a Job loses its
work. A cluster turns the action on once (and the chart grants `create` on Volcano Commands only then);
each queue's owners decide whether their jobs may be aborted. `mode: dry-run` records and announces what
would be aborted without creating anything.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from volcano_monitor.core.settings import Section


class QueueGpuIdlePolicy(Section):
    """What idle GPUs of one queue's jobs lead to."""

    gpu_idle_limit_seconds: float | None = Field(
        default=None, gt=0, description="GpuIdle fires when a job's GPUs have all been idle this long without a "
                                        "break (null: never).")
    abort: bool = Field(default=False, description="Abort (Volcano Command AbortJob) a job whose GpuIdle alert has "
                                                   "fired for `gpu_idle.abort.grace_seconds` (needs "
                                                   "gpu_idle.abort.enabled).")


class GpuIdleAbort(Section):
    """The action: a Volcano bus Command `AbortJob` on the Job, created by the leader, once per run."""

    enabled: bool = Field(default=False, description="Allow aborting (the chart grants create on "
                                                     "commands.bus.volcano.sh only then).")
    mode: Literal["dry-run", "apply"] = Field(default="dry-run", description="dry-run: record and announce only.")
    grace_seconds: float = Field(default=1800, ge=0, description="Seconds GpuIdle must have been firing (the alert "
                                                                 "comes first) before the job is aborted.")
    interval_seconds: float = Field(default=15, gt=0, description="Seconds between the leader's passes.")


class GpuIdleSettings(Section):
    """GPU idle seconds per job (from Prometheus' DCGM series, `sources.prometheus`), their alerts, the abort."""

    idle_util_percent: float = Field(default=5, ge=0, le=100, description="A GPU below this utilisation is idle; a "
                                                                         "job is idle when all its GPUs are.")
    no_data_seconds: float = Field(default=600, ge=0, description="GpuNoData when a job requesting GPUs has had no "
                                                                 "DCGM_FI_DEV_GPU_UTIL series this long.")
    queues: dict[str, QueueGpuIdlePolicy] = Field(default_factory=dict, description="Policy per queue name.")
    default: QueueGpuIdlePolicy = Field(default_factory=QueueGpuIdlePolicy,
                                        description="Policy of queues not listed in `queues`.")
    abort: GpuIdleAbort = Field(default_factory=GpuIdleAbort)

    @model_validator(mode="after")
    def _abort_needs_enabling(self) -> GpuIdleSettings:
        named = [("default", self.default), *((f"queues.{q}", p) for q, p in sorted(self.queues.items()))]
        for where, policy in named:
            if policy.abort and not self.abort.enabled:
                raise ValueError(f"gpu_idle.{where}.abort: needs gpu_idle.abort.enabled: true (and the RBAC to "
                                 "create Volcano Commands)")
            if policy.abort and policy.gpu_idle_limit_seconds is None:
                raise ValueError(f"gpu_idle.{where}.abort: needs gpu_idle_limit_seconds (the alert comes first)")
        return self

    def policy(self, queue: str) -> QueueGpuIdlePolicy:
        return self.queues.get(queue, self.default)

    def aborts(self, queue: str) -> bool:
        return self.abort.enabled and self.policy(queue).abort
