"""Slim typed views of Volcano Job, PodGroup, Queue and of Pod and Node, parsed from raw JSON.

THE RULE: a parser never raises, whatever ``raw`` is (any JSON value). A field of the wrong type or
shape is replaced by its default and reported in the view's ``problems`` as a short string, e.g.
``"spec.tasks[1].replicas: expected integer, got str"``. Field names follow the CRDs
(batch.volcano.sh/v1alpha1 Job, scheduling.volcano.sh/v1beta1 PodGroup and Queue) and core/v1.

Views are slotted dataclasses, frozen except ``Pod`` (frozen construction costs ~3 us; treat it as
read-only too). Strings repeated across objects (namespace, queue, phase, node, task, ...) are interned
and equal resource lists are shared, so ~100k Pod views stay small (~0.5 KiB each). Resource lists are
``Resources`` tuples (see :mod:`core.podrequests` for add/max/scale helpers); values are in base
units (cores, bytes, counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.fields import (
    arr,
    boolean,
    integer,
    intern,
    istring,
    item_obj,
    obj,
    opt_integer,
    read_meta,
    root,
    string,
    string_map,
    timestamp,
)
from volcano_monitor.core.kinds import NetworkTopology, SubGroup, parse_podgroup_topology
from volcano_monitor.core.podrequests import (
    NO_RESOURCES,
    Resources,
    pod_resources,
    read_resource_list,
    res_add,
    res_dict,
    res_from,
    res_get,
    res_max,
    res_scale,
    res_sum,
)
from volcano_monitor.core.podview import Pod, Termination, parse_pod

__all__ = [
    "JOB_TERMINAL_PHASES",
    "NO_RESOURCES",
    "Condition",
    "Job",
    "Node",
    "Pod",
    "PodGroup",
    "Queue",
    "Resources",
    "Task",
    "Termination",
    "parse_job",
    "parse_node",
    "parse_pod",
    "parse_podgroup",
    "parse_queue",
    "res_add",
    "res_dict",
    "res_from",
    "res_get",
    "res_max",
    "res_scale",
    "res_sum",
]

JOB_TERMINAL_PHASES = frozenset({"Completed", "Failed", "Aborted", "Terminated"})
RUN_RESET_PHASES = frozenset({"Pending", "Restarting"})  # a new run begins: its start is still to come

# Every queue but `root` sits under a parent: v1.12's controller writes `spec.parent: root` into new
# queues and the capacity plugin treats a queue without one as root's child. (The older
# `volcano.sh/hierarchy` annotations are ignored by v1.12, recorded: the tree is `spec.parent` alone.)
ROOT_QUEUE = "root"


def _counts(d: Mapping[str, Any], path: str, probs: list[str], *keys: str) -> list[int]:
    return [integer(d, k, path, probs) for k in keys]


# --------------------------------------------------------------------------------------------- Job


@dataclass(slots=True, frozen=True)
class Task:
    name: str
    replicas: int
    min_available: int
    requests: Resources  # per replica (effective pod request of the template)


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
    requests: Resources  # sum over tasks of replicas x per-replica request
    problems: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # chosen by --metric-labels-allowlist (exporter/cardinality.py)
    run_queued_time: float | None = None  # a restarted run: when it began waiting again (its Restarting)

    @property
    def podgroup(self) -> str:
        """Name of the PodGroup Volcano creates for this job: ``<name>-<uid>``."""
        return f"{self.name}-{self.uid}" if self.uid else self.name


RUN_RESET_PHASES = frozenset({"Pending", "Restarting"})


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
    return Task(
        istring(t, "name", p, probs),
        replicas,
        replicas if min_avail is None else min_avail,
        requests,
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
    for t in tasks:
        for name, v in t.requests:
            total[name] = total.get(name, 0.0) + v * t.replicas
    sp = "status."
    pending, running, succeeded, failed, terminating, unknown = _counts(
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


# ---------------------------------------------------------------------------------------- PodGroup


@dataclass(slots=True, frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: float | None


@dataclass(slots=True, frozen=True)
class PodGroup:
    namespace: str
    name: str
    uid: str
    resource_version: str
    creation_timestamp: float | None
    owner_kind: str
    owner_name: str
    queue: str
    min_member: int
    min_resources: Resources
    priority_class: str
    phase: str
    running: int
    succeeded: int
    failed: int
    conditions: tuple[Condition, ...]
    problems: tuple[str, ...] = ()
    network_topology: NetworkTopology | None = None  # v1.12+
    subgroups: tuple[SubGroup, ...] = ()  # v1.14+

    @property
    def job_name(self) -> str:
        """The job owning the group: a Volcano Job, or e.g. a Kubeflow PyTorchJob / SparkApplication."""
        return self.owner_name

    @property
    def job_kind(self) -> str:
        return self.owner_kind


def _conditions(status: Mapping[str, Any], probs: list[str]) -> tuple[Condition, ...]:
    out = []
    for i, raw in enumerate(arr(status, "conditions", "status.", probs)):
        path = f"status.conditions[{i}]"
        c = item_obj(raw, path, probs)
        p = path + "."
        out.append(
            Condition(
                istring(c, "type", p, probs),
                istring(c, "status", p, probs),
                istring(c, "reason", p, probs),
                string(c, "message", p, probs),
                timestamp(c, "lastTransitionTime", p, probs),
            )
        )
    return tuple(out)


def _min_resources(spec: Mapping[str, Any], probs: list[str]) -> Resources:
    """`spec.minResources` with Volcano's quota-style keys folded into resource names.

    The job controller writes `count/pods`, `pods`, `cpu`, `requests.cpu` (and `requests.memory`,
    `requests.nvidia.com/gpu`, ...) for the same amounts: `requests.X` is X, `count/pods` is `pods`
    (a pod count). Where both spellings are present they agree; the larger wins if they do not."""
    out: dict[str, float] = {}
    for name, amount in read_resource_list(spec, "minResources", "spec.", probs).items():
        if name.startswith("limits."):
            continue  # a quota on limits: not what the gang needs to be placed
        name = name.removeprefix("requests.")
        if name == "count/pods":
            name = "pods"
        out[name] = max(amount, out.get(name, 0.0))
    return res_from(out)


def parse_podgroup(raw: object) -> PodGroup:
    """A ``scheduling.volcano.sh/v1beta1`` PodGroup."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    status = obj(d, "status", "", probs)
    running, succeeded, failed = _counts(status, "status.", probs, "running", "succeeded", "failed")
    topology, subgroups = parse_podgroup_topology(spec, probs)
    return PodGroup(
        *meta,
        queue=istring(spec, "queue", "spec.", probs, "default") or "default",
        min_member=integer(spec, "minMember", "spec.", probs),
        min_resources=_min_resources(spec, probs),
        priority_class=istring(spec, "priorityClassName", "spec.", probs),
        phase=istring(status, "phase", "status.", probs),
        running=running,
        succeeded=succeeded,
        failed=failed,
        conditions=_conditions(status, probs),
        problems=tuple(probs),
        network_topology=topology,
        subgroups=subgroups,
    )


