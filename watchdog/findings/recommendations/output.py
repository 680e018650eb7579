"""Recommendations as `volcano-watchdog recommend -o table|csv|json|yaml` prints them, in the manner of
krr's formats: a table for people, csv for spreadsheets, json for programs, yaml for patches.

The yaml is one document per workload: its key, then `patch`, the JSON merge patch body of a Volcano Job
(`spec.tasks[].template.spec.containers[].resources`) for the containers that have enough history.
Why not for `kubectl patch --type merge` on a live Job (docs/watchdog.md): a merge patch replaces a list
as a whole (a CRD has no strategic merge), so `spec.tasks` would lose every image, command and replica
count not in the patch; and Volcano's admission webhook refuses any change to a live Job's spec but
minAvailable and tasks[*].replicas (`kubectl patch --local -f job.yaml` replaces the file's lists alike). A
Job's resources change by re-submitting it: merge `patch` into the Job's manifest by task and container
name (the keys Kubernetes merges pod containers by), then create the Job.
Below `min_confidence` a workload's containers are listed under `not_patched` with the reason, never
patched; a container whose current limits are unknown gets requests only. GPUs are never in a patch (whole,
HAMi or Volcano vGPU: see watchdog.findings.recommendations.policy): a container holding any is listed under
`gpu_kept` with its GPU resources, which the merged patch leaves as they are; the table's note says "GPU kept".
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

import yaml

from volcano_monitor.watchdog.findings.recommendations.policy import Recommendation

__all__ = ["OUTPUTS", "format_cpu", "format_memory", "render", "workload_patches"]

OUTPUTS = ("table", "csv", "json", "yaml")


def format_cpu(cores: float) -> str:
    return f"{math.ceil(round(cores * 1000, 6))}m"


def format_memory(value: float) -> str:
    mib = value / 2**20
    if mib < 1024:
        return f"{math.ceil(round(mib, 6))}Mi"
    return f"{math.ceil(round(mib / 1024 * 100, 6)) / 100:g}Gi"


def mebibytes(value: float) -> str:
    """Memory for a patch, rounded up to a MiB: `format_memory`'s 0.01Gi steps would bend a 1.5 limit/request
    ratio by up to half a percent (both rounded up on their own)."""
    return f"{math.ceil(round(value / 2**20, 6))}Mi"


def resources(rec: Recommendation) -> dict[str, dict[str, str]]:
    """The container's `resources` to set: requests, and the limits the policy gives (none: left out)."""
    out: dict[str, dict[str, str]] = {"requests": {"cpu": format_cpu(rec.cpu_target_cores),
                                                   "memory": mebibytes(rec.memory_target_bytes)}}
    limits = {}
    if rec.cpu_limit_cores is not None:
        limits["cpu"] = format_cpu(rec.cpu_limit_cores)
    if rec.memory_limit_bytes is not None:
        limits["memory"] = mebibytes(rec.memory_limit_bytes)
    if limits:
        out["limits"] = limits
    return out


def job_patch(recs: Sequence[Recommendation]) -> dict[str, Any]:
    """A Job's merge patch body for these (patchable) containers, tasks and containers in name order."""
    tasks: dict[str, list[Recommendation]] = {}
    for rec in recs:
        tasks.setdefault(rec.task, []).append(rec)
    return {"spec": {"tasks": [
        {"name": task, "template": {"spec": {"containers": [
            {"name": r.container, "resources": resources(r)} for r in sorted(rs, key=lambda r: r.container)]}}}
        for task, rs in sorted(tasks.items())]}}


