"""Gang scheduling detectors: GangUnschedulable and PartialGang (periodic: both are "for longer than").

GangUnschedulable: a PodGroup that Volcano cannot place as a whole and none of whose pods holds
resources. Volcano keeps an old `Unschedulable` condition with status True after the group got a
later `Scheduled` one, so "unschedulable now" is: the Unschedulable condition is the newer of the
two, or the group went back to Pending/Inqueue (a restarted job) — then the condition's time says
nothing about now, and the episode starts when the detector first sees it. A group Pending because
its queue is at capability ("queue resource quota insufficient") is left to QueueStarved.

PartialGang: some pods of a group Running (holding nodes, GPUs) while fewer than minMember pods
hold resources and others wait unbound — the gang will not start, and what it holds is wasted.
Volcano's phase for this is `Unknown`; the detector counts the pods itself.

`check()` reports every condition that holds now with `for_seconds` set to the configured threshold;
the alert book keeps the episode pending until then (and across restarts), and `resolve_missing`
with `KINDS` resolves what a round no longer reports.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NamedTuple

from exporter.model import PodGroup, Resources, res_add, res_dict
from exporter.podview import Pod
from watchdog.config import Detectors
from watchdog.detectors.base import GANG_UNSCHEDULABLE, PARTIAL_GANG, Signal, fingerprint

__all__ = ["GangDetector"]

WAITING_PHASES = frozenset({"", "Pending", "Inqueue", "Unknown"})


class _PodState(NamedTuple):
    group: tuple[str, str]
    phase: str
    bound: bool
    requests: Resources


def _time(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC) if ts is not None else None


class GangDetector:
    KINDS = frozenset({GANG_UNSCHEDULABLE, PARTIAL_GANG})

    def __init__(self, settings: Detectors) -> None:
        self.settings = settings
        self._groups: dict[tuple[str, str], PodGroup] = {}
        self._pods: dict[str, _PodState] = {}  # pod uid -> state (Pending / Running pods of a group)
        self._members: dict[tuple[str, str], set[str]] = {}  # group -> pod uids
        self.skipped = 0

    def on_podgroup(self, event_type: str, group: PodGroup) -> None:
        if not group.name:
            self.skipped += 1
            return
        key = (group.namespace, group.name)
        if event_type == "DELETED":
            self._groups.pop(key, None)
        else:
            self._groups[key] = group

    def on_pod(self, event_type: str, pod: Pod) -> None:
        if not pod.uid:
            self.skipped += 1
            return
        old = self._pods.pop(pod.uid, None)
        if old is not None:
            members = self._members.get(old.group)
            if members is not None:
                members.discard(pod.uid)
                if not members:
                    del self._members[old.group]
        if event_type == "DELETED" or not pod.podgroup or pod.phase not in ("Pending", "Running"):
            return
        group = (pod.namespace, pod.podgroup)
        self._pods[pod.uid] = _PodState(group, pod.phase, bool(pod.node_name), pod.requests)
        self._members.setdefault(group, set()).add(pod.uid)

    def check(self, now: float) -> list[Signal]:
        signals: list[Signal] = []
        for key, group in self._groups.items():
            if group.phase not in WAITING_PHASES:
                continue
            running = held = waiting = 0
            holding: Resources = ()
            for uid in self._members.get(key, ()):
                state = self._pods[uid]
                running += state.phase == "Running"
                if state.bound:
                    held += 1
                    holding = res_add(holding, state.requests)
                elif state.phase == "Pending":
                    waiting += 1
            signal = self._unschedulable(group, now) if held == 0 and group.running == 0 else None
            if signal is None and running and waiting and group.min_member > 0 and held < group.min_member:
                signal = self._partial(group, running, held, waiting, holding)
            if signal is not None:
                signals.append(signal)
        return signals

    def _unschedulable(self, group: PodGroup, now: float) -> Signal | None:
        unsched = scheduled = None
        for cond in group.conditions:
            if cond.type == "Unschedulable" and cond.status == "True":
                unsched = cond
            elif cond.type == "Scheduled" and cond.status == "True":
                scheduled = cond
        if unsched is None:
            return None
        if group.phase in ("", "Pending") and "queue" in unsched.message.lower():
            return None  # waiting for its queue: QueueStarved's business
        t_unsched = unsched.last_transition_time
        newer = scheduled is None or (t_unsched is not None and t_unsched > (scheduled.last_transition_time or 0))
        if not newer and group.phase not in ("", "Pending", "Inqueue"):
            return None
        since = _time(min(t_unsched, now)) if newer and t_unsched is not None else None
        details: dict[str, Any] = {
            "podgroup_uid": group.uid, "phase": group.phase, "min_member": group.min_member,
            "min_resources": res_dict(group.min_resources), "reason": unsched.reason,
            "message": unsched.message[:1000], "job_kind": group.job_kind,
        }
        return Signal(
            kind=GANG_UNSCHEDULABLE, active=True,
            fingerprint=fingerprint(GANG_UNSCHEDULABLE, group.namespace, group.name, group.uid),
            severity="warning", namespace=group.namespace, queue=group.queue, job_name=group.job_name,
            subject=group.name,
            summary=f"PodGroup {group.namespace}/{group.name} (minMember {group.min_member}) cannot be scheduled: "
                    f"{unsched.reason or 'Unschedulable'}",
            details=details, for_seconds=self.settings.gang_unschedulable_seconds, since=since,
        )

    def _partial(self, group: PodGroup, running: int, held: int, waiting: int, holding: Resources) -> Signal:
        return Signal(
            kind=PARTIAL_GANG, fingerprint=fingerprint(PARTIAL_GANG, group.namespace, group.name, group.uid),
            active=True, severity="warning", namespace=group.namespace, queue=group.queue,
            job_name=group.job_name, subject=group.name,
            summary=f"PodGroup {group.namespace}/{group.name}: {held} of minMember {group.min_member} pods hold "
                    f"resources ({running} running) while {waiting} wait to be scheduled",
            details={"podgroup_uid": group.uid, "phase": group.phase, "min_member": group.min_member,
                     "running": running, "holding": held, "waiting": waiting,
                     "held_resources": res_dict(holding), "job_kind": group.job_kind},
            for_seconds=self.settings.partial_gang_seconds,
        )
