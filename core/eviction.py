"""Recognising evictions and preemptions of pods, from the pod itself and from core/v1 Events
(volcano-sh/volcano#4040: who evicted my pod, for which queue).

How they show (one pod may show several; all of them name the same `reason` here, so whichever the
exporter sees first counts and the others find the pod already counted):

- Volcano's scheduler (preempt, reclaim, shuffle actions) evicts through its Evictor: a Warning Event
  `Evict` on the pod, "Pod is evicted, because of <action>", a pod condition carrying the same message
  (`DisruptionTarget`, or `Ready=False` with reason `Evict` in releases before it), then deletes the pod.
  `reason` is the action: `preempt`, `reclaim`, ...
- kube-scheduler preemption: `DisruptionTarget` reason `PreemptionByScheduler`, and a Normal Event
  `Preempted` whose `related` object (or message "Preempted by pod <uid> on node <node>") is the preemptor.
- the kubelet (node pressure, critical pod admission): `status.reason` `Evicted` / `Preempting`,
  `DisruptionTarget` `TerminationByKubelet`, an Event `Evicted` -> `TerminationByKubelet`.
- the Eviction API (drain), the taint manager, PodGC: `DisruptionTarget` with their reasons.

Reasons are validated into a bounded set of label values (a Volcano action word, a CamelCase Kubernetes
reason, else `other`). Nothing here raises, whatever the input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.fields import parse_timestamp

VOLCANO_MESSAGE = re.compile(r"^Pod is evicted, because of ([a-z][a-z-]{0,31})\b")
K8S_REASON = re.compile(r"^[A-Z][A-Za-z]{2,63}$")
KUBELET = "TerminationByKubelet"
KUBELET_STATUS_REASONS = frozenset({"Evicted", "Preempting", "Preempted"})
EVENT_REASONS = frozenset({"Evict", "Preempted", "Evicted"})
PREEMPTED_BY_UID = re.compile(r"^Preempted by pod ([0-9a-f-]{8,64}) on node")
PREEMPTED_BY_NAME = re.compile(r"^Preempted by ([^/\s]+)/([^/\s]+) on node")
SAME_QUEUE_ACTIONS = frozenset({"preempt"})  # Volcano's preempt action picks victims in the preemptor's queue
# Preemptions (another job took the room), as opposed to evictions for the node (pressure, drain, taints):
# Volcano's preempt (same queue) and reclaim (another queue) actions, and kube-scheduler preemption.
PREEMPTION_REASONS = frozenset({"preempt", "reclaim", "PreemptionByScheduler"})


def volcano_action(message: str) -> str:
    """`preempt` for "Pod is evicted, because of preempt" ("" when the message is not Volcano's)."""
    match = VOLCANO_MESSAGE.match(message)
    return match.group(1) if match else ""


def k8s_reason(reason: str) -> str:
    return reason if K8S_REASON.match(reason) else "other"


def _text(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    return value if type(value) is str else ""


def pod_disruption(status: Mapping[str, Any], status_reason: str) -> tuple[str, float | None]:
    """The eviction `reason` a pod's status shows ("" for none) and its condition's time, if any.
    Malformed conditions are ignored here (the pod view reports its own problems)."""
    conditions = status.get("conditions")
    if type(conditions) is list:
        for cond in conditions:
            if type(cond) is not dict:
                continue
            kind = cond.get("type")
            if kind == "DisruptionTarget" and cond.get("status") == "True":
                reason = volcano_action(_text(cond, "message")) or k8s_reason(_text(cond, "reason"))
            elif kind == "Ready" and cond.get("status") == "False" and cond.get("reason") == "Evict":
                reason = volcano_action(_text(cond, "message")) or "other"
            else:
                continue
            return reason, parse_timestamp(_text(cond, "lastTransitionTime"))
    if status_reason in KUBELET_STATUS_REASONS:
        return KUBELET, None
    return "", None


def about_eviction(raw: Any) -> bool:
    """Informer predicate: an Event about a pod's eviction or preemption? Cheap, safe on any JSON value."""
    if not isinstance(raw, dict) or raw.get("reason") not in EVENT_REASONS:
        return False
    involved = raw.get("involvedObject")
    return isinstance(involved, dict) and involved.get("kind") == "Pod"


@dataclass(frozen=True, slots=True)
class EvictionEvent:
    """One Event saying a pod was evicted: the pod, the `reason` label, the preemptor if named, when."""

    namespace: str
    pod: str
    pod_uid: str
    reason: str
    preemptor_namespace: str
    preemptor: str  # pod name ("" unknown)
    preemptor_uid: str  # ("" unknown)
    at: float | None


def parse_eviction_event(raw: Any) -> EvictionEvent | None:
    """The eviction an Event reports; None when it is not one or is malformed (no pod name or uid)."""
    if not about_eviction(raw):
        return None
    involved = raw["involvedObject"]
    namespace, pod, uid = _text(involved, "namespace"), _text(involved, "name"), _text(involved, "uid")
    if not pod or not uid:
        return None
    message, why = _text(raw, "message"), raw["reason"]
    preemptor_ns = preemptor = preemptor_uid = ""
    if why == "Evict":
        reason = volcano_action(message) or "other"
    elif why == "Evicted":
        reason = KUBELET
    else:
        reason = "PreemptionByScheduler"
        related = raw.get("related")
        if isinstance(related, dict) and related.get("kind") in ("Pod", None):
            preemptor_ns, preemptor, preemptor_uid = (_text(related, "namespace"), _text(related, "name"),
                                                      _text(related, "uid"))
        if not preemptor and not preemptor_uid:
            by_uid, by_name = PREEMPTED_BY_UID.match(message), PREEMPTED_BY_NAME.match(message)
            if by_uid:
                preemptor_uid = by_uid.group(1)
            elif by_name:
                preemptor_ns, preemptor = by_name.groups()
    at = None
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        at = parse_timestamp(_text(raw, key))
        if at is not None:
            break
    if at is None:
        series = raw.get("series")
        at = parse_timestamp(_text(series, "lastObservedTime")) if isinstance(series, dict) else None
    return EvictionEvent(namespace, pod, uid, reason, preemptor_ns, preemptor, preemptor_uid, at)
