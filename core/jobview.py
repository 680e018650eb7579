"""The Volcano Job view: its tasks, its counts and the times of its latest run. Re-exported by :mod:`core.model`.

A Job is the one view whose status needs reading beyond its fields: the start, finish and requeue
of the latest run come from the order of its conditions (`_job_times`). The parser follows
:mod:`core.model`'s rule: it never raises; what is malformed is reported in ``problems``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.fields import (
    arr,
    counts,
    integer,
    intern,
    istring,
    item_obj,
    obj,
    opt_integer,
    read_meta,
    root,
    string,
    timestamp,
)
from volcano_monitor.core.gpushare import PHYSICAL_GPU, has_gpu, with_physical_gpu
from volcano_monitor.core.podrequests import NO_RESOURCES, Resources, pod_resources, res_from, res_get

__all__ = ["JOB_TERMINAL_PHASES", "Job", "Task", "parse_job"]

JOB_TERMINAL_PHASES = frozenset({"Completed", "Failed", "Aborted", "Terminated"})
RUN_RESET_PHASES = frozenset({"Pending", "Restarting"})  # a new run begins: its start is still to come


@dataclass(slots=True, frozen=True)
class Task:
    name: str
    replicas: int
    min_available: int
    requests: Resources  # per replica (effective pod request of the template)
    # Physical GPUs per replica (core.gpushare). Not in `requests`: those are compared with nodes'
    # allocatable (a gang's largest pod must fit a node), which has no such resource.
    physical_gpus: float = 0.0


@dataclass(slots=True, frozen=True)
class Job:
    namespace: str
    name: str
    uid: str
    resource_version: str
    creation_timestamp: float | None
    owner_kind: str
    owner_name: str
    queue: str
    scheduler_name: str
    priority_class: str
    min_available: int
    max_retry: int
    tasks: tuple[Task, ...]
    phase: str
    reason: str
    message: str
    retry_count: int
    pending: int
    running: int
    succeeded: int
    failed: int
    terminating: int
    unknown: int
    task_status_counts: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    start_time: float | None
    finish_time: float | None
    finish_phase: str
    requests: Resources  # sum over tasks of replicas x per-replica request, + PHYSICAL_GPU for GPU jobs
    problems: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # chosen by --metric-labels-allowlist (exporter/cardinality.py)
    run_queued_time: float | None = None  # a restarted run: when it began waiting again (its Restarting)

    @property
    def podgroup(self) -> str:
        """Name of the PodGroup Volcano creates for this job: ``<name>-<uid>``."""
        return f"{self.name}-{self.uid}" if self.uid else self.name



def _job_times(status: Mapping[str, Any], phase: str,
               probs: list[str]) -> tuple[float | None, float | None, str, float | None]:
    """Start and finish of the job's latest run, from its conditions, and when that run began waiting.

    Volcano's controller appends a condition on every status write (one more `Running` each time a
    pod starts or finishes), in order. The start is the *first* `Running` after the last `Pending` /
    `Restarting`: a restarted run starts again. A run that has not reached Running yet has no start
    while the job waits; a job that fails straight out of `Restarting` (retries exhausted) keeps the
    start of the run that failed. The finish is the terminal entry.

    A restarted run began waiting at the first reset condition after the previous run's start (its
    `Restarting`), returned as the fourth value; the first run waited from creation (None here)."""
    start: float | None = None
    new_run = False  # a Pending/Restarting came after `start`
    requeued: float | None = None  # time of the first reset after `start` (the next run waits from it)
    queued: float | None = None  # when the run that `start` belongs to began waiting (None: at creation)
    finish: float | None = None
    finish_phase = ""
    for i, raw in enumerate(arr(status, "conditions", "status.", probs)):
        path = f"status.conditions[{i}]"
        cond = item_obj(raw, path, probs)
        st = string(cond, "status", path + ".", probs)
        if st in RUN_RESET_PHASES:
            if start is not None and not new_run:
                requeued = timestamp(cond, "lastTransitionTime", path + ".", probs)
            new_run = True
            continue
        if st != "Running" and st not in JOB_TERMINAL_PHASES:
            continue
        ts = timestamp(cond, "lastTransitionTime", path + ".", probs)
        if ts is None:
            continue
        if st == "Running":
            if start is None or new_run:
                queued = requeued if start is not None else None
                start, new_run = ts, False
        elif finish is None or ts >= finish:
            finish, finish_phase = ts, intern(st)
    if phase and phase not in JOB_TERMINAL_PHASES:  # e.g. resumed after Aborted: not finished now
        finish, finish_phase = None, ""
        if new_run:
            start = queued = None  # waiting for the next run to start
    return start, finish, finish_phase, queued


def _task(raw: object, i: int, probs: list[str]) -> Task:
    path = f"spec.tasks[{i}]"
    t = item_obj(raw, path, probs)
    p = path + "."
    replicas = integer(t, "replicas", p, probs)
    min_avail = opt_integer(t, "minAvailable", p, probs)
    template = obj(t, "template", p, probs)
    spec = obj(template, "spec", p + "template.", probs)
    requests, _ = pod_resources(spec, p + "template.spec.", probs) if spec else (NO_RESOURCES, NO_RESOURCES)
    gpus = 0.0
    if requests and has_gpu(requests):  # physical GPUs of a replica (no node yet: no card memory)
        meta = obj(template, "metadata", p + "template.", probs)
        shared = with_physical_gpu(requests, spec, obj(meta, "annotations", p + "template.metadata.", probs))
        gpus = res_get(shared, PHYSICAL_GPU)
    return Task(
        istring(t, "name", p, probs),
        replicas,
        replicas if min_avail is None else min_avail,
        requests,
        gpus,
    )


def _task_status_counts(
    status: Mapping[str, Any], probs: list[str]
) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    tsc = obj(status, "taskStatusCount", "status.", probs)
    out: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    for task, raw in tsc.items():
        path = f"status.taskStatusCount.{task}"
        phases = obj(item_obj(raw, path, probs), "phase", path + ".", probs)
        counts = []
        for ph, n in phases.items():
            if type(n) is int:
                counts.append((intern(ph), n))
            elif n is not None:
                probs.append(f"{path}.phase.{ph}: expected integer, got {type(n).__name__}")
        out.append((intern(task), tuple(sorted(counts))))
    out.sort()
    return tuple(out)


def parse_job(raw: object) -> Job:
    """A ``batch.volcano.sh/v1alpha1`` Job."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    status = obj(d, "status", "", probs)
    state = obj(status, "state", "status.", probs)
    tasks = tuple(_task(t, i, probs) for i, t in enumerate(arr(spec, "tasks", "spec.", probs)))
    min_avail = opt_integer(spec, "minAvailable", "spec.", probs)
    phase = istring(state, "phase", "status.state.", probs)
    start, finish, finish_phase, queued = _job_times(status, phase, probs)
    total: dict[str, float] = {}
    gpu_tasks = False
    for t in tasks:
        for name, v in t.requests:
            total[name] = total.get(name, 0.0) + v * t.replicas
        gpu_tasks = gpu_tasks or has_gpu(t.requests)
    if gpu_tasks:  # all tasks x replicas in physical GPUs, beside the raw resources
        total[PHYSICAL_GPU] = sum(t.physical_gpus * t.replicas for t in tasks)
    sp = "status."
    pending, running, succeeded, failed, terminating, unknown = counts(
        status, sp, probs, "pending", "running", "succeeded", "failed", "terminating", "unknown"
    )
    return Job(
        *meta,
        queue=istring(spec, "queue", "spec.", probs, "default") or "default",
        scheduler_name=istring(spec, "schedulerName", "spec.", probs),
        priority_class=istring(spec, "priorityClassName", "spec.", probs),
        min_available=sum(t.min_available for t in tasks) if min_avail is None else min_avail,
        max_retry=integer(spec, "maxRetry", "spec.", probs, 3),
        tasks=tasks,
        phase=phase,
        reason=istring(state, "reason", "status.state.", probs),
        message=string(state, "message", "status.state.", probs),
        retry_count=integer(status, "retryCount", sp, probs),
        pending=pending,
        running=running,
        succeeded=succeeded,
        failed=failed,
        terminating=terminating,
        unknown=unknown,
        task_status_counts=_task_status_counts(status, probs),
        start_time=start,
        finish_time=finish,
        finish_phase=finish_phase,
        requests=res_from(total),
        problems=tuple(probs),
        run_queued_time=queued,
    )
