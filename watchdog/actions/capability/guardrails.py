"""How far a capability may move towards its policy target in one reconcile: pure functions.

Per resource, in this order:
1. round the target up to the resource's granularity (1m CPU, 1Mi memory, whole devices);
2. hierarchy: a child never gets more than its parent (the parent's planned value when the parent has
   a policy, else the parent's current capability);
3. never below what is allocated: a decrease stops at `status.allocated`, and a capability already below
   it is not lowered further (lowering a capability cannot evict anything, but it would make the
   scheduler treat the queue as overused and reclaim from it);
4. tolerance: a change smaller than `tolerance_fraction` of the current value is not made;
5. maximum step: one change moves at most `max_step_fraction` of the current value (at least one unit of
   granularity, so small integer capabilities still move); a capability that is unset or 0 has no scale
   to step from and is set to the target at once;
6. cooldown, per queue: no change at all within `cooldown_seconds` of the queue's last applied change.

A plan whose target differs from the current value but which the guardrails keep where it is, is `held`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from volcano_monitor.watchdog.actions.capability.policy import Target
from volcano_monitor.watchdog.actions.capability.settings import CapabilitySettings

MI = 2**20
_EPS = 1e-9


def granularity(resource: str) -> float:
    if resource == "cpu":
        return 0.001
    if resource == "memory":
        return float(MI)
    return 1.0


def round_up(resource: str, value: float) -> float:
    g = granularity(resource)
    return max(0.0, math.ceil(value / g - _EPS) * g)


def _round_toward(resource: str, value: float, current: float) -> float:
    """Round a stepped value to the granularity without overshooting the step: towards `current`."""
    g = granularity(resource)
    units = value / g
    return (math.floor(units + _EPS) if value > current else math.ceil(units - _EPS)) * g


def format_quantity(resource: str, value: float) -> str:
    """A Kubernetes quantity for the Queue's spec: `2500m` / `8` cores, `64Gi` / `1536Mi` / bytes, counts."""
    if resource == "cpu":
        milli = round(value * 1000)
        return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    if resource == "memory" or resource == "ephemeral-storage" or resource.startswith("hugepages-"):
        amount = round(value)
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
        return str(amount)
    return str(round(value))


@dataclass(frozen=True)
class Limits:
    max_step_fraction: float
    cooldown_seconds: float
    tolerance_fraction: float

    @classmethod
    def of(cls, settings: CapabilitySettings) -> Limits:
        return cls(settings.max_step_fraction, settings.cooldown_seconds, settings.tolerance_fraction)


@dataclass(frozen=True)
class ResourcePlan:
    current: float | None  # the Queue's spec.capability now (None: unset, i.e. unlimited)
    target: float | None  # where the policy wants it, after rounding, hierarchy and allocation
    planned: float | None  # what this reconcile sets (== current: no change)
    allocated: float
    why: str
    held: bool = False  # the target differs from current but a guardrail keeps the current value

    @property
    def changes(self) -> bool:
        return self.planned is not None and self.planned != self.current

    def as_dict(self) -> dict[str, Any]:
        return {"current": self.current, "target": self.target, "planned": self.planned,
                "allocated": self.allocated, "why": self.why, "held": self.held}


@dataclass(frozen=True)
class QueuePlan:
    queue: str
    policy: str
    resources: dict[str, ResourcePlan]
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> dict[str, float]:
        """Resource -> new value, for the resources this plan changes."""
        return {r: p.planned for r, p in self.resources.items() if p.changes and p.planned is not None}

    @property
    def verdict(self) -> Literal["change", "held", "unchanged"]:
        if self.changes:
            return "change"
        return "held" if any(p.held for p in self.resources.values()) else "unchanged"


def plan_resource(resource: str, current: float | None, target: float | None, allocated: float,
                  parent_limit: float | None, limits: Limits, cooldown_left: float, why: str) -> ResourcePlan:
    notes = [why]
    if target is None:
        return ResourcePlan(current, None, current, allocated, why)
    desired = round_up(resource, target)
    if parent_limit is not None and desired > parent_limit:
        desired = parent_limit
        notes.append(f"capped at the parent's {format_quantity(resource, parent_limit)}")
    floor = allocated if current is None else min(current, allocated)
    if desired < floor:
        desired = floor
        notes.append(f"kept at allocated {format_quantity(resource, allocated)}" if current is None or
                     allocated <= current else "not lowered: below allocated already")

    def result(planned: float | None, note: str = "") -> ResourcePlan:
        text = "; ".join([*notes, note] if note else notes)
        moved_off = current is None or abs(round_up(resource, target) - current) >= limits.tolerance_fraction * current
        held = planned == current and round_up(resource, target) != current and moved_off
        return ResourcePlan(current, desired, planned, allocated, text, held)

    if current is not None and abs(desired - current) < limits.tolerance_fraction * current:
        return result(current, f"within {limits.tolerance_fraction:g} tolerance" if desired != current else "")
    planned = desired
    step_note = ""
    if current is not None and current > 0:
        step = limits.max_step_fraction * current
        stepped = min(max(desired, current - step), current + step)
        if stepped != desired:
            planned = _round_toward(resource, stepped, current)
            if planned == current:  # the step is finer than the granularity: move one unit
                g = granularity(resource)
                planned = min(current + g, desired) if desired > current else max(current - g, desired)
            step_note = f"max step {limits.max_step_fraction:g} of current"
    if cooldown_left > 0 and planned != current:
        return result(current, f"cooldown: {cooldown_left:.0f}s left")
    return result(planned, step_note)


def plan_queue(queue: str, target: Target, current: Mapping[str, float], allocated: Mapping[str, float],
               parent_limits: Mapping[str, float], limits: Limits, cooldown_left: float) -> QueuePlan:
    resources = {
        resource: plan_resource(resource, current.get(resource), amount, allocated.get(resource, 0.0),
                                parent_limits.get(resource), limits, cooldown_left, target.why.get(resource, ""))
        for resource, amount in target.amounts.items()
    }
    inputs = {**target.inputs, "allocated": dict(allocated), "parent_limits": dict(parent_limits),
              "cooldown_left_seconds": max(cooldown_left, 0.0)}
    return QueuePlan(queue, str(target.inputs.get("policy", "")), resources, inputs)


def parent_limits(parent: str, planned: Mapping[str, Mapping[str, float]],
                  capabilities: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """What a child may have at most: its parent's planned capability when the parent has a policy
    (planned this round, parents first), else the parent's current capability. Unset: no limit."""
    if not parent:
        return {}
    if parent in planned:
        return {**capabilities.get(parent, {}), **planned[parent]}
    return dict(capabilities.get(parent, {}))


def hierarchy_order(names: Iterable[str], parents: Mapping[str, str]) -> list[str]:
    """`names` with every queue after its ancestors (by depth, then name); cycles are cut."""
    def depth(name: str) -> int:
        seen: set[str] = set()
        while parents.get(name) and name not in seen:
            seen.add(name)
            name = parents[name]
        return len(seen)

    return sorted(names, key=lambda n: (depth(n), n))
