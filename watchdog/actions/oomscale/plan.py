"""What to resubmit: pure functions from a failed Job (as the API server has it), the containers
its pods lost to the OOM killer and the settings, to the new Job or the reason there is none.

The new memory of an OOM-killed container is max(peak x ratio, request x ratio, request +
min_increase), capped by `max_memory` and by the queue's memory capability (no pod of the queue can
be given more). Request and limit both get it: the limit is what the kernel enforced, the request is
what the scheduler must find room for. Other containers and tasks keep their resources.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.watchdog.actions.oomscale.settings import OomScaleUpSettings

OPT = "volcano-monitor/oom-scale-up"  # "true": opt in, "false": opt out
SCALED_FROM = "volcano-monitor/scaled-from"  # the Job this one was resubmitted from
LINEAGE = "volcano-monitor/oom-lineage"  # the first run's name ...
LINEAGE_UID = "volcano-monitor/oom-lineage-uid"  # ... and UID
ATTEMPT = "volcano-monitor/oom-attempt"  # N of <lineage>-oom<N>
MAX_NAME = 63  # Volcano Job names become label values (volcano.sh/job-name)
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Lineage:
    namespace: str
    name: str  # the first run's Job name
    uid: str
    attempt: int  # of the resubmission to make (1 for the first run's)


@dataclass(frozen=True)
class ContainerChange:
    task: str
    container: str
    request: float  # bytes; 0: none
    limit: float  # bytes; 0: none
    peak: float  # highest working set seen (the limit at the kill, at least)
    new_memory: float
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "container": self.container, "request": self.request, "limit": self.limit,
                "peak": self.peak, "new_request": self.new_memory, "new_limit": self.new_memory, "why": self.why}


@dataclass(frozen=True)
class Plan:
    lineage: Lineage
    new_name: str
    changes: tuple[ContainerChange, ...]
    capped: bool  # no container could grow (max_memory or the queue's capability)
    body: Obj = field(default_factory=dict)  # the Job to create (empty when capped)

    def containers(self) -> dict[str, Any]:
        return {f"{c.task}/{c.container}": c.as_dict() for c in self.changes}


def annotations_of(job: Obj) -> dict[str, str]:
    found = (job.get("metadata") or {}).get("annotations") or {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}


def takes_part(namespace: str, queue: str, annotations: Mapping[str, str], settings: OomScaleUpSettings) -> bool:
    """The Job's annotation decides when it has one; else the namespace and queue lists (empty: all)."""
    opt = annotations.get(OPT, "").strip().lower()
    if opt in ("true", "false"):
        return opt == "true"
    return ((not settings.namespaces or namespace in settings.namespaces)
            and (not settings.queues or queue in settings.queues))


def lineage_of(job: Obj) -> Lineage:
    meta = job.get("metadata") or {}
    notes = annotations_of(job)
    try:
        previous = int(notes.get(ATTEMPT, "0"))
    except ValueError:
        previous = 0
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    return Lineage(str(meta.get("namespace", "")), notes.get(LINEAGE) or name, notes.get(LINEAGE_UID) or uid,
                   max(previous, 0) + 1)


def new_name(lineage: str, attempt: int) -> str:
    suffix = f"-oom{attempt}"
    return lineage[: MAX_NAME - len(suffix)].rstrip("-.") + suffix


def _memory(resources: Any, key: str) -> float:
    value = ((resources or {}).get(key) or {}).get("memory") if isinstance(resources, Mapping) else None
    try:
        return parse_quantity(value) if value is not None else 0.0
    except ValueError:
        return 0.0


def grown_memory(request: float, limit: float, peak: float, settings: OomScaleUpSettings,
                 queue_memory: float | None) -> tuple[float, str]:
    """The new memory and why; not above the caps (it may then be no more than before)."""
    base = request or limit
    wanted = max(peak * settings.ratio, base * settings.ratio, base + settings.min_increase)
    why = (f"max(peak {peak:.0f} x {settings.ratio:g}, request {base:.0f} x {settings.ratio:g}, "
           f"request + {settings.min_increase:.0f})")
    caps = [(settings.max_memory, "max_memory"), (queue_memory, "the queue's memory capability")]
    for cap, name in caps:
        if cap and wanted > cap:
            wanted, why = cap, f"{why}, capped by {name}"
    return float(int(wanted)), why


def plan(job: Obj, killed: Mapping[tuple[str, str], float], settings: OomScaleUpSettings,
         queue_memory: float | None) -> Plan:
    """The resubmission of `job`, whose `killed` (task, container) -> peak bytes were OOM-killed."""
    lineage = lineage_of(job)
    body = copy.deepcopy({"apiVersion": job.get("apiVersion", "batch.volcano.sh/v1alpha1"), "kind": "Job",
                          "spec": job.get("spec") or {}})
    changes: list[ContainerChange] = []
    for task in body["spec"].get("tasks") or ():
        for container in ((task.get("template") or {}).get("spec") or {}).get("containers") or ():
            key = (str(task.get("name", "")), str(container.get("name", "")))
            if key not in killed:
                continue
            resources = container.setdefault("resources", {})
            request, limit = _memory(resources, "requests"), _memory(resources, "limits")
            peak = max(killed[key], limit)
            memory, why = grown_memory(request, limit, peak, settings, queue_memory)
            if memory <= max(request, limit):
                why += ": no room to grow"
            changes.append(ContainerChange(key[0], key[1], request, limit, peak, memory, why))
            resources.setdefault("requests", {})["memory"] = str(int(memory))
            resources.setdefault("limits", {})["memory"] = str(int(memory))
    grows = [c for c in changes if c.new_memory > max(c.request, c.limit)]
    name = new_name(lineage.name, lineage.attempt)
    if not grows:
        return Plan(lineage, name, tuple(changes), True)
    meta = job.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    source = str(meta.get("name", ""))
    if len(source) <= MAX_NAME:
        labels[SCALED_FROM] = source
    notes = {k: v for k, v in annotations_of(job).items() if k not in DROPPED_ANNOTATIONS}
    notes |= {SCALED_FROM: source, LINEAGE: lineage.name, LINEAGE_UID: lineage.uid, ATTEMPT: str(lineage.attempt),
              "volcano-monitor/oom-scale-up-memory": json.dumps({f"{c.task}/{c.container}": int(c.new_memory)
                                                                  for c in changes}, sort_keys=True)}
    body["metadata"] = {"name": name, "namespace": lineage.namespace, "labels": labels, "annotations": notes}
    return Plan(lineage, name, tuple(changes), False, body)