# ------------------------------------------------------------------------------------------- Queue


@dataclass(slots=True, frozen=True)
class Queue:
    name: str
    uid: str
    resource_version: str
    creation_timestamp: float | None
    parent: str
    weight: int
    reclaimable: bool | None
    priority: int
    capability: Resources
    deserved: Resources
    guarantee: Resources
    state: str
    allocated: Resources
    pending: int
    running: int
    inqueue: int
    completed: int
    unknown: int
    problems: tuple[str, ...] = ()
    dequeue_strategy: str = ""  # v1.14+ (traverse, fifo); absent before


def parse_queue(raw: object) -> Queue:
    """A cluster-scoped ``scheduling.volcano.sh/v1beta1`` Queue."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    status = obj(d, "status", "", probs)
    guarantee = obj(spec, "guarantee", "spec.", probs)
    sp = "status."
    pending, running, inqueue, completed, unknown = _counts(
        status, sp, probs, "pending", "running", "inqueue", "completed", "unknown"
    )
    dequeue = istring(spec, "dequeueStrategy", "spec.", probs)
    return Queue(
        name=meta[1],
        uid=meta[2],
        resource_version=meta[3],
        creation_timestamp=meta[4],
        parent=istring(spec, "parent", "spec.", probs) or ("" if meta[1] == ROOT_QUEUE else ROOT_QUEUE),
        weight=integer(spec, "weight", "spec.", probs, 1),
        reclaimable=boolean(spec, "reclaimable", "spec.", probs),
        priority=integer(spec, "priority", "spec.", probs),
        capability=res_from(read_resource_list(spec, "capability", "spec.", probs)),
        deserved=res_from(read_resource_list(spec, "deserved", "spec.", probs)),
        guarantee=res_from(read_resource_list(guarantee, "resource", "spec.guarantee.", probs)),
        state=istring(status, "state", sp, probs),
        allocated=res_from(read_resource_list(status, "allocated", sp, probs, cache=False), share=False),
        pending=pending,
        running=running,
        inqueue=inqueue,
        completed=completed,
        unknown=unknown,
        problems=tuple(probs),
        dequeue_strategy=dequeue,
    )


# -------------------------------------------------------------------------------------------- Node


@dataclass(slots=True, frozen=True)
class Node:
    name: str
    uid: str
    resource_version: str
    creation_timestamp: float | None
    labels: Mapping[str, str]
    allocatable: Resources
    capacity: Resources
    ready: bool
    unschedulable: bool
    taints: int
    problems: tuple[str, ...] = ()


def parse_node(raw: object) -> Node:
    """A core/v1 Node."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, md = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    status = obj(d, "status", "", probs)
    ready = False
    for i, rawc in enumerate(arr(status, "conditions", "status.", probs)):
        path = f"status.conditions[{i}]"
        c = item_obj(rawc, path, probs)
        if string(c, "type", path + ".", probs) == "Ready":
            ready = string(c, "status", path + ".", probs) == "True"
    return Node(
        name=intern(meta[1]),
        uid=meta[2],
        resource_version=meta[3],
        creation_timestamp=meta[4],
        labels=dict(string_map(md, "labels", "metadata.", probs)),
        allocatable=res_from(read_resource_list(status, "allocatable", "status.", probs)),
        capacity=res_from(read_resource_list(status, "capacity", "status.", probs)),
        ready=ready,
        unschedulable=boolean(spec, "unschedulable", "spec.", probs) or False,
        taints=len(arr(spec, "taints", "spec.", probs)),
        problems=tuple(probs),
    )
