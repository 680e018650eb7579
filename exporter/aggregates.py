"""Per-queue sums of pod requests and job phases, kept by adding and subtracting each object's
contribution on every watch event, so a scrape never scans every pod and job. Amounts are integers in
nano-units, so adding and removing never drifts."""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from volcano_monitor.core.podrequests import Resources
from volcano_monitor.core.quantity import resource_label_and_unit
from volcano_monitor.exporter.cardinality import ALL, FamilyFilter
from volcano_monitor.exporter.families import queue as queue_families

__all__ = ["QueueAggregates", "QueuePhase"]

NANO = 1_000_000_000
QueuePhase = tuple[str, str]


@lru_cache(maxsize=65536)
def _nano(resources: Resources) -> tuple[tuple[str, int], ...]:
    """Resource amounts in integer nano-units; the model shares equal request tuples, so this is cached."""
    return tuple((name, round(amount * NANO)) for name, amount in resources)


class QueueAggregates:
    """Per-queue sums that would otherwise need a scan of every pod and job at scrape time."""

    POD_PHASES = {"Pending": "pending", "Running": "running"}

    def __init__(self, served: FamilyFilter = ALL) -> None:
        self.served = served
        self.pod_requests: dict[QueuePhase, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.pod_counts: dict[QueuePhase, int] = defaultdict(int)
        self.jobs: dict[QueuePhase, int] = defaultdict(int)

    def add_pod(self, queue: str, phase: str, requests: Resources, sign: int) -> None:
        label = self.POD_PHASES.get(phase)
        if label is None:
            return
        key = (queue, label)
        sums = self.pod_requests[key]
        for name, amount in _nano(requests):
            sums[name] += sign * amount
        self.pod_counts[key] += sign
        if self.pod_counts[key] == 0:
            del self.pod_counts[key], self.pod_requests[key]

    def add_job(self, queue: str, phase: str, sign: int) -> None:
        key = (queue, phase)
        self.jobs[key] += sign
        if self.jobs[key] == 0:
            del self.jobs[key]

    def write(self, out: list[bytes]) -> None:
        lines = []
        for (queue, phase), sums in sorted(self.pod_requests.items()) \
                if self.served.allows(queue_families.POD_REQUESTS.name) else ():
            for name, nano in sorted(sums.items()):
                label, unit = resource_label_and_unit(name)
                lines.append(queue_families.POD_REQUESTS.line((queue, phase, label, unit), nano / NANO))
        if lines and self.served.allows(queue_families.POD_REQUESTS.name):
            out.append(queue_families.POD_REQUESTS.header.encode())
            out.append("".join(lines).encode())
        if self.jobs and self.served.allows(queue_families.JOBS.name):
            out.append(queue_families.JOBS.header.encode())
            out.append("".join(queue_families.JOBS.line(k, n) for k, n in sorted(self.jobs.items())).encode())
