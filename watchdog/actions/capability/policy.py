"""What a queue's capability should be, by policy: pure functions of the nodes, the usage history and
the pending pods. Guardrails (watchdog.actions.capability.guardrails) then decide how far to move towards it.

A target is a float per resource in base units, or None when the policy cannot tell (a demand policy
without usage history in its window): an unknown target leaves the capability as it is, never lowers it
on missing data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from volcano_monitor.core.gpushare import PHYSICAL_GPU
from volcano_monitor.core.model import Node, Pod
from volcano_monitor.watchdog.actions.capability.settings import DemandPolicy, SharePolicy, demand_kind

BucketUsage = Mapping[str, float]  # one rollup bucket of one queue: {"cpu": cores, "memory": bytes, "gpu": GPUs}


@dataclass(frozen=True)
class Target:
    amounts: dict[str, float | None]  # resource -> target (None: unknown, leave as is)
    why: dict[str, str]  # resource -> one line of explanation
    inputs: dict[str, Any] = field(default_factory=dict)  # what the target was computed from (for the audit)


# ---- share --------------------------------------------------------------------------------------------

def node_eligible(node: Node, selector: Mapping[str, str]) -> bool:
    """Counts towards a share: Ready, not cordoned (`spec.unschedulable`), carrying every selector label."""
    return node.ready and not node.unschedulable and all(node.labels.get(k) == v for k, v in selector.items())


def _selector_text(selector: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "any node"


def share_target(policy: SharePolicy, nodes: Iterable[Node]) -> Target:
    eligible = sorted((n for n in nodes if node_eligible(n, policy.node_selector)), key=lambda n: n.name)
    totals = {resource: 0.0 for resource in policy.resources}
    for node in eligible:
        for name, amount in node.allocatable:
            if name in totals:
                totals[name] += amount
    where = f"{len(eligible)} Ready schedulable node(s) matching {_selector_text(policy.node_selector)}"
    return Target(
        amounts={r: total * policy.fraction for r, total in totals.items()},
        why={r: f"share: {policy.fraction:g} x {_amount(r, total)} allocatable on {where}"
             for r, total in totals.items()},
        inputs={"policy": "share", "fraction": policy.fraction, "node_selector": dict(policy.node_selector),
                "nodes": [n.name for n in eligible], "allocatable": totals},
    )


# ---- demand -------------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: an observed value, never an interpolation above every observation."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered) - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def pending_requests(pods: Iterable[Pod], queue: str, group_queues: Mapping[tuple[str, str], str]) -> dict[str, float]:
    """Requests of the queue's Pending pods that no node holds yet (a bound pod already counts as
    allocated). A pod without a queue label is attributed through its PodGroup (`group_queues`). In the
    Queue's own units: the derived `physical-gpu` (core.gpushare) is no resource a capability can name."""
    totals: dict[str, float] = {}
    for pod in pods:
        if pod.phase != "Pending" or pod.node_name:
            continue
        owner = pod.queue or group_queues.get((pod.namespace, pod.podgroup), "")
        if owner != queue:
            continue
        for name, amount in pod.requests:
            if name != PHYSICAL_GPU:
                totals[name] = totals.get(name, 0.0) + amount
    return totals


def demand_target(policy: DemandPolicy, buckets: Sequence[BucketUsage], pending: Mapping[str, float]) -> Target:
    """`percentile` of the per-bucket usage x (1 + headroom) + pending requests, clamped to min/max.
    No bucket in the window: unknown (None) for every resource."""
    amounts: dict[str, float | None] = {}
    why: dict[str, str] = {}
    observed: dict[str, float] = {}
    for resource in policy.resources:
        kind = demand_kind(resource)
        if not buckets or kind is None:
            amounts[resource] = None
            why[resource] = f"demand: no usage history in the last {_duration(policy.window_seconds)}"
            continue
        used = percentile([b.get(kind, 0.0) for b in buckets], policy.percentile)
        waiting = pending.get(resource, 0.0)
        value = used * (1 + policy.headroom) + waiting
        text = (f"demand: p{policy.percentile * 100:g} usage {_amount(resource, used)} over {len(buckets)} "
                f"bucket(s) x {1 + policy.headroom:g} + pending {_amount(resource, waiting)}")
        low, high = policy.min.get(resource), policy.max.get(resource)
        if low is not None and value < low:
            value, text = low, text + f", raised to min {_amount(resource, low)}"
        if high is not None and value > high:
            value, text = high, text + f", lowered to max {_amount(resource, high)}"
        observed[resource] = used
        amounts[resource], why[resource] = value, text
    return Target(amounts=amounts, why=why, inputs={
        "policy": "demand", "window_seconds": policy.window_seconds, "percentile": policy.percentile,
        "headroom": policy.headroom, "buckets": len(buckets), "usage_percentile": observed,
        "pending": {r: pending.get(r, 0.0) for r in policy.resources}})


# ---- formatting ---------------------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _amount(resource: str, value: float) -> str:
    """Human units for explanations: cores, GiB, or a plain count."""
    if resource == "cpu":
        return f"{round(value, 3):g} cores"
    if resource == "memory":
        return f"{round(value / 2**30, 3):g}Gi"
    return f"{value:g}"
