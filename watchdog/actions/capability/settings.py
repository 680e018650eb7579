"""Configuration of the queue capability controller (`capability:` in the watchdog's settings).

Amounts are written as Kubernetes quantities (`"8"`, `"250m"`, `"64Gi"`, `"1.5Gi"`) and held as floats
in base units (cores, bytes, devices). A value that is not a quantity is a config error naming its key,
e.g. `capability.policies.team-a.demand.min.memory: Value error, invalid quantity '64GB'`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.core.settings import Section

DEFAULT_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


def _quantity(value: Any) -> float:
    amount = parse_quantity(value)  # QuantityError is a ValueError: pydantic reports it under the key
    if amount < 0:
        raise ValueError(f"quantity must not be negative: {value!r}")
    return amount


Quantity = Annotated[float, BeforeValidator(_quantity)]
_RESOURCE_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$"
ResourceName = Annotated[str, Field(min_length=1, max_length=253, pattern=_RESOURCE_NAME)]


def demand_kind(resource: str) -> str | None:
    """Which usage column measures `resource`: cpu, memory, or GPUs of any vendor (`*/gpu`)."""
    if resource in ("cpu", "memory"):
        return resource
    return "gpu" if resource.endswith("/gpu") else None


class SharePolicy(Section):
    """Capability = `fraction` x the allocatable of the Ready, schedulable nodes matching `node_selector`,
    following nodes as they join, leave, change or are cordoned."""

    fraction: float = Field(gt=0, le=1, description="Share of the matching nodes' allocatable (0.5 = half).")
    node_selector: dict[str, str] = Field(default_factory=dict,
                                          description="Node labels that must all match (empty: every node).")
    resources: list[ResourceName] = Field(default_factory=lambda: list(DEFAULT_RESOURCES), min_length=1,
                                          description="Resources whose capability the policy sets.")


class DemandPolicy(Section):
    """Capability = the `percentile` of the queue's usage per rollup bucket over `window_seconds`, plus
    `headroom`, plus what its Pending pods request, within `min`..`max`."""

    window_seconds: float = Field(default=7 * 86400, gt=0, description="Usage history looked at.")
    percentile: float = Field(default=0.95, gt=0, le=1, description="Percentile of the per-bucket usage.")
    headroom: float = Field(default=0.2, ge=0, description="Added on top of the percentile (0.2 = +20%).")
    min: dict[ResourceName, Quantity] = Field(default_factory=dict,
                                              description='Lowest capability per resource ({cpu: "8"}).')
    max: dict[ResourceName, Quantity] = Field(default_factory=dict,
                                              description='Highest capability per resource ({memory: "64Gi"}).')
    resources: list[ResourceName] = Field(default_factory=lambda: list(DEFAULT_RESOURCES), min_length=1,
                                          description="Resources planned: cpu, memory, GPUs (*/gpu).")

    @model_validator(mode="after")
    def _consistent(self) -> DemandPolicy:
        unmeasured = [r for r in self.resources if demand_kind(r) is None]
        if unmeasured:
            raise ValueError(f"resources: no usage is recorded for {', '.join(unmeasured)} "
                             "(demand plans cpu, memory and */gpu)")
        for resource, low in self.min.items():
            high = self.max.get(resource)
            if high is not None and low > high:
                raise ValueError(f"min.{resource} is above max.{resource}")
        return self


class QueuePolicy(Section):
    """The policy of one queue: exactly one of `share` or `demand`."""

    share: SharePolicy | None = None
    demand: DemandPolicy | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> QueuePolicy:
        if (self.share is None) == (self.demand is None):
            raise ValueError("a queue policy needs exactly one of share or demand")
        return self

    @property
    def kind(self) -> Literal["share", "demand"]:
        return "share" if self.share is not None else "demand"

    @property
    def resources(self) -> list[str]:
        chosen = self.share if self.share is not None else self.demand
        assert chosen is not None
        return list(chosen.resources)


class CapabilitySettings(Section):
    """Queue capability kept up to date by policy (docs/capability.md). Off by default; dry-run until
    `mode: apply`; only the leader (leader_election) patches Queues."""

    enabled: bool = Field(default=False, description="Run the capability controller.")
    mode: Literal["dry-run", "apply"] = Field(default="dry-run",
                                              description="dry-run: plan and record only; apply: patch Queues.")
    reconcile_interval_seconds: float = Field(default=60, gt=0,
                                              description="Seconds between reconciles (node and queue changes "
                                                          "also trigger one).")
    debounce_seconds: float = Field(default=2, ge=0,
                                    description="Wait after a node or queue change before reconciling, so a "
                                                "burst of changes makes one reconcile.")
    max_step_fraction: float = Field(default=0.25, gt=0,
                                     description="One change moves a capability by at most this fraction of its "
                                                 "current value.")
    cooldown_seconds: float = Field(default=900, ge=0, description="Least time between two changes of one queue.")
    tolerance_fraction: float = Field(default=0.05, ge=0, lt=1,
                                      description="No change when the plan differs from the current value by less "
                                                  "than this fraction of it.")
    conflict_retries: int = Field(default=3, ge=0, le=20,
                                  description="Re-read and re-plan this often when a Queue changed under a patch "
                                              "(409).")
    event_namespace: str = Field(default="default",
                                 description="Namespace of the Kubernetes Events about Queues (cluster-scoped).")
    policies: dict[str, QueuePolicy] = Field(
        default_factory=dict,
        description="Queue name -> policy: {share: {fraction, node_selector, resources}} or {demand: "
                    "{window_seconds, percentile, headroom, min, max, resources}} (docs/capability.md).")
