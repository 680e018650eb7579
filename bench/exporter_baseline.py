"""bench/exporter.py's baseline: the same series as the exporter's, written as a prometheus_client exporter
usually is (`NaiveCollector`, every sample built at collect time), and the parse that compares the two bodies
(`samples`, `same_series`) for `series_identical`. Its scrape is timed in bench/exporter.py (`naive_scrape`).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from volcano_monitor.core.exposition import Family, format_value
from volcano_monitor.core.model import Job, Pod, PodGroup, Queue
from volcano_monitor.core.pending import Explanation, explain, group_waiting, is_job_group, job_waiting
from volcano_monitor.core.podrequests import Resources
from volcano_monitor.core.quantity import resource_label_and_unit
from volcano_monitor.exporter.families import job as job_families
from volcano_monitor.exporter.families import pod as pod_families
from volcano_monitor.exporter.families import podgroup as podgroup_families
from volcano_monitor.exporter.families import queue as queue_families
from volcano_monitor.exporter.families import queue_wait


class NaiveCollector:
    """How a prometheus_client exporter is usually written: every sample derived from the parsed views at
    collect time (labels and values as DESIGN §4 and exporter/families define them; queue sums by a scan)."""

    def __init__(self, jobs: list[Job], groups: list[PodGroup], pods: list[Pod], queues: list[Queue]) -> None:
        self.jobs, self.groups, self.pods, self.queues = jobs, groups, pods, queues

    def collect(self) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
        gauges: dict[str, GaugeMetricFamily] = {}

        def g(family: Family, labels: tuple[str, ...], value: float | None) -> None:
            if value is None:
                return
            gauge = gauges.get(family.name)
            if gauge is None:
                gauge = gauges[family.name] = GaugeMetricFamily(family.name, family.help, labels=family.labels)
            gauge.add_metric(labels, value)

        def res(family: Family, labels: tuple[str, ...], resources: Resources) -> None:
            for name, amount in resources:
                g(family, (*labels, *resource_label_and_unit(name)), amount)

        def since(end: float | None, start: float | None) -> float | None:
            return None if end is None or start is None else end - start

        jf, gf, pf, qf = job_families, podgroup_families, pod_families, queue_families
        job_phases: dict[tuple[str, str], int] = defaultdict(int)
        for j in self.jobs:
            ns, name, key = j.namespace, j.name, (j.namespace, j.name)
            g(jf.INFO, (ns, name, j.uid, j.queue, j.scheduler_name, j.priority_class, j.podgroup), 1)
            for family, value in ((jf.CREATED, j.creation_timestamp), (jf.STARTED, j.start_time),
                                  (jf.RETRIES, j.retry_count), (jf.MAX_RETRY, j.max_retry),
                                  (jf.MIN_AVAILABLE, j.min_available)):
                g(family, key, value)
            g(jf.COMPLETED, (ns, name, j.finish_phase), j.finish_time)
            g(jf.WAITED, (ns, name, j.queue), since(j.start_time, j.creation_timestamp))
            g(jf.RAN, (ns, name, j.queue), since(j.finish_time, j.start_time))
            g(jf.PHASE, (ns, name, j.queue, j.phase), 1 if j.phase else None)
            for state in ("pending", "running", "succeeded", "failed", "terminating", "unknown"):
                g(jf.PODS, (ns, name, state), getattr(j, state))
            res(jf.REQUESTS, (ns, name, j.queue), j.requests)
            for task in j.tasks:
                g(jf.TASK_REPLICAS, (ns, name, task.name), task.replicas)
            for task_name, phases in j.task_status_counts:
                for phase, count in phases:
                    g(jf.TASK_PODS, (ns, name, task_name, phase), count)
            if j.phase:
                job_phases[j.queue, j.phase] += 1
        for p in self.groups:
            ns, name, key = p.namespace, p.name, (p.namespace, p.name)
            g(gf.INFO, (ns, name, p.queue, p.job_name, p.job_kind, p.priority_class), 1)
            g(gf.PHASE, (ns, name, p.queue, p.phase), 1 if p.phase else None)
            g(gf.MIN_MEMBER, key, p.min_member)
            res(gf.MIN_RESOURCES, key, p.min_resources)
            for state in ("running", "succeeded", "failed"):
                g(gf.PODS, (ns, name, state), getattr(p, state))
            for c in p.conditions:
                g(gf.CONDITION, (ns, name, c.type, c.status, c.reason), 1)
                g(gf.CONDITION_TIME, (ns, name, c.type), c.last_transition_time)
        owners = {(p.namespace, p.name): p for p in self.groups}
        queues = {q.name: q for q in self.queues}

        def why(namespace: str, job_name: str, found: Explanation) -> None:
            resource = resource_label_and_unit(found.resource)[0] if found.resource else ""
            g(jf.PENDING_REASON, (namespace, job_name, found.queue, found.reason, resource), 1)

        for j in self.jobs:
            group = owners.get((j.namespace, j.podgroup))
            if job_waiting(j) and (group is None or group_waiting(group)):
                why(j.namespace, j.name, explain(group.queue if group else j.queue, queues, group, j))
        for p in self.groups:
            if group_waiting(p) and not is_job_group(p):
                why(p.namespace, p.owner_name or p.name, explain(p.queue, queues, p))
        pod_requests: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for pod in self.pods:
            queue, job_name, job_kind = pod.queue, pod.job_name, pod.job_kind
            owner = owners.get((pod.namespace, pod.podgroup)) if pod.podgroup else None
            if owner is not None and (not queue or not job_name):
                queue = queue or owner.queue
                if not job_name:
                    job_name, job_kind = owner.job_name, owner.job_kind
            ns, name = pod.namespace, pod.name
            g(pf.INFO, (ns, name, pod.uid, job_name, job_kind, pod.task, queue, pod.podgroup, pod.node_name), 1)
            res(pf.REQUESTS, (ns, name, queue, job_name, pod.task), pod.requests)
            g(pf.PHASE, (ns, name, queue, pod.phase), 1 if pod.phase else None)
            if pod.phase in ("Pending", "Running"):
                for resource, amount in pod.requests:
                    pod_requests[queue, pod.phase.lower()][resource] += amount
        group_phases: dict[tuple[str, str], int] = defaultdict(int)  # derived: Queue status lacks the counts
        for p in self.groups:
            group_phases[p.queue, qf.podgroup_phase_label(p.phase)] += 1
        for q in self.queues:
            reclaimable = "" if q.reclaimable is None else str(q.reclaimable).lower()
            g(qf.INFO, (q.name, q.parent, reclaimable), 1)
            g(qf.WEIGHT, (q.name,), q.weight)
            for family, resources in ((qf.CAPABILITY, q.capability), (qf.GUARANTEE, q.guarantee),
                                      (qf.DESERVED, q.deserved), (qf.ALLOCATED, q.allocated)):
                res(family, (q.name,), resources)
            g(qf.STATE, (q.name, q.state), 1 if q.state else None)
            for phase in ("pending", "running", "inqueue", "completed", "unknown"):
                g(qf.PODGROUPS, (q.name, phase), group_phases[q.name, phase])
        for (queue, phase), sums in pod_requests.items():
            res(qf.POD_REQUESTS, (queue, phase), tuple(sums.items()))
        for (queue, phase), count in job_phases.items():
            g(qf.JOBS, (queue, phase), count)
        yield from gauges.values()
        # The wait / run histograms: a series per queue and priority class of the Jobs seen, empty here (the
        # bench's Jobs started before the exporter did).
        series = sorted({(j.queue, j.priority_class) for j in self.jobs})
        for family in queue_wait.FAMILIES:
            histogram = HistogramMetricFamily(family.name, family.help, labels=family.labels)
            for labels in series:
                histogram.add_metric(labels, [(str(b), 0) for b in queue_wait.BUCKETS] + [("+Inf", 0)], 0)
            yield histogram


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples by (name, sorted labels): prometheus_client writes label names sorted."""
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            name, _, labels = series.partition("{")
            pairs = LABEL.findall(labels)
            if name.endswith("_bucket"):  # prometheus_client writes le="1.0", we write le="1": same bound
                pairs = [(k, format_value(float(v)) if k == "le" and v != "+Inf" else v) for k, v in pairs]
            out[name, tuple(sorted(pairs))] = float(value)
    return out


def same_series(ours: dict[Any, float], theirs: dict[Any, float]) -> bool:
    return ours.keys() == theirs.keys() and all(math.isclose(v, theirs[k], rel_tol=1e-9) for k, v in ours.items())
