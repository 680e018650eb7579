"""The store's part for `volcano_job_pending_reason`: the waiting jobs of one shard, the queue tree and
the rendered reasons, kept current on events (the explanation itself is `core.pending`).

Every shard keeps the Queues and the waiting PodGroups; each explains its own Jobs and its own PodGroups
of other operators. A job's row is redone when the job or its group changes. The queue-dependent part (a
`Verdict`) is shared by the jobs of one queue and request: after queue changes (root's `allocated` moves
with every placement) `refresh`, at the next scrape, recomputes each distinct verdict once and redoes only
the jobs whose verdict's labels changed. Callers hold the store's lock.

It also keeps `volcano_job_queue_position` (the order is `core.queueorder`'s). A waiting job's place
depends on every waiting PodGroup of its queue, whichever shard owns it, so every shard ranks from the
waiting PodGroups it already keeps. An event only marks the queues it touches (a group joining,
leaving or moving, its sort key changing; a job of this shard starting or stopping to wait); `refresh`
re-ranks just those queues once, however many events came since the last scrape, and rewrites only
the rows whose position moved. A PodGroup's status churn (conditions rewritten every second) changes
no sort key and marks nothing.

An unsharded exporter that has seen a HyperNode also says `topology_fragmented` (`core.pending.with_topology`,
in place of `unschedulable`/`waiting` only): `judge` (exporter/topology.py) gives the waiting hard-topology
groups found fragmented, at most every ~10 s from `refresh`, and only the rows whose verdict changed are redone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from volcano_monitor.core.model import Job, PodGroup, Queue
from volcano_monitor.core.pending import (
    Explanation,
    Verdict,
    VerdictKey,
    Verdicts,
    explain,
    group_waiting,
    is_job_group,
    job_waiting,
    verdict,
    verdict_key,
    with_topology,
)
from volcano_monitor.core.queueorder import Priorities, PriorityClass, SortKey, sort_key
from volcano_monitor.exporter.cardinality import FamilyFilter
from volcano_monitor.exporter.families import job as job_families
from volcano_monitor.exporter.families import queue as queue_families
from volcano_monitor.exporter.rows import Rows

# (waiting hard-topology groups) -> the fragmented ones with their message, or None: not judged this time
Judge = Callable[[list[tuple[tuple[str, str], PodGroup]]], dict[tuple[str, str], str] | None]

GroupKey = tuple[str, str]  # (namespace, podgroup name)
PODGROUP_PREFIX = "podgroup:"  # row keys of PodGroups explained without a Volcano Job
Labels = tuple[str, str, str]  # reason, queue, resource: what the row shows


def _labels(found: Verdict | None) -> Labels | None:
    return None if found is None else (found.reason, found.queue, found.resource)


class WaitingJobs:
    def __init__(self, served: FamilyFilter | None, groups: Mapping[GroupKey, object],
                 emit_queues: bool = True) -> None:
        """`groups`: every PodGroup the shard knows of (the store's owners), waiting or not. `emit_queues`:
        this shard renders the per-queue rows (shard 0)."""
        self.rows = Rows((job_families.PENDING_REASON,), served=served)
        self.positions = Rows((job_families.QUEUE_POSITION,), served=served)
        # volcano_queue_oldest_waiting_job_created_timestamp_seconds, by queue: ranked with the positions
        self.oldest = Rows(queue_families.WAITING, served=served if emit_queues else FamilyFilter(allow=()))
        self.priorities = Priorities()
        self._queue_waiting: dict[str, dict[GroupKey, SortKey]] = {}  # every waiting PodGroup, by queue
        self._group_queue: dict[GroupKey, str] = {}  # a waiting group -> its queue there
        self._dirty_queues: set[str] = set()
        self._placed: dict[str, tuple[str, int]] = {}  # position row key -> (queue, position) shown
        self._queue_rows: dict[str, set[str]] = {}  # queue -> the position rows shown in it
        self._own_row_of_group: dict[GroupKey, str] = {}
        self.groups = groups
        self.queues: dict[str, Queue] = {}
        self.waiting_groups: dict[GroupKey, PodGroup] = {}
        self.jobs: dict[str, Job] = {}  # this shard's waiting Jobs, by job key
        self._job_of_group: dict[GroupKey, str] = {}  # a waiting job's group -> its key
        self.own_groups: dict[str, GroupKey] = {}  # this shard's PodGroups of other operators, by row key
        self._shown: dict[str, Labels] = {}
        self._verdicts: Verdicts = {}
        self._verdict_rows: dict[VerdictKey, set[str]] = {}
        self._row_verdict: dict[str, VerdictKey] = {}
        self._changed = False
        # Set by the app to its Queue informer's "listed" flag: until then a job's queue not seen yet is not
        # called missing (the Job informer may list before the Queue one).
        self.queues_listed: Callable[[], bool] = lambda: True
        self._listed = False
        # topology_fragmented (exporter/topology.py; unsharded only): set by the store when it may say it
        self.judge: Judge | None = None
        self._hard: set[GroupKey] = set()  # waiting groups with a hard networkTopology
        self._fragmented: dict[GroupKey, str] = {}  # the ones judged fragmented, with the message

    # ---- events ------------------------------------------------------------------------------------------

    def on_job(self, key: str, job: Job | None) -> None:
        """A Job of this shard changed; None: deleted (or not exported at all)."""
        old = self.jobs.pop(key, None)
        if old is not None:
            group_key = (old.namespace, old.podgroup)
            self._touch(group_key)
            if self._job_of_group.get(group_key) == key:
                del self._job_of_group[group_key]
        if job is None or not job_waiting(job) or not (self.rows.any or self.positions.any):
            self._show(key, None)
            return
        self.jobs[key] = job
        self._job_of_group[(job.namespace, job.podgroup)] = key
        self._touch((job.namespace, job.podgroup))
        self._explain_job(key)

    def on_any_group(self, group_key: GroupKey, group: PodGroup | None) -> None:
        """Any PodGroup changed (every shard sees them all); None: deleted. Call after `groups` is updated."""
        if group is not None and group_waiting(group):
            self.waiting_groups[group_key] = group
            self._enter(group_key, group)
            if group.network_topology is not None and group.network_topology.mode == "hard":
                self._hard.add(group_key)
            else:
                self._hard.discard(group_key)
                self._fragmented.pop(group_key, None)
        else:
            self.waiting_groups.pop(group_key, None)
            self._leave(group_key)
            self._hard.discard(group_key)
            self._fragmented.pop(group_key, None)
        job_key = self._job_of_group.get(group_key)
        if job_key is not None:
            self._explain_job(job_key)

    def on_own_group(self, row_key: str, group_key: GroupKey, group: PodGroup | None) -> None:
        """A PodGroup of this shard changed; explained here unless it is a Volcano Job's (with its Job)."""
        row_key = PODGROUP_PREFIX + row_key
        self._touch(group_key)
        if group is None or is_job_group(group) or not group_waiting(group) or \
                not (self.rows.any or self.positions.any):
            self.own_groups.pop(row_key, None)
            if self._own_row_of_group.get(group_key) == row_key:
                del self._own_row_of_group[group_key]
            self._show(row_key, None)
        else:
            self.own_groups[row_key] = group_key
            self._own_row_of_group[group_key] = row_key
            self._explain_group(row_key)

    def on_priority_class(self, priority_class: PriorityClass, deleted: bool) -> None:
        """A PriorityClass changed: when a value (or the default) did, every waiting group's key again."""
        if not self.priorities.on_class(priority_class, deleted):
            return
        for members in self._queue_waiting.values():
            for group_key in members:
                members[group_key] = self._sort_key(self.waiting_groups[group_key])
        self._dirty_queues.update(self._queue_waiting)

    def on_queue(self, queue: Queue, deleted: bool) -> None:
        if deleted:
            self.queues.pop(queue.name, None)
        else:
            self.queues[queue.name] = queue
        self._changed = True

    # ---- scrape ------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """After queue changes: each distinct verdict again, and the jobs of those whose labels changed (the
        message, with live amounts, is the watchdog API's: the rows need not follow every placement)."""
        if self._dirty_queues:
            self._rank()
        if self.judge is not None and self._hard:
            self._judge(self.judge)
        complete = self._complete()
        if not self._changed and complete:
            return
        self._changed = False
        for verdict_of in list(self._verdict_rows):
            fresh = verdict(verdict_of, self.queues, complete=complete)
            known = verdict_of in self._verdicts
            old = self._verdicts.get(verdict_of)
            self._verdicts[verdict_of] = fresh
            if known and _labels(old) == _labels(fresh):
                continue
            for key in list(self._verdict_rows.get(verdict_of, ())):
                if key.startswith(PODGROUP_PREFIX):
                    self._explain_group(key)
                else:
                    self._explain_job(key)

    def _judge(self, judge: Judge) -> None:
        """The hard-topology groups' verdicts again (the judge says when: every ~10 s); rows redone only
        for the groups whose verdict changed."""
        found = judge([(key, self.waiting_groups[key]) for key in self._hard])
        if found is None:
            return
        before, self._fragmented = self._fragmented, found
        for group_key in set(before) | set(found):
            if before.get(group_key) == found.get(group_key):
                continue
            job_key = self._job_of_group.get(group_key)
            if job_key is not None:
                self._explain_job(job_key)
            row_key = self._own_row_of_group.get(group_key)
            if row_key is not None:
                self._explain_group(row_key)

    # ---- positions ---------------------------------------------------------------------------------------

    def _sort_key(self, group: PodGroup) -> SortKey:
        return sort_key(group, self.priorities.value(group.priority_class))

    def _enter(self, group_key: GroupKey, group: PodGroup) -> None:
        """A group waits (new, or changed): re-rank its queue only when its place may have moved."""
        key = self._sort_key(group)
        queue = self._group_queue.get(group_key)
        if queue is not None and queue != group.queue:
            self._leave(group_key)
            queue = None
        members = self._queue_waiting.setdefault(group.queue, {})
        if queue is None or members.get(group_key) != key:
            members[group_key] = key
            self._group_queue[group_key] = group.queue
            self._dirty_queues.add(group.queue)

    def _leave(self, group_key: GroupKey) -> None:
        queue = self._group_queue.pop(group_key, None)
        if queue is None:
            return
        members = self._queue_waiting[queue]
        del members[group_key]
        if not members:
            del self._queue_waiting[queue]
        self._dirty_queues.add(queue)

    def _touch(self, group_key: GroupKey) -> None:
        """Whether this shard shows the group's row may have changed: its queue is ranked again."""
        queue = self._group_queue.get(group_key)
        if queue is not None:
            self._dirty_queues.add(queue)

    def _row_of(self, group_key: GroupKey) -> tuple[str, str, str] | None:
        """This shard's row for a waiting group: (row key, namespace, job name), or None (another shard's,
        or a Volcano Job's group whose Job does not wait)."""
        job_key = self._job_of_group.get(group_key)
        if job_key is not None:
            job = self.jobs[job_key]
            return job_key, job.namespace, job.name
        row_key = self._own_row_of_group.get(group_key)
        if row_key is not None:
            group = self.waiting_groups[group_key]
            return row_key, group.namespace, group.owner_name or group.name
        return None

    def _rank(self) -> None:
        """Each marked queue: its oldest waiting job, and its jobs' places in the scheduler's order."""
        dirty, self._dirty_queues = self._dirty_queues, set()
        if not self.positions.any and not self.oldest.any:
            return
        for queue in dirty:
            members = self._queue_waiting.get(queue, {})
            if self.oldest.any:
                self._show_oldest(queue, members)
            if self.positions.any:
                self._rank_queue(queue, members)

    def _show_oldest(self, queue: str, members: Mapping[GroupKey, SortKey]) -> None:
        created = min((key[1] for key in members.values()), default=float("inf"))
        if created == float("inf"):  # none waits (or none has a creation time)
            self.oldest.delete(queue)
        else:
            self.oldest.put(queue, (queue_families.render_oldest_waiting(queue, created),))

    def _rank_queue(self, queue: str, members: Mapping[GroupKey, SortKey]) -> None:
        """One queue's positions; rows rewritten only where the position moved."""
        shown: set[str] = set()
        for position, group_key in enumerate(sorted(members, key=members.__getitem__), 1):
            row = self._row_of(group_key)
            if row is None:
                continue
            row_key, namespace, job_name = row
            shown.add(row_key)
            before = self._placed.get(row_key)
            if before == (queue, position):
                continue
            if before is not None and before[0] != queue:
                self._queue_rows.get(before[0], set()).discard(row_key)
            self._placed[row_key] = (queue, position)
            self.positions.put(row_key, (job_families.render_position(namespace, job_name, queue, position),))
        for row_key in self._queue_rows.get(queue, set()) - shown:
            if self._placed.get(row_key, ("", 0))[0] == queue:
                del self._placed[row_key]
                self.positions.delete(row_key)
        if shown:
            self._queue_rows[queue] = shown
        else:
            self._queue_rows.pop(queue, None)

    # ---- internals ---------------------------------------------------------------------------------------

    def _complete(self) -> bool:
        if not self._listed and self.queues_listed():
            self._listed = True
            self._changed = True  # the verdicts made meanwhile are redone now
        return self._listed

    def _explain_job(self, key: str) -> None:
        """A waiting Job whose PodGroup exists but no longer waits is the scheduler's no more: no row."""
        job = self.jobs[key]
        group_key = (job.namespace, job.podgroup)
        group = self.waiting_groups.get(group_key)
        if group is None and group_key in self.groups:
            self._show(key, None)
            return
        queue = group.queue if group is not None else job.queue
        why = explain(queue, self.queues, group, job, verdicts=self._verdicts, complete=self._complete())
        fragmented = self._fragmented.get(group_key)
        if fragmented:
            why = with_topology(why, fragmented)
        self._show(key, why, job.namespace, job.name, verdict_key(queue, group))

    def _explain_group(self, row_key: str) -> None:
        group = self.waiting_groups.get(self.own_groups[row_key])
        if group is None:
            self._show(row_key, None)
            return
        why = explain(group.queue, self.queues, group, None, verdicts=self._verdicts, complete=self._complete())
        fragmented = self._fragmented.get(self.own_groups[row_key])
        if fragmented:
            why = with_topology(why, fragmented)
        self._show(row_key, why, group.namespace, group.owner_name or group.name, verdict_key(group.queue, group))

    def _show(self, key: str, why: Explanation | None, namespace: str = "", job_name: str = "",
              verdict_of: VerdictKey | None = None) -> None:
        previous = self._row_verdict.get(key)
        if previous is not None and previous != verdict_of:
            del self._row_verdict[key]
            rows = self._verdict_rows[previous]
            rows.discard(key)
            if not rows:
                del self._verdict_rows[previous]
                self._verdicts.pop(previous, None)
        if why is None or verdict_of is None:
            self._shown.pop(key, None)
            self.rows.delete(key)
            return
        if previous != verdict_of:
            self._row_verdict[key] = verdict_of
            self._verdict_rows.setdefault(verdict_of, set()).add(key)
        labels = (why.reason, why.queue, why.resource)
        if self._shown.get(key) != labels:
            self._shown[key] = labels
            self.rows.put(key, (job_families.render_pending(namespace, job_name, why),))
