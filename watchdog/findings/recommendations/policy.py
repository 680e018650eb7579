"""From the math's targets and bounds (watchdog.findings.recommendations.formulas) to a recommendation one can paste.

Why this step: people paste what they are shown. The VPA's upper bound is a bound, not a limit (25x the
p95 after an hour of history), so it is only ever shown as the range lower-upper, and:
- Limits as the VPA sets them (its admission controller's proportional limit): the recommended request x
  the container's own limit/request ratio; no limit where the container had none; the request itself
  where it had a limit and no request (Kubernetes then takes the request as the limit). The container's
  current requests and limits are the `ContainerSpec` the watchdog saw on its pods; unknown: no limit.
- Caps on each request, as the VPA's containerPolicies (min_allowed / max_allowed, the most specific
  `recommendations.container_policies` entry), plus what the cluster can give at all: the queue's
  capability (`spec.capability`: Volcano admits no pod past it) and the largest node's allocatable (no
  node could run a bigger container). The lowest maximum wins; the bounds are held within the same caps.
  A limit is held to the largest node's allocatable. Every cap applied is named in `capped_by`
  (`{"memory": "max_allowed", "cpu_limit": "node_allocatable"}`).
- GPUs are never recommended, whole or shared: the usage history holds CPU and memory only, a GPU count is a
  decision about the model and its parallelism, and a vGPU request (HAMi's `nvidia.com/gpu` with
  `gpucores`/`gpumem`, Volcano's `volcano.sh/vgpu-*`) is a slot count and a slice of a card that no
  number of samples could size. The patch sets cpu and memory only, so merged into the Job it keeps the GPU
  resources as they are, and a container that requests any says so in its notes (`gpu_requests`, the
  container's GPU resources as the watchdog saw them).
- Below `min_confidence` the recommendation is kept (its numbers are still the best guess, for /metrics
  and messages) but `status` says "not_enough_history" and every output shows its message instead of
  a patch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from volcano_monitor.core.gpushare import is_gpu_resource
from volcano_monitor.watchdog.findings.recommendations.formulas import Estimate
from volcano_monitor.watchdog.findings.recommendations.settings import ContainerPolicy, Recommendations

__all__ = ["NOT_ENOUGH_HISTORY", "OK", "RESOURCES", "ContainerSpec", "Recommendation", "finish", "gpu_note",
           "gpu_resources", "history_text", "policy_for", "proportional_limit"]

RESOURCES = ("cpu", "memory")
_GLOB = frozenset("*?[")  # a selector without these is a name, compared as a string (fnmatch is slower)
OK, NOT_ENOUGH_HISTORY = "ok", "not_enough_history"


@dataclass(frozen=True)
class ContainerSpec:
    """A container as last seen on a pod of the workload, with the caps known then (stored as JSON in
    `workload_histograms.spec`). Amounts in base units; an absent resource is not set (or unknown)."""

    queue: str = ""
    requests: dict[str, float] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    queue_capability: dict[str, float] = field(default_factory=dict)
    node_allocatable: dict[str, float] = field(default_factory=dict)  # the largest node's, per resource
    # the container's GPU resources (requests, a limit without a request included): never recommended, named
    gpu_requests: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"queue": self.queue, "requests": self.requests, "limits": self.limits,
               "queue_capability": self.queue_capability, "node_allocatable": self.node_allocatable}
        if self.gpu_requests:  # absent for the many CPU containers (and specs stored before it existed)
            out["gpu_requests"] = self.gpu_requests
        return out

    @staticmethod
    def from_json(data: Any) -> ContainerSpec | None:
        """The stored form back; None when it is missing or malformed (amounts must be finite, >= 0)."""
        if not isinstance(data, dict) or not isinstance(data.get("queue", ""), str):
            return None
        parts: dict[str, dict[str, float]] = {}
        for name in ("requests", "limits", "queue_capability", "node_allocatable", "gpu_requests"):
            values = data.get(name, {})
            if not isinstance(values, dict):
                return None
            good = {k: float(v) for k, v in values.items() if isinstance(k, str) and not isinstance(v, bool)
                    and isinstance(v, int | float) and math.isfinite(v) and v >= 0}
            if len(good) != len(values):
                return None
            parts[name] = good
        return ContainerSpec(data.get("queue", ""), **parts)


@dataclass(frozen=True)
class Recommendation:
    """One container's recommendation, in base units (cores, bytes). `*_target_*` are the requests to set,
    `*_limit_*` the limits (null: set none; they keep the container's own limit/request ratio); lower..upper
    is the range where the requests are likely to settle, never a limit. `status` "not_enough_history"
    (below recommendations.min_confidence; `message` says why): show no patch. `capped_by` names the cap
    each capped value hit: max_allowed, min_allowed, queue_capability or node_allocatable."""

    namespace: str
    workload: str
    task: str
    container: str
    cpu_target_cores: float
    cpu_lower_cores: float
    cpu_upper_cores: float
    memory_target_bytes: float
    memory_lower_bytes: float
    memory_upper_bytes: float
    confidence: float
    samples: int
    first_sample_at: datetime | None
    last_sample_at: datetime | None
    oom_bumped: bool
    status: str = OK  # "ok": a patch is offered; "not_enough_history": below min_confidence, none is
    message: str = ""  # why not, for people: "not enough history (60 samples over 1h 0m)"
    cpu_limit_cores: float | None = None
    memory_limit_bytes: float | None = None
    capped_by: dict[str, str] = field(default_factory=dict)  # resource (or resource_limit) -> cap
    current_requests: dict[str, float] | None = None  # None: not seen (the watchdog saw no pod of it yet)
    current_limits: dict[str, float] | None = None
    queue: str = ""
    notes: list[str] = field(default_factory=list)
    gpu_requests: dict[str, float] = field(default_factory=dict)  # kept as they are, never recommended

    @property
    def patchable(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        """JSON/YAML-safe: base units (cores, bytes), ISO 8601 times."""
        out = asdict(self)
        for name in ("first_sample_at", "last_sample_at"):
            out[name] = out[name].isoformat() if out[name] else None
        return out


def history_text(samples: int, first: datetime | None, last: datetime | None) -> str:
    """"not enough history (N samples over D)", D as people read it: 40s, 45m, 3h 20m, 2.5 days."""
    seconds = (last - first).total_seconds() if first is not None and last is not None else 0.0
    if seconds >= 86400:
        span = f"{seconds / 86400:.1f} days"
    elif seconds >= 3600:
        span = f"{int(seconds // 3600)}h {int(seconds % 3600 // 60)}m"
    elif seconds >= 60:
        span = f"{int(seconds // 60)}m"
    else:
        span = f"{int(seconds)}s"
    return f"not enough history ({samples} samples over {span})"


def policy_for(policies: list[ContainerPolicy], namespace: str, queue: str, workload: str,
               container: str) -> ContainerPolicy | None:
    """The most specific policy selecting the container (most selectors other than `*`); first on a tie."""
    best, best_score = None, -1
    for policy in policies:
        score = 0
        for pattern, value in ((policy.namespace, namespace), (policy.queue, queue), (policy.workload, workload),
                               (policy.container, container)):
            if pattern == "*":
                continue
            if not (pattern == value if _GLOB.isdisjoint(pattern) else fnmatchcase(value, pattern)):
                break
            score += 1
        else:
            if score > best_score:
                best, best_score = policy, score
    return best


def proportional_limit(request: float, current_request: float | None, current_limit: float | None) -> float | None:
    """The VPA's proportional limit: keep the container's limit/request ratio; no limit without one."""
    if not current_limit:
        return None
    if not current_request:
        return request  # a limit without a request: Kubernetes sets the request to the limit
    return request * current_limit / current_request


def gpu_resources(requests: Iterable[tuple[str, float]], limits: Iterable[tuple[str, float]]) -> dict[str, float]:
    """A container's GPU resources (`core.gpushare.is_gpu_resource`: `*/gpu`, HAMi's and Volcano's vGPU
    resources) as it asks them: its requests, and a limit without a request (Kubernetes takes it as one)."""
    out = {name: amount for name, amount in limits if is_gpu_resource(name)}
    out.update((name, amount) for name, amount in requests if is_gpu_resource(name))
    return out


def gpu_note(gpu_requests: dict[str, float]) -> str:
    """What the recommendation says of a GPU container: its GPU request stays as it is (module docstring)."""
    asked = ", ".join(f"{name}={amount:g}" for name, amount in sorted(gpu_requests.items()))
    shared = any(not name.endswith("/gpu") for name in gpu_requests)
    return (f"GPUs not recommended, kept as requested ({asked}"
            + ("; a vGPU share of a card" if shared else "") + "): cpu and memory only")


def _round(resource: str, value: float) -> float:
    """CPU up to a millicore, memory up to a byte (as the math rounds)."""
    if resource == "cpu":
        return math.ceil(round(value * 1000, 6)) / 1000
    return float(math.ceil(round(value, 6)))


def finish(key: tuple[str, str, str, str], est: Estimate, settings: Recommendations, spec: ContainerSpec | None, *,
           samples: int, first: datetime | None, last: datetime | None) -> Recommendation:
    """Caps, limits and the confidence gate applied to the math's estimate of one container."""
    namespace, workload, _, container = key
    queue = spec.queue if spec is not None else ""
    policy = policy_for(settings.container_policies, namespace, queue, workload, container)
    mins: dict[str, float] = {str(k): v for k, v in policy.min_allowed.items()} if policy is not None else {}
    maxs: dict[str, float] = {str(k): v for k, v in policy.max_allowed.items()} if policy is not None else {}
    capped: dict[str, str] = {}
    values: dict[str, tuple[float, float, float]] = {}
    limits: dict[str, float | None] = {}
    notes: list[str] = []
    for resource, target, lower, upper in (
            ("cpu", est.cpu_target_cores, est.cpu_lower_cores, est.cpu_upper_cores),
            ("memory", est.memory_target_bytes, est.memory_lower_bytes, est.memory_upper_bytes)):
        floor = mins.get(resource)
        maxima = [(amount, name) for name, amount in (
            ("max_allowed", maxs.get(resource)),
            ("queue_capability", spec.queue_capability.get(resource) if spec is not None else None),
            ("node_allocatable", spec.node_allocatable.get(resource) if spec is not None else None))
            if amount is not None and amount > 0]
        ceiling = min(maxima) if maxima else None
        if floor is not None and target < floor:
            target, capped[resource] = floor, "min_allowed"
        if ceiling is not None and target > ceiling[0]:
            target, capped[resource] = ceiling[0], ceiling[1]
        if floor is not None:
            lower, upper = max(lower, floor), max(upper, floor)
        if ceiling is not None:
            lower, upper = min(lower, ceiling[0]), min(upper, ceiling[0])
        target = _round(resource, target)
        values[resource] = (target, min(_round(resource, lower), target), max(_round(resource, upper), target))
        if spec is None:
            limits[resource] = None
            continue
        limit = proportional_limit(target, spec.requests.get(resource), spec.limits.get(resource))
        node = spec.node_allocatable.get(resource)
        if limit is not None and node and limit > node:
            limit, capped[f"{resource}_limit"] = node, "node_allocatable"
        limits[resource] = None if limit is None else _round(resource, limit)
    if spec is None:
        notes.append("current requests and limits unknown (no pod of it seen yet): no limit recommended")
    else:
        notes += [f"no {resource} limit: the container sets none" for resource in RESOURCES
                  if not spec.limits.get(resource)]
        if spec.gpu_requests:
            notes.append(gpu_note(spec.gpu_requests))
    enough = est.confidence >= settings.min_confidence
    return Recommendation(
        *key, *values["cpu"], *values["memory"], est.confidence, samples, first, last, est.oom_bumped,
        status=OK if enough else NOT_ENOUGH_HISTORY, message="" if enough else history_text(samples, first, last),
        cpu_limit_cores=limits["cpu"], memory_limit_bytes=limits["memory"], capped_by=capped,
        current_requests=spec.requests if spec is not None else None,
        current_limits=spec.limits if spec is not None else None, queue=queue, notes=notes,
        gpu_requests=dict(spec.gpu_requests) if spec is not None else {})
