"""The Pod view (the exporter's hot path: ~100k of them are kept). Re-exported by :mod:`core.model`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from volcano_monitor.core.containers import Containers
from volcano_monitor.core.eviction import pod_disruption
from volcano_monitor.core.fields import (
    intern,
    istring,
    obj,
    read_meta,
    root,
    shown,
    timestamp,
)
from volcano_monitor.core.gpushare import CardMemory, has_gpu, with_physical_gpu
from volcano_monitor.core.podrequests import Resources, pod_resources

__all__ = ["Pod", "Termination", "is_volcano_pod", "parse_pod"]

# Volcano's pod labels / annotations (both are checked, labels first).
JOB_NAME_KEY = "volcano.sh/job-name"
QUEUE_NAME_KEY = "volcano.sh/queue-name"
TASK_SPEC_KEY = "volcano.sh/task-spec"
TASK_INDEX_KEY = "volcano.sh/task-index"
GROUP_NAME_KEY = "scheduling.k8s.io/group-name"
VC_QUEUE_NAME_KEY = "scheduling.volcano.sh/queue-name"
VC_GROUP_NAME_KEY = "scheduling.volcano.sh/group-name"


class Termination(NamedTuple):
    """A container's termination: ``current`` for ``state.terminated``, else ``lastState.terminated``."""

    container: str
    reason: str  # OOMKilled, Error, Completed, ContainerCannotRun, ...
    exit_code: int | None
    current: bool


