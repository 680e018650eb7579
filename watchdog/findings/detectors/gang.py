"""Gang scheduling detectors: GangUnschedulable and PartialGang (periodic: both are "for longer than").

GangUnschedulable: a PodGroup waiting (`Pending` or `Inqueue`) with none of its pods holding
resources, for longer than `gang_unschedulable_seconds` — whatever its conditions say. Real Volcano
(v1.12) leaves a gang bigger than the whole cluster `Pending` with no conditions at all; only the
scheduler's Events say why. So the rule is the phase and the time, and the reason is whichever is
newer: the scheduler's latest Event about the group (`watchdog.state.events.SchedulerNotes`) or its
`Unschedulable` condition. When the episode began:
- a group never scheduled (no `Scheduled` condition): its creation — a watchdog started late does
  not wait the whole threshold again;
- an `Unschedulable` condition newer than `Scheduled`: that condition's time;
- otherwise (a group back to Pending/Inqueue, e.g. a restarted job): when the detector first sees it
  (Volcano keeps old conditions, so their times say nothing about now).
A group whose Volcano Job was deleted is skipped: the garbage collector is about to remove it (real
Volcano re-enqueues the empty group, Running -> Pending -> Inqueue, in the meantime).

One cause, one alert: a group that waits only because its queue, an ancestor or the cluster is full
with what already runs — it would fit alone, and Volcano admits it once something finishes — is
QueueStarved's business (`watchdog.findings.detectors.queue`), and raises no GangUnschedulable. The detector
asks the queue detector (`blocked`) with the group's minResources. A gang that does not fit even
an empty queue or cluster, or that was admitted but cannot be placed (NotEnoughResources,
fragmentation), is GangUnschedulable.

With `topology` (`findings.topology.TopologyView.verdict`), a gang whose PodGroup asks a hard network topology
and that would fit the cluster's free GPUs but inside no HyperNode of an allowed tier says so: its summary
gives `topology_fragmented` and the numbers (needs 8 GPUs in one HyperNode of tier <= 1, the most one takes,
what the cluster could take), the scheduler's own words follow, and `details.topology` holds the same.

With `expected` (the last round of `findings.expected`), GangUnschedulable says when the job is expected to
start and what it waits for, or why it never will (`detectors.expect`); the fingerprint does not depend on it.

PartialGang: some pods of a group Running (holding nodes, GPUs) while fewer than minMember pods
hold resources and others wait unbound — the gang will not start, and what it holds is wasted.
Volcano's phase for this is `Unknown`; the detector counts the pods itself.

`check()` reports every condition that holds now with `for_seconds` set to the configured threshold;
the alert book keeps the episode pending until then (and across restarts), and `resolve_missing`
with `KINDS` resolves what a round no longer reports.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from volcano_monitor.core.model import Job, PodGroup, Resources, res_add, res_dict
from volcano_monitor.core.pending import TOPOLOGY_FRAGMENTED
from volcano_monitor.core.podview import Pod
from volcano_monitor.core.topology import Verdict
from volcano_monitor.watchdog.findings.detectors.expect import Expected, expected_clause, expected_details
from volcano_monitor.watchdog.findings.detectors.settings import Detectors
from volcano_monitor.watchdog.state.events import SchedulerNotes
from volcano_monitor.watchdog.state.signals import GANG_UNSCHEDULABLE, PARTIAL_GANG, Signal, fingerprint

__all__ = ["Blocked", "GangDetector"]

WAITING_PHASES = frozenset({"", "Pending", "Inqueue", "Unknown"})
UNSCHEDULED_PHASES = frozenset({"", "Pending", "Inqueue"})
MAX_DELETED_JOBS = 10_000
SUMMARY_MESSAGE_LEN = 300

# (queue, demand) -> what QueueStarved would say blocks it (None: nothing; it waits for another reason)
Blocked = Callable[[str, Resources], dict[str, Any] | None]
# a waiting PodGroup -> `topology_fragmented`'s verdict (None: it fits a HyperNode it may use, or asks none)
Topology = Callable[[PodGroup], Verdict | None]


class _PodState(NamedTuple):
    group: tuple[str, str]
    phase: str
    bound: bool
    requests: Resources


def _time(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC) if ts is not None else None


class GangDetector:
    KINDS = frozenset({GANG_UNSCHEDULABLE, PARTIAL_GANG})

    def __init__(self, settings: Detectors, notes: SchedulerNotes | None = None,
                 blocked: Blocked | None = None, expected: Expected | None = None,
                 topology: Topology | None = None) -> None:
        """`expected`: the last estimate of a job's start (`findings.expected`), put into GangUnschedulable's
        details and summary (`detectors.expect`). `topology`: whether a hard-topology gang is fragmented
        (`findings.topology`)."""
        self.settings = settings
        self.notes = notes if notes is not None else SchedulerNotes()
        self.blocked = blocked
        self.expected = expected
        self.topology = topology
        self._groups: dict[tuple[str, str], PodGroup] = {}
        self._pods: dict[str, _PodState] = {}  # pod uid -> state (Pending / Running pods of a group)
        self._members: dict[tuple[str, str], set[str]] = {}  # group -> pod uids
        self._deleted_jobs: OrderedDict[tuple[str, str], None] = OrderedDict()  # Volcano Jobs seen DELETED
        self._blocked_at: dict[tuple[str, str], float] = {}  # group -> last check it waited for its queue
        self.skipped = 0

    def on_job(self, event_type: str, job: Job) -> None:
        """Only to know which groups are orphans of a deleted Job: remembered while its group (named
        `<job>-<uid>`) lives — the garbage collector deletes it ~15 s later — and bounded anyway."""
        key = (job.namespace, job.name)
        if event_type == "DELETED":
            if (job.namespace, f"{job.name}-{job.uid}") not in self._groups:
                return  # no group left to skip
            self._deleted_jobs[key] = None
            self._deleted_jobs.move_to_end(key)
            while len(self._deleted_jobs) > MAX_DELETED_JOBS:
                self._deleted_jobs.popitem(last=False)
        else:
            self._deleted_jobs.pop(key, None)

    def on_podgroup(self, event_type: str, group: PodGroup) -> None:
        if not group.name:
            self.skipped += 1
            return
        key = (group.namespace, group.name)
        if event_type == "DELETED":
            self._groups.pop(key, None)
            self._blocked_at.pop(key, None)
            self.notes.forget(group.namespace, group.name)
            if group.owner_kind == "Job":
                self._deleted_jobs.pop((group.namespace, group.owner_name), None)
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
        if group.owner_kind == "Job" and (group.namespace, group.owner_name) in self._deleted_jobs:
            return None  # an orphan the garbage collector is about to delete
        key = (group.namespace, group.name)
        if self.blocked is not None and group.min_resources and self.blocked(group.queue, group.min_resources):
            self._blocked_at[key] = now
            return None  # waits for its queue or the cluster to free up: QueueStarved
        unsched = scheduled = None
        for cond in group.conditions:
            if cond.type == "Unschedulable" and cond.status == "True":
                unsched = cond
            elif cond.type == "Scheduled" and cond.status == "True":
                scheduled = cond
        t_unsched = unsched.last_transition_time if unsched is not None else None
        t_scheduled = scheduled.last_transition_time if scheduled is not None else None
        newer = t_unsched is not None and t_unsched > (t_scheduled or 0)
        if group.phase not in UNSCHEDULED_PHASES and not (unsched is not None and (scheduled is None or newer)):
            return None  # e.g. Unknown: only with a current Unschedulable condition
        since: float | None = None
        if scheduled is None:
            since = group.creation_timestamp if group.creation_timestamp is not None else t_unsched
        elif newer:
            since = t_unsched
        blocked_at = self._blocked_at.get(key)
        if blocked_at is not None and since is not None:
            since = max(since, blocked_at)  # the time it waited for its queue was QueueStarved's
        reason, message, source = "", "", ""
        if unsched is not None:
            reason, message, source = unsched.reason, unsched.message, "condition"
        note = self.notes.latest(group.namespace, group.name, group.uid)
        if note is not None and (unsched is None or t_unsched is None or (note.at or 0) >= t_unsched):
            reason, message, source = note.reason, note.message, "event"
        details: dict[str, Any] = {
            "podgroup_uid": group.uid, "phase": group.phase, "min_member": group.min_member,
            "min_resources": res_dict(group.min_resources), "reason": reason, "message": message[:1000],
            "source": source, "job_kind": group.job_kind,
        }
        why = message or reason or "no reason given"
        if len(why) > SUMMARY_MESSAGE_LEN:
            why = why[:SUMMARY_MESSAGE_LEN - 1] + "…"
        fragmented = self.topology(group) if self.topology is not None else None
        if fragmented is not None:
            details["topology"] = {"reason": TOPOLOGY_FRAGMENTED, "gang_gpus": fragmented.gang_gpus,
                                   "highest_tier": fragmented.highest_tier,
                                   "largest_gang_gpus": fragmented.largest_gang, "hypernode": fragmented.hypernode,
                                   "cluster_gpus": fragmented.cluster_gpus, "message": fragmented.message}
            why = f"{TOPOLOGY_FRAGMENTED}: {fragmented.message}" + (f" (scheduler: {why})" if reason or message
                                                                    else "")
        when = ""
        est = self.expected(group.namespace, group.owner_name or group.name) if self.expected is not None else None
        if est is not None:
            details.update(expected_details(est))
            when = f"; {expected_clause(est, now)}"
        return Signal(
            kind=GANG_UNSCHEDULABLE, active=True,
            fingerprint=fingerprint(GANG_UNSCHEDULABLE, group.namespace, group.name, group.uid),
            severity="warning", namespace=group.namespace, queue=group.queue, job_name=group.job_name,
            subject=group.name,
            summary=f"PodGroup {group.namespace}/{group.name} (minMember {group.min_member}) cannot be scheduled "
                    f"({group.phase or 'Pending'}): {why}{when}",
            details=details, for_seconds=self.settings.gang_unschedulable_seconds,
            since=_time(min(since, now)) if since is not None else None,
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
