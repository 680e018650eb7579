"""GpuStranded (periodic, per node): "GPU machines used as CPU machines" — a node has free GPUs that no GPU
pod can use, because pods that request no GPU hold its CPU or memory.

A GPU pod of the cluster's typical shape needs `cpu_per_gpu` cores and `memory_per_gpu` bytes per GPU
(default 4 cores, 16 GiB). On a Ready, schedulable node with GPUs, from the requests of the pods bound
to it and not finished:
    usable(cpu, memory) = min(free GPUs, free cpu / cpu_per_gpu, free memory / memory_per_gpu), whole GPUs
    stranded = usable(free + what the CPU-only pods hold) - usable(free)
that is, the free GPUs the CPU-only pods keep from being used. An idle GPU node (free GPUs, CPU and
memory) strands nothing: usable(free) is every free GPU. Neither does a node whose CPU is held by GPU
pods: the CPU-only pods hold nothing there. The count is the gauge
`volcano_watchdog_node_stranded_gpus{node}` (0 for the other GPU nodes).

GPUs are physical cards (`watchdog.state.nodes.gpu_cards`: GPU feature discovery's count, the device
plugin's annotations, then allocatable), never a HAMi node's vGPU slots (4 cards split 10 ways are 4 GPUs,
not 40), and a pod holds its share of them (`core.gpushare`): four pods at 25 % hold one card between them.
Free GPUs are the cards minus the shares, so a card shared by pods is not free; which card a share sits on
is not known here, so two quarter pods on two cards count as half a card taken, and the floor of whole free
GPUs may then count one card more than is wholly free (at most one per partly used card).

A node stranding GPUs for `window_seconds` fires; the alert names the CPU-only pods (largest first) and
their queues, and its severity grows with the episode's stranded GPU-hours (the integral of the count
over the checks; info, then warning, then critical). The integral lives in memory and in the alert's
details: a replica taking over as leader (or a restart) continues from the stored value rather than
starting at zero. Pods the watchdog does not watch (not Volcano's) are not counted: see
`watchdog.state.nodes.NodePodCache`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from volcano_monitor.core.exposition import Family
from volcano_monitor.core.model import Node, res_get
from volcano_monitor.watchdog.findings.detectors.settings import GpuStrandedSettings
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.state.nodes import NodePod, NodeTable, gpu_cards
from volcano_monitor.watchdog.state.signals import GPU_STRANDED, Signal, fingerprint

__all__ = ["GpuStrandedDetector", "NodeLoad", "node_load", "render_stranded_metrics", "stranded_gpus", "usable_gpus"]

NODE_STRANDED_GPUS = Family("volcano_watchdog_node_stranded_gpus",
                            "Free physical GPUs (cards, not vGPU slots) of a Ready, schedulable GPU node that no GPU "
                            "pod of the configured shape can "
                            "use because pods requesting no GPU hold its CPU or memory (GpuStranded); 0 for the "
                            "other GPU nodes. Served by the leader, which runs the check.", ("node",))


EPSILON = 1e-9
MAX_STEP_SECONDS = 300.0  # a gap between checks (no leader, database down) counts at most this much


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A GPU node's free amounts and what its CPU-only pods hold, from requests."""

    node: str
    gpus: float  # physical cards (`watchdog.state.nodes.gpu_cards`), not vGPU slots
    free_gpus: float
    free_cpu: float
    free_memory: float
    cpu_only_cpu: float
    cpu_only_memory: float
    cpu_only_pods: tuple[NodePod, ...]


def node_load(node: Node, pods: list[NodePod], cards: float | None = None) -> NodeLoad:
    """`cards`: the node's physical GPUs when already read (`NodeTable.gpus`), else read from `node`."""
    cpu_only = tuple(p for p in pods if p.gpu_request <= 0)
    cards = gpu_cards(node) if cards is None else cards
    return NodeLoad(
        node=node.name, gpus=cards,
        free_gpus=max(0.0, cards - sum(p.gpu_request for p in pods)),
        free_cpu=res_get(node.allocatable, "cpu") - sum(p.cpu_request for p in pods),
        free_memory=res_get(node.allocatable, "memory") - sum(p.memory_request for p in pods),
        cpu_only_cpu=sum(p.cpu_request for p in cpu_only), cpu_only_memory=sum(p.memory_request for p in cpu_only),
        cpu_only_pods=cpu_only)


def usable_gpus(free_gpus: float, free_cpu: float, free_memory: float, settings: GpuStrandedSettings) -> int:
    """Whole free GPUs that GPU pods of the typical shape could still get."""
    return max(0, min(math.floor(free_gpus + EPSILON), math.floor(free_cpu / settings.cpu_per_gpu + EPSILON),
                      math.floor(free_memory / settings.memory_per_gpu + EPSILON)))


def stranded_gpus(load: NodeLoad, settings: GpuStrandedSettings) -> int:
    """Free GPUs that the node's CPU-only pods keep from being used."""
    now = usable_gpus(load.free_gpus, load.free_cpu, load.free_memory, settings)
    without = usable_gpus(load.free_gpus, load.free_cpu + load.cpu_only_cpu,
                          load.free_memory + load.cpu_only_memory, settings)
    return max(0, without - now)


@dataclass
class _Episode:
    since: float
    last: float
    gpu_seconds: float