def workload_patches(recommendations: Sequence[Recommendation]) -> list[dict[str, Any]]:
    """One document per workload: the patch of its containers with enough history, the others' reasons."""
    workloads: dict[tuple[str, str], list[Recommendation]] = {}
    for rec in recommendations:
        workloads.setdefault((rec.namespace, rec.workload), []).append(rec)
    docs = []
    for (namespace, workload), recs in sorted(workloads.items()):
        good = [r for r in recs if r.patchable]
        doc: dict[str, Any] = {"namespace": namespace, "workload": workload}
        if good:
            doc["patch"] = job_patch(good)
        capped = {f"{r.task}/{r.container}": dict(r.capped_by) for r in good if r.capped_by}
        if capped:
            doc["capped_by"] = capped
        kept = {f"{r.task}/{r.container}": dict(r.gpu_requests) for r in recs if r.gpu_requests}
        if kept:
            doc["gpu_kept"] = kept
        skipped = {f"{r.task}/{r.container}": r.message for r in recs if not r.patchable}
        if skipped:
            doc["not_patched"] = skipped
        docs.append(doc)
    return docs


def _limit(rec: Recommendation, value: float | None, fmt: Any) -> str:
    if value is not None:
        return str(fmt(value))
    return "?" if rec.current_limits is None else "-"


def _rows(recommendations: Sequence[Recommendation]) -> list[tuple[str, ...]]:
    """Both human formats' cells: amounts as Kubernetes quantities, a range for the bounds."""
    return [(r.namespace, r.workload, r.task or "-", r.container,
             format_cpu(r.cpu_target_cores) if r.patchable else "-", _limit(r, r.cpu_limit_cores, format_cpu)
             if r.patchable else "-", f"{format_cpu(r.cpu_lower_cores)}-{format_cpu(r.cpu_upper_cores)}",
             format_memory(r.memory_target_bytes) if r.patchable else "-",
             _limit(r, r.memory_limit_bytes, format_memory) if r.patchable else "-",
             f"{format_memory(r.memory_lower_bytes)}-{format_memory(r.memory_upper_bytes)}", f"{r.confidence:.2f}",
             str(r.samples), ",".join(f"{k}={v}" for k, v in sorted(r.capped_by.items())),
             "; ".join(([r.message] if r.message else []) + (["OOM bump"] if r.oom_bumped else [])
                       + (["GPU kept"] if r.gpu_requests else [])))
            for r in recommendations]


HEADER = ("NAMESPACE", "WORKLOAD", "TASK", "CONTAINER", "CPU", "CPU LIMIT", "CPU RANGE", "MEMORY", "MEMORY LIMIT",
          "MEMORY RANGE", "CONFIDENCE", "SAMPLES", "CAPPED BY", "NOTE")


def render(recommendations: list[Recommendation], output: str) -> str:
    """"table" for people (CPU in millicores, memory in Mi/Gi, rounded up; `-` for no limit, `?` for a limit
    that cannot be known); "csv" the same cells; "json" the objects in base units (cores, bytes, ISO 8601
    times); "yaml" the patches per workload (module docstring)."""
    if output == "json":
        return json.dumps([r.to_dict() for r in recommendations], indent=2, ensure_ascii=False) + "\n"
    if output == "yaml":
        head = ("# volcano-watchdog recommend: one document per workload. `patch` is a Volcano Job merge patch body\n"
                "# (spec.tasks[].template.spec.containers[].resources): merge it into the Job's manifest by task and\n"
                "# container name and re-submit; `kubectl patch --type merge` on a live Job would replace spec.tasks\n"
                "# whole (docs/watchdog.md).\n")
        return head + str(yaml.safe_dump_all(workload_patches(recommendations), sort_keys=False, allow_unicode=True,
                                             explicit_start=True))
    if output == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([h.lower().replace(" ", "_") for h in HEADER])
        writer.writerows(_rows(recommendations))
        return out.getvalue()
    if output != "table":
        raise ValueError(f"unknown output format {output!r}: use {', '.join(OUTPUTS)}")
    if not recommendations:
        return "no recommendations yet: no usage history stored\n"
    lines = [HEADER, *_rows(recommendations)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() + "\n"
                   for line in lines)
