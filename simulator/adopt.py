"""Volcano Jobs that someone else created through the API (kubectl, the watchdog's OOM auto
scale-up): the driver adopts them and plays them like its own workloads.

What a real program would do (how long it runs, how its memory grows) is not in a Job's spec, so
the simulator carries it in an annotation of its own, `sim.volcano-monitor/usage`: per task, the
runtime and the usage profile. Jobs the driver submits carry it when their workload says how much
memory the program needs; a copy of such a Job (same annotations, new resources) then behaves like
the same program with other limits — the point of testing OOM auto scale-up against it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from volcano_monitor.simulator.specs import (
    HAMI_CORES,
    HAMI_COUNT,
    HAMI_MEMORY,
    VOLCANO_CORES,
    VOLCANO_COUNT,
    VOLCANO_MEMORY,
    TaskSpec,
    VgpuRequest,
    Workload,
)
from volcano_monitor.simulator.usage import BUSY, UsageProfile

USAGE_ANNOTATION = "sim.volcano-monitor/usage"
Obj = dict[str, Any]


def usage_annotation(tasks: tuple[TaskSpec, ...]) -> str:
    """The annotation's value for these tasks: {task: {"runtime": s | null, "profile": {...}}}."""
    return json.dumps({t.name: {"runtime": t.runtime, "profile": asdict(t.profile)} for t in tasks},
                      sort_keys=True, separators=(",", ":"))


def job_annotations(workload: Workload) -> dict[str, str]:
    """A submitted Job's annotations: the workload's, plus the usage annotation when a task's program
    needs a set amount of memory (other scenario Jobs stay as recorded from real Volcano)."""
    out = dict(workload.annotations)
    if any(t.profile.memory_need is not None for t in workload.tasks):
        out[USAGE_ANNOTATION] = usage_annotation(workload.tasks)
    return out


def _profile(data: Any) -> UsageProfile:
    known = {f.name for f in fields(UsageProfile)}
    if not isinstance(data, Mapping):
        return BUSY
    return UsageProfile(**{k: v for k, v in data.items() if k in known})


def _quantity(resources: Any, name: str) -> str | None:
    value = (resources or {}).get(name) if isinstance(resources, Mapping) else None
    return None if value is None else str(value)


def task_from_spec(entry: Mapping[str, Any], usage: Mapping[str, Any]) -> TaskSpec:
    template = entry.get("template") or {}
    spec = template.get("spec") or {}
    container = (spec.get("containers") or [{}])[0]
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    name = str(entry.get("name") or "task")
    found = usage.get(name)
    hints: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    gpus = _quantity(requests, "nvidia.com/gpu") or _quantity(limits, "nvidia.com/gpu")
    request = _vgpu_request(limits, requests)
    if request is not None:
        gpus = None  # the vGPUs say it all
    return TaskSpec(
        name, int(entry.get("replicas") or 1), cpu=_quantity(requests, "cpu") or "",
        memory=_quantity(requests, "memory") or "", gpus=int(float(gpus)) if gpus else 0,
        cpu_limit=_quantity(limits, "cpu"), memory_limit=_quantity(limits, "memory"),
        image=str(container.get("image") or "busybox"), command=tuple(container.get("command") or ("sh",)),
        container=str(container.get("name") or "main"),
        runtime=hints.get("runtime", 600.0) if hints else 600.0, profile=_profile(hints.get("profile")),
        node_selector=dict(spec.get("nodeSelector") or {}), min_available=entry.get("minAvailable"),
        policies=tuple(dict(p) for p in entry.get("policies") or ()),
        restart_policy=str(spec.get("restartPolicy") or "Never"), vgpu=request)


def _int(*values: str | None) -> int | None:
    for value in values:
        if value is not None:
            try:
                return int(float(value))
            except ValueError:
                continue
    return None


def _vgpu_request(limits: Mapping[str, Any], requests: Mapping[str, Any]) -> VgpuRequest | None:
    """A sharing plugin's vGPUs: HAMi's when the container asks gpumem or gpucores, Volcano's when it asks
    any volcano.sh/vgpu-* (a plain nvidia.com/gpu stays whole cards; on a HAMi node they become vGPUs)."""
    def get(name: str) -> int | None:
        return _int(_quantity(limits, name), _quantity(requests, name))

    if get(HAMI_MEMORY) is not None or get(HAMI_CORES) is not None:
        return VgpuRequest("hami", get(HAMI_COUNT) or 1, get(HAMI_CORES), get(HAMI_MEMORY))
    if get(VOLCANO_COUNT) is not None or get(VOLCANO_MEMORY) is not None:
        return VgpuRequest("volcano-vgpu", get(VOLCANO_COUNT) or 1, get(VOLCANO_CORES), get(VOLCANO_MEMORY))
    return None


def workload_from_job(obj: Obj) -> Workload:
    """The workload an API-created Job stands for: run once (never resubmitted), named as the Job."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    try:
        usage = json.loads(annotations.get(USAGE_ANNOTATION, "{}"))
    except ValueError:
        usage = {}
    usage = usage if isinstance(usage, dict) else {}
    tasks = tuple(task_from_spec(entry, usage) for entry in spec.get("tasks") or ())
    return Workload(
        str(meta.get("name")), str(meta.get("namespace") or "default"), str(spec.get("queue") or "default"),
        tasks, "created through the API", min_available=spec.get("minAvailable"),
        max_retry=int(spec.get("maxRetry", 3)), policies=tuple(dict(p) for p in spec.get("policies") or ()),
        repeat=False, ttl_after_finished=int(spec.get("ttlSecondsAfterFinished") or 1800),
        priority_class=spec.get("priorityClassName") or None, annotations=annotations,
        network_topology=dict(spec["networkTopology"]) if isinstance(spec.get("networkTopology"), dict) else None)