class GpuStrandedDetector:
    KINDS = frozenset({GPU_STRANDED})

    def __init__(self, settings: GpuStrandedSettings, nodes: NodeTable, index: ClusterIndex) -> None:
        self.settings = settings
        self.nodes = nodes
        self.index = index
        self.stranded: dict[str, int] = {}  # GPU node -> stranded GPUs at the last check (the gauge)
        self._episodes: dict[str, _Episode] = {}

    def check(self, session: Session, now: datetime) -> list[Signal]:
        ts = now.timestamp()
        pods = self.nodes.pods.by_node(self.index, ts)
        loads = []
        for n in self.nodes.nodes():
            gpus = self.nodes.gpus(n.name)
            cards = gpus.cards if gpus is not None else gpu_cards(n)
            if cards > 0 and n.ready and not n.unschedulable:
                loads.append(node_load(n, pods.get(n.name, []), cards))
        counts = {load.node: stranded_gpus(load, self.settings) for load in loads}
        self.stranded = counts
        for name in [n for n in self._episodes if not counts.get(n)]:
            del self._episodes[name]  # the cause went away: the next one is a new episode
        missing = [name for name, count in counts.items() if count and name not in self._episodes]
        stored = self._stored_episodes(session) if missing else {}
        signals = []
        for load in loads:
            count = counts[load.node]
            if not count:
                continue
            episode = self._episodes.get(load.node)
            if episode is None:
                episode = self._episodes[load.node] = stored.get(load.node) or _Episode(ts, ts, 0.0)
            episode.gpu_seconds += count * min(max(ts - episode.last, 0.0), MAX_STEP_SECONDS)
            episode.last = ts
            signals.append(self._signal(load, count, episode))
        return signals

    @staticmethod
    def _stored_episodes(session: Session) -> dict[str, _Episode]:
        """Open GpuStranded alerts: where another leader (or this one before a restart) left the integral."""
        out: dict[str, _Episode] = {}
        for alert in session.scalars(select(Alert).where(Alert.kind == GPU_STRANDED, Alert.state != "resolved")):
            details = alert.details if isinstance(alert.details, dict) else {}
            node, hours = details.get("node"), details.get("stranded_gpu_hours")
            last = details.get("measured_at")
            if not isinstance(node, str) or not isinstance(hours, int | float) or not isinstance(last, int | float):
                continue
            started = alert.started_at if alert.started_at.tzinfo else alert.started_at.replace(tzinfo=UTC)
            out[node] = _Episode(started.timestamp(), float(last), float(hours) * 3600.0)
        return out

    def _severity(self, gpu_hours: float) -> str:
        if gpu_hours >= self.settings.critical_gpu_hours:
            return "critical"
        return "warning" if gpu_hours >= self.settings.warning_gpu_hours else "info"

    def _signal(self, load: NodeLoad, count: int, episode: _Episode) -> Signal:
        gpu_hours = episode.gpu_seconds / 3600.0
        ranked = sorted(load.cpu_only_pods, key=lambda p: (-p.cpu_request, -p.memory_request, p.namespace, p.name))
        listed = ranked[:self.settings.max_pods_listed]
        queues = sorted({p.queue for p in load.cpu_only_pods if p.queue})
        pods: list[dict[str, Any]] = [
            {"namespace": p.namespace, "pod": p.name, "queue": p.queue, "job_name": p.job_name,
             "cpu_cores": p.cpu_request, "memory_bytes": p.memory_request,
             "text": f"{p.namespace}/{p.name} (queue {p.queue or '?'}): {p.cpu_request:g} cores, "
                     f"{p.memory_request / 2**30:.3g}Gi, no GPU"} for p in listed]
        names = ", ".join(f"{p.namespace}/{p.name}" for p in listed[:3])
        more = f" and {len(ranked) - 3} more" if len(ranked) > 3 else ""
        return Signal(
            kind=GPU_STRANDED, fingerprint=fingerprint(GPU_STRANDED, load.node), active=True,
            severity=self._severity(gpu_hours), queue=queues[0] if len(queues) == 1 else "", subject=load.node,
            summary=(f"Node {load.node}: {count} of its {load.free_gpus:g} free GPUs unusable, CPU-only pods hold "
                     f"{load.cpu_only_cpu:g} cores and {load.cpu_only_memory / 2**30:.3g}Gi ({names}{more}; "
                     f"queues {', '.join(queues) or '?'}); {gpu_hours:.1f} GPU-hours stranded"),
            details={"node": load.node, "stranded_gpus": count, "gpus": load.gpus, "free_gpus": load.free_gpus,
                     "free_cpu_cores": round(load.free_cpu, 3), "free_memory_bytes": load.free_memory,
                     "cpu_per_gpu": self.settings.cpu_per_gpu, "memory_per_gpu": self.settings.memory_per_gpu,
                     "stranded_gpu_hours": round(gpu_hours, 4), "measured_at": episode.last,
                     "queues": queues, "cpu_only_pod_count": len(ranked), "pods": pods},
            for_seconds=self.settings.window_seconds,
            since=datetime.fromtimestamp(episode.since, UTC),
        )


def render_stranded_metrics(detector: GpuStrandedDetector | None) -> str:
    """`volcano_watchdog_node_stranded_gpus` from the last check (no series before one, or with the detector off)."""
    if detector is None:
        return ""
    counts = dict(detector.stranded)  # replaced whole by each check: a consistent snapshot
    return NODE_STRANDED_GPUS.header + "".join(NODE_STRANDED_GPUS.line((node,), count)
                                               for node, count in sorted(counts.items()))
