"""Queue families (cluster-scoped: emitted by shard 0 only), and the per-queue aggregates derived
from pods and jobs, which every shard emits for the objects it owns."""

from __future__ import annotations

from collections.abc import Collection

from volcano_monitor.core.exposition import Family, resource_labels
from volcano_monitor.core.model import Queue

Q = ("queue",)

INFO = Family("volcano_queue_info", "Information about a Queue and its place in the hierarchy (priority: "
              "spec.priority, v1.10+; dequeue_strategy: spec.dequeueStrategy, v1.14+, empty when absent).",
              ("queue", "parent", "reclaimable", "priority", "dequeue_strategy"))
WEIGHT = Family("volcano_queue_spec_weight", "The Queue's weight for proportional sharing.", Q)
PRIORITY = Family("volcano_queue_spec_priority",
                  "The Queue's priority (spec.priority, v1.10+; 0 when absent): higher queues are served and "
                  "reclaim first.", Q)
CAPABILITY = Family("volcano_queue_spec_capability", "Upper limit of resources the Queue may use.",
                    resource_labels("queue"))
GUARANTEE = Family("volcano_queue_spec_guarantee", "Resources reserved for the Queue.", resource_labels("queue"))
DESERVED = Family("volcano_queue_spec_deserved", "Resources the Queue deserves (may be shared and reclaimed).",
                  resource_labels("queue"))
ALLOCATED = Family("volcano_queue_status_allocated", "Resources allocated to the Queue's pods now.",
                   resource_labels("queue"))
STATE = Family("volcano_queue_status_state", "The Queue's state (1 for the current one).", ("queue", "state"))
FAMILIES = (INFO, WEIGHT, PRIORITY, CAPABILITY, GUARANTEE, DESERVED, ALLOCATED, STATE)

# Counted by the exporter from the PodGroups (every shard watches all of them), emitted by shard 0:
# Volcano stopped writing these counts into Queue status (v1.12 writes `allocated` and `state` only).
PODGROUP_PHASES = ("pending", "running", "inqueue", "completed", "unknown")
PODGROUPS = Family("volcano_queue_status_podgroups",
                   "PodGroups in the Queue by phase (pending/running/inqueue/completed/unknown), counted from the "
                   "PodGroups themselves: recent Volcano releases no longer write these counts into Queue status.",
                   ("queue", "phase"))
COUNTED = (PODGROUPS,)

# Kept by exporter.waiting from the waiting PodGroups (every shard keeps them all), emitted by shard 0.
OLDEST_WAITING = Family(
    "volcano_queue_oldest_waiting_job_created_timestamp_seconds",
    "Creation time of the PodGroup of the queue's longest-waiting job (a Volcano Job or another operator's "
    "PodGroup that has not started); `time() - this` is how long the oldest one has waited (Kueue's starvation "
    "signal). A timestamp rather than an age, so that it is exact at any scrape. Absent while none waits.", Q)
WAITING = (OLDEST_WAITING,)

# Derived from pods and jobs, updated incrementally on every event.
POD_REQUESTS = Family("volcano_queue_pod_requests",
                      "Sum of the requests of the Queue's pending / running pods (per exporter shard).",
                      resource_labels("queue", "phase"))
JOBS = Family("volcano_queue_jobs", "Number of Volcano Jobs in the Queue by phase (per exporter shard).",
              ("queue", "phase"))
DERIVED = (POD_REQUESTS, JOBS)


def render_oldest_waiting(queue: str, created: float) -> str:
    return OLDEST_WAITING.line((queue,), created)


def render(queue: Queue) -> tuple[str, ...]:
    name = queue.name
    reclaimable = "" if queue.reclaimable is None else str(queue.reclaimable).lower()
    return (
        INFO.line((name, queue.parent, reclaimable, str(queue.priority), queue.dequeue_strategy), 1),
        WEIGHT.line((name,), queue.weight),
        PRIORITY.line((name,), queue.priority),
        CAPABILITY.resource_lines((name,), queue.capability),
        GUARANTEE.resource_lines((name,), queue.guarantee),
        DESERVED.resource_lines((name,), queue.deserved),
        ALLOCATED.resource_lines((name,), queue.allocated, cache=False),
        STATE.line((name, queue.state), 1) if queue.state else "",
    )


def podgroup_phase_label(phase: str) -> str:
    """A PodGroup phase as `volcano_queue_status_podgroups` counts it: a group with no status yet is pending."""
    label = phase.lower() if phase else "pending"
    return label if label in PODGROUP_PHASES else "unknown"


def podgroup_lines(counts: dict[tuple[str, str], int], queues: Collection[str]) -> str:
    """Every known queue with all five phases (0 included, so a panel shows zero, not "no data"), plus
    queues that PodGroups name but that do not exist (their groups wait for nothing)."""
    names = set(queues).union(queue for queue, _ in counts)
    return "".join(PODGROUPS.line((queue, phase), counts.get((queue, phase), 0))
                   for queue in sorted(names) for phase in PODGROUP_PHASES
                   if queue in queues or counts.get((queue, phase)))