@dataclass(slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    resource_version: str
    creation_timestamp: float | None
    owner_kind: str
    owner_name: str
    node_name: str
    phase: str
    reason: str  # status.reason: Evicted, OutOfcpu, UnexpectedAdmissionError, ...
    scheduler_name: str
    job_name: str  # volcano.sh/job-name ("" for pods of Kubeflow/Spark jobs: see their PodGroup)
    task: str  # volcano.sh/task-spec
    task_index: int | None  # volcano.sh/task-index
    queue: str  # volcano.sh/queue-name or scheduling.volcano.sh/queue-name ("" when absent)
    podgroup: str  # scheduling.k8s.io/group-name or scheduling.volcano.sh/group-name
    requests: Resources  # effective pod request (init containers, sidecars, overhead); GPU pods add
    # core.gpushare.PHYSICAL_GPU, their share of physical cards
    limits: Resources
    restart_count: int  # all containers, init containers included
    terminations: tuple[Termination, ...]
    start_time: float | None
    problems: tuple[str, ...] = ()
    # Only with the exporter's options (see exporter/cardinality.py): Kubernetes labels chosen by
    # --metric-labels-allowlist as (prometheus label, value), and the per-container view of
    # --compat-kube-state-metrics-fork. Empty otherwise.
    labels: tuple[tuple[str, str], ...] = ()
    containers: Containers | None = None
    disruption: str = ""  # the eviction reason its status shows: preempt, reclaim, TerminationByKubelet, ...
    disrupted_at: float | None = None  # that condition's lastTransitionTime (None: unknown, or not evicted)

    @property
    def is_volcano(self) -> bool:
        """Created by a Volcano Job, placed in a Volcano queue/group, or scheduled by Volcano."""
        return bool(self.job_name or self.queue or self.podgroup) or self.scheduler_name == "volcano"

    @property
    def job_kind(self) -> str:
        """``"Job"`` for pods of a Volcano Job, else "" (resolve through the PodGroup's owner)."""
        return "Job" if self.job_name else ""


def _label_slow(labels: Mapping[str, Any], annotations: Mapping[str, Any], key: str, probs: list[str]) -> str:
    for where, m in (("labels", labels), ("annotations", annotations)):
        v = m.get(key)
        if type(v) is str:
            if v:
                return intern(v)
        elif v is not None:
            probs.append(f"metadata.{where}.{key}: expected string, got {type(v).__name__}")
    return ""


def _label(labels: Mapping[str, Any], annotations: Mapping[str, Any], key: str, probs: list[str]) -> str:
    """A Volcano key from the labels, else from the annotations ("" when in neither)."""
    v = labels.get(key)
    if v is None:
        v = annotations.get(key)
        if v is None:
            return ""
    if type(v) is str and v:
        return intern(v)
    return _label_slow(labels, annotations, key, probs)


def _termination(cs: Mapping[str, Any], path: str, probs: list[str], out: list[Termination]) -> None:
    for state_key, current in (("lastState", False), ("state", True)):
        st = obj(cs, state_key, path, probs)
        t = obj(st, "terminated", f"{path}{state_key}.", probs) if st else st
        if t:
            tp = f"{path}{state_key}.terminated."
            exit_code = t.get("exitCode")
            if exit_code is not None and type(exit_code) is not int:
                probs.append(f"{tp}exitCode: expected integer, got {type(exit_code).__name__}")
                exit_code = None
            out.append(
                Termination(istring(cs, "name", path, probs), istring(t, "reason", tp, probs), exit_code, current)
            )


def _statuses(status: Mapping[str, Any], probs: list[str]) -> tuple[int, tuple[Termination, ...]]:
    restarts = 0
    terms: list[Termination] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        statuses = status.get(key)
        if type(statuses) is not list:
            if statuses is not None:
                probs.append(f"status.{key}: expected array, got {type(statuses).__name__}")
            continue
        for i, cs in enumerate(statuses):
            if type(cs) is not dict:
                if cs is not None:
                    probs.append(f"status.{key}[{i}]: expected object, got {type(cs).__name__}")
                continue
            n = cs.get("restartCount")
            if type(n) is int:
                restarts += n
            elif n is not None:
                probs.append(f"status.{key}[{i}].restartCount: expected integer, got {type(n).__name__}")
            last = cs.get("lastState")
            state = cs.get("state")
            if (last is not None and (type(last) is not dict or "terminated" in last)) or (
                state is not None and (type(state) is not dict or "terminated" in state)
            ):
                _termination(cs, f"status.{key}[{i}].", probs, terms)
    return restarts, tuple(terms) if terms else ()


def parse_pod(raw: object, *, statuses: bool = True, card_memory: CardMemory | None = None) -> Pod:
    """A core/v1 Pod, with its Volcano job/task/queue/podgroup and effective resource request.

    `statuses=False` skips what only the watchdog reads (container statuses: restarts and
    terminations; the start time): the exporter parses every pod event, and those are a third of it.
    `card_memory`: node name -> MiB of its cards, for the share of a vGPU asked in MiB of a bound pod
    (core.gpushare; without it, the configured default card memory, else the cores share)."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, md = read_meta(d, probs)
    spec = d.get("spec")
    if type(spec) is not dict:
        spec = obj(d, "spec", "", probs)
    status = d.get("status")
    if type(status) is not dict:
        status = obj(d, "status", "", probs)
    labels = md.get("labels")
    if type(labels) is not dict:
        labels = obj(md, "labels", "metadata.", probs)
    annotations = md.get("annotations")
    if type(annotations) is not dict:
        annotations = obj(md, "annotations", "metadata.", probs)
    task_index: int | None = None
    index_text = _label(labels, annotations, TASK_INDEX_KEY, probs)
    if index_text:
        if index_text.isascii() and index_text.isdigit() and len(index_text) < 10:
            task_index = int(index_text)
        else:
            probs.append(f"metadata.labels.{TASK_INDEX_KEY}: invalid index {shown(index_text)}")
    requests, limits = pod_resources(spec, "spec.", probs)
    if requests and has_gpu(requests):
        node = spec.get("nodeName")
        card = card_memory(node) if card_memory is not None and type(node) is str and node else 0.0
        requests = with_physical_gpu(requests, spec, annotations, card)
    restarts, terms = _statuses(status, probs) if statuses else (0, ())
    status_reason = istring(status, "reason", "status.", probs)
    disruption, disrupted_at = pod_disruption(status, status_reason)
    return Pod(
        *meta,
        istring(spec, "nodeName", "spec.", probs),
        istring(status, "phase", "status.", probs),
        status_reason,
        istring(spec, "schedulerName", "spec.", probs),
        _label(labels, annotations, JOB_NAME_KEY, probs),
        _label(labels, annotations, TASK_SPEC_KEY, probs),
        task_index,
        _label(labels, annotations, QUEUE_NAME_KEY, probs) or _label(labels, annotations, VC_QUEUE_NAME_KEY, probs),
        _label(labels, annotations, GROUP_NAME_KEY, probs) or _label(labels, annotations, VC_GROUP_NAME_KEY, probs),
        requests,
        limits,
        restarts,
        terms,
        timestamp(status, "startTime", "status.", probs) if statuses else None,
        tuple(probs) if probs else (),
        disruption=disruption,
        disrupted_at=disrupted_at,
    )


_VOLCANO_KEYS = (JOB_NAME_KEY, QUEUE_NAME_KEY, GROUP_NAME_KEY, VC_QUEUE_NAME_KEY, VC_GROUP_NAME_KEY)


def is_volcano_pod(raw: object) -> bool:
    """`Pod.is_volcano` on raw JSON, cheap enough to drop other pods before they are parsed or cached."""
    if not isinstance(raw, dict):
        return False
    spec = raw.get("spec")
    if isinstance(spec, dict) and spec.get("schedulerName") == "volcano":
        return True
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        return False
    for field_name in ("labels", "annotations"):
        values = meta.get(field_name)
        if isinstance(values, dict) and any(values.get(k) for k in _VOLCANO_KEYS):
            return True
    return False
