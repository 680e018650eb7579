"""NodeHot (periodic, per node): a node's used CPU or memory stays above `threshold` (default 90 %) of its
allocatable for `window_seconds`. CPU overcommit — pods using more than they request, with no limit —
makes nodes run hot while their requests look fine, and the scheduler keeps placing pods there.

Node usage is NodeMetrics (`watchdog.sources.node_metrics`, the whole node: what `kubectl top nodes`
says) or, with `source: pods` (no metrics-server), the sum of the latest usage samples of the Volcano
pods on the node — a lower bound. A node whose usage is older than `STALE_FACTOR` polls states nothing
(neither hot nor cool would be a fact): its open alert then resolves with the round, as when the node
cools down.
The alert lists the node's pods (the Volcano pods the watchdog watches) grouped by priority class and
ordered by usage, the latest the usage collectors measured, with their requests: the ones a team would
throttle or move first are the heavy users of the lowest class. Each listed pod's `gpu_request` is in
physical GPUs (`core.gpushare`: a quarter of a shared card is 0.25, not one vGPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.model import Node, res_get
from volcano_monitor.watchdog.findings.detectors.settings import NodeHotSettings
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.nodes import NodePod, NodeTable, NodeUsage
from volcano_monitor.watchdog.state.signals import NODE_HOT, Signal, fingerprint

__all__ = ["NodeHotDetector", "hot_resources"]

STALE_FACTOR = 3.0  # NodeMetrics older than this many poll intervals (+ a minute) are not judged


@dataclass(frozen=True, slots=True)
class _Ratio:
    resource: str
    used: float
    allocatable: float
    requested: float

    @property
    def ratio(self) -> float:
        return self.used / self.allocatable


def hot_resources(node: Node, usage: NodeUsage, pods: list[NodePod], threshold: float) -> list[_Ratio]:
    """The resources (cpu, memory) of `node` used above `threshold` of its allocatable."""
    out = []
    for resource, used in (("cpu", usage.cpu_cores), ("memory", usage.memory_bytes)):
        allocatable = res_get(node.allocatable, resource)
        if allocatable > 0 and used / allocatable >= threshold:
            requested = sum(p.cpu_request if resource == "cpu" else p.memory_request for p in pods)
            out.append(_Ratio(resource, used, allocatable, requested))
    return out


class NodeHotDetector:
    KINDS = frozenset({NODE_HOT})

    def __init__(self, settings: NodeHotSettings, nodes: NodeTable, index: ClusterIndex) -> None:
        self.settings = settings
        self.nodes = nodes
        self.index = index

    def check(self, now: float) -> list[Signal]:
        stale_before = now - STALE_FACTOR * self.settings.interval_seconds - 60
        pods = self.nodes.pods.by_node(self.index, now)
        usage = self.nodes.usage() if self.settings.source == "node_metrics" else self._summed(pods)
        signals = []
        for node in self.nodes.nodes():
            measured = usage.get(node.name)
            if measured is None or measured.ts < stale_before:
                continue
            on_node = pods.get(node.name, [])
            hot = hot_resources(node, measured, on_node, self.settings.threshold)
            if hot:
                signals.append(self._signal(node.name, hot, on_node))
        return signals

    def _summed(self, pods: dict[str, list[NodePod]]) -> dict[str, NodeUsage]:
        """Node usage as the sum of its pods' latest measured usage (`source: pods`), stamped with the oldest
        of those measurements. Only pods the watchdog watches count: a lower bound of the node's usage."""
        out: dict[str, NodeUsage] = {}
        for name, on_node in pods.items():
            measured = [u for u in (self.nodes.pod_usage(p.namespace, p.name) for p in on_node) if u is not None]
            if measured:
                out[name] = NodeUsage(min(u.ts for u in measured), sum(u.cpu_cores for u in measured),
                                      sum(u.memory_bytes for u in measured))
        return out

    def _signal(self, node: str, hot: list[_Ratio], pods: list[NodePod]) -> Signal:
        listed: list[tuple[NodePod, float | None, float | None]] = []
        for p in pods:
            used = self.nodes.pod_usage(p.namespace, p.name)
            listed.append((p, used.cpu_cores if used else None, used.memory_bytes if used else None))
        by_cpu = hot[0].resource == "cpu"  # rank by the hot resource (CPU first when both are)

        def rank(item: tuple[NodePod, float | None, float | None]) -> tuple[str, float, str, str]:
            amount = item[1] if by_cpu else item[2]
            return item[0].priority_class, -(amount or 0.0), item[0].namespace, item[0].name

        listed.sort(key=rank)
        classes: dict[str, dict[str, float]] = {}
        for p, cpu, memory in listed:
            group = classes.setdefault(p.priority_class or "(none)", {"pods": 0, "cpu_cores": 0.0, "memory_bytes": 0.0})
            group["pods"] += 1
            group["cpu_cores"] += cpu or 0.0
            group["memory_bytes"] += memory or 0.0
        entries: list[dict[str, Any]] = [
            {"namespace": p.namespace, "pod": p.name, "queue": p.queue, "job_name": p.job_name,
             "priority_class": p.priority_class, "cpu_used_cores": cpu, "memory_used_bytes": memory,
             "cpu_request_cores": p.cpu_request, "memory_request_bytes": p.memory_request,
             "gpu_request": p.gpu_request,
             "text": f"{p.namespace}/{p.name} [{p.priority_class or 'no priority class'}] uses "
                     + (f"{cpu:.3g} cores / {memory / 2**30:.3g}Gi" if cpu is not None and memory is not None
                        else "unknown") + f" (requests {p.cpu_request:g} cores)"}
            for p, cpu, memory in listed[:self.settings.max_pods_listed]]
        parts = ", ".join(
            f"{r.resource} {r.ratio:.0%} of allocatable used (requests {r.requested / r.allocatable:.0%})" for r in hot)
        return Signal(
            kind=NODE_HOT, fingerprint=fingerprint(NODE_HOT, node), active=True,
            severity="critical" if any(r.ratio >= 1.0 for r in hot) else "warning", subject=node,
            summary=f"Node {node} runs hot: {parts}; {len(pods)} pods on it",
            details={"node": node, "threshold": self.settings.threshold,
                     "resources": {r.resource: {"used": r.used, "allocatable": r.allocatable, "requested": r.requested,
                                                "used_ratio": round(r.ratio, 4)} for r in hot},
                     "by_priority_class": classes, "pod_count": len(pods), "pods": entries},
            for_seconds=self.settings.window_seconds,
        )
