"""The job page's recommendation: a table (current request and limit, recommended request and limit, the
VPA range, which cap applied) and the YAML to merge into the Job's manifest for the next run.

What people see here they paste, so: the upper bound is only ever shown in the range, never as a limit;
limits keep the container's own limit/request ratio (none where it set none, `?` where the watchdog has
not seen its pods); and a container below `recommendations.min_confidence` shows "not enough history
(N samples over D)" and is left out of the YAML (watchdog.findings.recommendations.policy). No YAML at all when no
container has enough history.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import yaml

from volcano_monitor.watchdog.findings.recommendations.output import format_cpu, format_memory, job_patch
from volcano_monitor.watchdog.findings.recommendations.policy import Recommendation
from volcano_monitor.watchdog.views.ui.html import esc, table

HEADERS = ("task", "container", "cpu now", "cpu", "cpu limit", "cpu range", "memory now", "memory", "memory limit",
           "memory range", "confidence", "samples", "capped by", "note")


def _now(values: dict[str, float] | None, resource: str, fmt: Callable[[float], str]) -> str:
    """The container's current request / limit as the watchdog saw it: `?` unknown, `-` not set."""
    if values is None:
        return "?"
    amount = values.get(resource)
    return "-" if amount is None else fmt(amount)


def _current(rec: Recommendation, resource: str) -> str:
    fmt = format_cpu if resource == "cpu" else format_memory
    return f"{_now(rec.current_requests, resource, fmt)} / {_now(rec.current_limits, resource, fmt)}"


def _limit(rec: Recommendation, value: float | None, resource: str) -> str:
    if not rec.patchable:
        return "-"
    if value is None:
        return "?" if rec.current_limits is None else "none"
    return format_cpu(value) if resource == "cpu" else format_memory(value)


def row(rec: Recommendation) -> list[str]:
    ok = rec.patchable
    note = "; ".join(([rec.message] if rec.message else []) + (["OOM bump"] if rec.oom_bumped else []) + rec.notes)
    return [esc(rec.task), esc(rec.container), esc(_current(rec, "cpu")),
            esc(format_cpu(rec.cpu_target_cores) if ok else "-"), esc(_limit(rec, rec.cpu_limit_cores, "cpu")),
            f"{esc(format_cpu(rec.cpu_lower_cores))}&ndash;{esc(format_cpu(rec.cpu_upper_cores))}",
            esc(_current(rec, "memory")), esc(format_memory(rec.memory_target_bytes) if ok else "-"),
            esc(_limit(rec, rec.memory_limit_bytes, "memory")),
            f"{esc(format_memory(rec.memory_lower_bytes))}&ndash;{esc(format_memory(rec.memory_upper_bytes))}",
            esc(f"{rec.confidence:.2f}"), esc(rec.samples),
            esc(", ".join(f"{k}: {v}" for k, v in sorted(rec.capped_by.items()))),
            f'<span class="{"muted" if ok else "warning"}">{esc(note)}</span>']


def yaml_patch(job_name: str, namespace: str, recommendations: Sequence[Recommendation]) -> str:
    """The Job's task containers with the recommended resources (patchable containers only), in the shape
    of the Job's manifest, to merge into it by task and container name for the next run. Not for
    `kubectl patch --type merge` on the live Job: a merge patch replaces the whole `spec.tasks` list
    (replicas, policies and images would go), and Volcano's webhook refuses changing a live Job's tasks
    anyway (docs/watchdog.md). Names are quoted by the YAML dumper: valid whatever they contain."""
    head = (f"# Job {json.dumps(namespace)}/{json.dumps(job_name)}: merge into its manifest by task and container "
            "name, then re-submit\n")
    body = yaml.safe_dump(job_patch([r for r in recommendations if r.patchable]), sort_keys=False,
                          allow_unicode=True, default_style=None)
    return head + body


def section(job_name: str, namespace: str, workload: str, recs: Sequence[Recommendation]) -> str:
    """The page's "Recommendation" section (HTML)."""
    if not recs:
        return f'<p class="muted">no usage history of workload {esc(workload)} yet</p>'
    body = table(HEADERS, [row(r) for r in recs])
    if any(r.patchable for r in recs):
        body += f'<pre id="patch">{esc(yaml_patch(job_name, namespace, recs))}</pre>'
    else:
        reasons = sorted({r.message for r in recs})
        body += (f'<p class="warning" id="no-patch">No patch: {esc("; ".join(reasons))}. The range shows where '
                 "the requests are likely to settle; the upper bound is not a limit.</p>")
    return body
