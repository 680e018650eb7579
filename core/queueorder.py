"""A waiting job's place in its queue: the order in which Volcano v1.12's scheduler takes the jobs of one queue.

Shared by the exporter (`volcano_job_queue_position`) and the watchdog (`position` and `ahead` in
`GET /api/v1/jobs/{uid}/why`), so both say the same. Pure functions over the PodGroups both hold.

The order, as read in Volcano's source (v1.12):
- `enqueue` and `allocate` (pkg/scheduler/actions/) keep each queue's jobs in a priority queue ordered by
  `Session.JobOrderFn` (pkg/scheduler/framework/session_plugins.go): the job-order functions of the
  enabled plugins, tier by tier, the first that tells two jobs apart decides; when none does, the older
  PodGroup (`JobInfo.CreationTimestamp`, set from the PodGroup in `SetPodGroup`,
  pkg/scheduler/api/job_info.go) comes first, then the smaller job ID (`<namespace>/<podgroup name>`,
  `getJobID` in pkg/scheduler/cache).
- With the default configuration (tiers `priority, gang, conformance` / `drf, predicates, proportion,
  nodeorder, binpack`; the recordings' too) three plugins order jobs:
  1. `priority` (plugins/priority/priority.go): the higher job priority first. A job's priority is the
     value of the PriorityClass its PodGroup names (`spec.priorityClassName`, which the job controller
     copies from the Job); a name with no such class, or none, gets the cluster's `globalDefault` class's
     value, or 0 without one (`cloneJob` in pkg/scheduler/cache/cache.go).
  2. `gang` (plugins/gang/gang.go): a job not yet Ready (fewer ready tasks than minAvailable) before a
     Ready one. Every waiting job is not Ready, so it never tells two of them apart: left out.
  3. `drf` (plugins/drf/drf.go): the smaller dominant share of what the job has allocated first. A
     waiting job has nothing allocated (share 0), so it never tells two of them apart either: left out.
  4. The fallback: PodGroup creation time (seconds, as the API server writes it), then the job ID.

Position is the order of taking, not of starting: `enqueue` pops the queue's jobs in this order and
admits each that fits, skipping, not waiting for, one that does not (recorded `queue-order`: `small`,
fourth in line, starts beside the running job while `big`, ahead of it, waits for room). Only PodGroups
count: the scheduler sees jobs through them, so a Volcano Job whose PodGroup is not created yet has no
place. Queue priority and `dequeueStrategy` order queues against each other, not jobs within one queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from volcano_monitor.core.fields import boolean, integer, read_meta, root
from volcano_monitor.core.model import PodGroup


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """A ``scheduling.k8s.io/v1`` PriorityClass: what the scheduler needs of it."""

    name: str
    value: int
    global_default: bool


def parse_priority_class(raw: object) -> PriorityClass:
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    return PriorityClass(meta[1], integer(d, "value", "", probs), bool(boolean(d, "globalDefault", "", probs)))


class Priorities:
    """The cluster's PriorityClasses as the scheduler's cache keeps them: values by name, and the
    `globalDefault` one (the last seen wins, as in Volcano's `addPriorityClass`)."""

    def __init__(self) -> None:
        self.classes: dict[str, PriorityClass] = {}
        self.default: PriorityClass | None = None

    def on_class(self, priority_class: PriorityClass, deleted: bool) -> bool:
        """Apply an event; True when a job's priority may have changed (a value or the default did)."""
        old = self.classes.get(priority_class.name)
        if deleted:
            if old is None:
                return False
            del self.classes[priority_class.name]
            if self.default is not None and self.default.name == old.name:
                self.default = None
            return True
        self.classes[priority_class.name] = priority_class
        if priority_class.global_default:
            self.default = priority_class
        elif self.default is not None and self.default.name == priority_class.name:
            self.default = None
        return old != priority_class

    def value(self, class_name: str) -> int:
        found = self.classes.get(class_name) if class_name else None
        if found is not None:
            return found.value
        return self.default.value if self.default is not None else 0


SortKey = tuple[int, float, str]


def sort_key(group: PodGroup, priority: int) -> SortKey:
    """Ascending = the scheduler's order: higher priority, then older PodGroup, then smaller job ID.
    A group without a creation time (not from an API server) sorts last among its priority."""
    created = group.creation_timestamp if group.creation_timestamp is not None else float("inf")
    return -priority, created, f"{group.namespace}/{group.name}"


@dataclass(frozen=True, slots=True)
class Place:
    """A waiting group's place: `position` (1 = next) of `size` waiting in the queue."""

    group: PodGroup
    priority: int
    position: int
    size: int


def rank(groups: Iterable[PodGroup], priorities: Priorities | Mapping[str, int]) -> list[Place]:
    """The waiting PodGroups of one queue in the order the scheduler takes them. `priorities`: the cluster's
    classes, or plain values by class name (a missing name is 0)."""
    def value(name: str) -> int:
        if isinstance(priorities, Priorities):
            return priorities.value(name)
        return priorities.get(name, 0)

    keyed = sorted(((sort_key(g, value(g.priority_class)), g) for g in groups), key=lambda pair: pair[0])
    return [Place(g, -key[0], i + 1, len(keyed)) for i, (key, g) in enumerate(keyed)]
