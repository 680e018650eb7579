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

The Job view (its run times read from the order of its conditions) is in :mod:`core.jobview` and the
Pod view (the exporter's hot path) in :mod:`core.podview`; both are re-exported here, so importers
name this module for every view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from volcano_monitor.core.fields import (
    arr,
    boolean,
    counts,
    integer,
    intern,
    istring,
    item_obj,
    obj,
    read_meta,
    root,
    string,
    string_map,
    timestamp,
)
from volcano_monitor.core.gpufacts import HAMI_NODE_REGISTER, VGPU_NODE_REGISTER
from volcano_monitor.core.jobview import JOB_TERMINAL_PHASES, Job, Task, parse_job
from volcano_monitor.core.kinds import NetworkTopology, SubGroup, parse_podgroup_topology
from volcano_monitor.core.podrequests import (
    NO_RESOURCES,
    Resources,
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


# Every queue but `root` sits under a parent: v1.12's controller writes `spec.parent: root` into new
# queues and the capacity plugin treats a queue without one as root's child. (The older
# `volcano.sh/hierarchy` annotations are ignored by v1.12, recorded: the tree is `spec.parent` alone.)
ROOT_QUEUE = "root"


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
    running, succeeded, failed = counts(status, "status.", probs, "running", "succeeded", "failed")
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
    pending, running, inqueue, completed, unknown = counts(
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
    # Only the GPU device plugins' register annotations (core/gpufacts.py): a node's other annotations are
    # large (kubeadm, CNI, volumes) and read by nothing here.
    annotations: Mapping[str, str] = field(default_factory=dict)


NODE_REGISTER_KEYS = (HAMI_NODE_REGISTER, VGPU_NODE_REGISTER)


def _register_annotations(annotations: Mapping[str, Any]) -> dict[str, str]:
    return {key: value for key in NODE_REGISTER_KEYS if type(value := annotations.get(key)) is str}


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
        annotations=_register_annotations(obj(md, "annotations", "metadata.", probs)),
    )
