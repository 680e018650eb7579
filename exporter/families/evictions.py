"""`volcano_pod_evictions_total`: evicted and preempted pods per namespace, queue, reason and, where it is
known, the preemptor's queue (volcano-sh/volcano#4040). What counts as an eviction: see core.eviction.

Each pod counts once, by UID, whichever of its signals (its condition, its status reason, an Event) comes
first, also across relists: a counted UID is remembered while the pod exists and for `KEEP_SECONDS`
after (Events outlive their pod by the API server's event TTL, one hour by default). Evictions older than
the exporter process are not counted (a restarted exporter would count them a second time): the signal's
time must be newer, and a signal without a time (`status.reason: Evicted`) counts only when this process
saw the pod before without it.

`preemptor_queue`: Volcano's `preempt` action takes victims from the preemptor's own queue, so it is the
pod's queue; a kube-scheduler `Preempted` Event names the preemptor pod, whose queue counts when the
exporter knows that pod; `reclaim` (another queue took its share back) and the rest leave it empty.

Events about a pod the exporter no longer holds are attributed through a short memory of deleted pods
(`DeletedPods`, `RECENT_SECONDS`): a pod deleted during a watch gap reaches the exporter only as DELETED,
without the condition, and its Event then tells. That memory also holds at most `RECENT_MAX` pods, the
newest: at 300,000 pods a day ten minutes are ~2,000 deletions, but a burst (a 50,000-pod array
finishing, a namespace deleted) must not hold every pod for ten minutes; bench/soak.py's compressed day
(250 deletions a second) grew the exporter by 40 MB before this bound. Counter text is rendered per
series on change.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from volcano_monitor.core.eviction import PREEMPTION_REASONS, SAME_QUEUE_ACTIONS, EvictionEvent
from volcano_monitor.core.exposition import COUNTER, Family
from volcano_monitor.core.podview import Pod

EVICTIONS = Family("volcano_pod_evictions_total",
                   "Pods evicted or preempted (each pod once), by the queue of the pod, the reason (Volcano's "
                   "action: preempt, reclaim, ...; else Kubernetes' DisruptionTarget reason) and the preemptor's "
                   "queue where known; only evictions after this exporter process started.",
                   ("namespace", "queue", "reason", "preemptor_queue"), type=COUNTER)
JOB_PREEMPTED = Family(
    "volcano_job_preempted_pods",
    "Pods of the job preempted (Volcano's preempt or reclaim action, or kube-scheduler preemption; not evictions "
    "for the node's sake), each pod once, since this exporter process started. A gauge, so that one preemption "
    "can alert where a counter's rate would miss it. The series lasts while the job's PodGroup exists; with "
    "shards, each counts its own pods: sum across replicas. job_name is the PodGroup's name for pods of other "
    "operators.", ("namespace", "job_name", "queue"))
FAMILIES = (EVICTIONS, JOB_PREEMPTED)

KEEP_SECONDS = 2 * 3600.0
RECENT_SECONDS = 600.0
RECENT_MAX = 20_000  # ~2.6 MB of deleted pods at most (~130 B each)

Key = tuple[str, str, str, str]  # namespace, queue, reason, preemptor queue
Place = tuple[str, str, str, str]  # namespace, queue, podgroup, job name: where an evicted pod counts
GroupKey = tuple[str, str]  # namespace, podgroup


class DeletedPods:
    """Where recently deleted pods were, by UID: each kept between `keep_seconds` / 2 and `keep_seconds`,
    and at most `max_pods`, the newest.

    Why two generations rather than an expiry queue: a queue needs a (time, UID) record per pod beside the
    table, which more than doubled the bytes per pod (~330 B with the pod's name, unused, against ~130 B);
    at the bound that was 6.6 MB, and the soak's exporter grew by it for the first ten minutes. Here the
    newer table takes the deletions; when it is `keep_seconds` / 2 old or holds half the bound, it becomes
    the older one and the previous older one goes, all at once. New tables each time also means no table
    left sized for a past burst (a dict never shrinks)."""

    def __init__(self, keep_seconds: float, max_pods: int, now: float) -> None:
        self.half_life = keep_seconds / 2
        self.half_max = max(1, max_pods // 2)
        self.newer: dict[str, Place] = {}
        self.older: dict[str, Place] = {}
        self._newer_since = now
        self._places: dict[Place, Place] = {}  # one tuple per job, shared by the newer table's pods

    def add(self, uid: str, place: Place, now: float) -> None:
        self.prune(now)
        if len(self.newer) >= self.half_max:
            self._rotate(now)
        self.newer[uid] = self._places.setdefault(place, place)

    def get(self, uid: str) -> Place | None:
        return self.newer.get(uid) or self.older.get(uid)

    def prune(self, now: float) -> None:
        age = now - self._newer_since
        if age < 0:  # the clock went back: age the generation from now
            self._newer_since = now
        elif age >= 2 * self.half_life:
            self.newer, self.older, self._places, self._newer_since = {}, {}, {}, now
        elif age >= self.half_life:
            self._rotate(now)

    def _rotate(self, now: float) -> None:
        self.newer, self.older, self._places, self._newer_since = {}, self.newer, {}, now

    def __contains__(self, uid: str) -> bool:
        return uid in self.newer or uid in self.older

    def __iter__(self) -> Iterator[str]:
        yield from self.older
        yield from self.newer

    def __len__(self) -> int:
        return len(self.newer) + len(self.older)


class Evictions:
    """The counter and what it has counted. Not locked: the store's lock guards it."""

    def __init__(self, observe_since: float, clock: Callable[[], float] = time.time) -> None:
        self.observe_since = observe_since
        self.clock = clock
        self.counts: dict[Key, int] = {}
        self.text: dict[Key, bytes] = {}
        self.version = 0  # bumped on every count (the store caches the gzip member)
        self.counted: dict[str, float | None] = {}  # pod UID -> forget-at (None while the pod exists)
        self._expiring: deque[tuple[float, str]] = deque()
        self.recent = DeletedPods(RECENT_SECONDS, RECENT_MAX, clock())  # for Events that come after
        # volcano_job_preempted_pods, by PodGroup: (job name, queue, count) and the rendered line
        self.preempted: dict[GroupKey, tuple[str, str, int]] = {}
        self.preempted_text: dict[GroupKey, bytes] = {}

    def on_pod(self, pod: Pod, queue: str, previous: Pod | None, deleted: bool) -> None:
        """A pod event (its attribution's `queue`), with the version this process held before, if any."""
        self._prune()
        if pod.disruption and pod.uid and pod.uid not in self.counted:
            newer = pod.disrupted_at > self.observe_since if pod.disrupted_at is not None else (
                previous is not None and previous.uid == pod.uid and not previous.disruption)
            if newer:
                preemptor = queue if pod.disruption in SAME_QUEUE_ACTIONS else ""
                self._count(pod.uid, (pod.namespace, queue, pod.disruption, preemptor),
                            (pod.namespace, queue, pod.podgroup, pod.job_name))
        if deleted and pod.uid:
            now = self.clock()
            if pod.uid in self.counted:
                self.counted[pod.uid] = now + KEEP_SECONDS
                self._expiring.append((now + KEEP_SECONDS, pod.uid))
            self.recent.add(pod.uid, (pod.namespace, queue, pod.podgroup, pod.job_name), now)

    def on_event(self, event: EvictionEvent, victim: Place | None, preemptor_queue: str) -> bool:
        """An eviction Event; `victim` is where the exporter holds the pod (None: look among the recently
        deleted). False when the pod is unknown (not a Volcano pod, another shard's, or long gone)."""
        self._prune()
        if victim is None:
            victim = self.recent.get(event.pod_uid)
        if victim is None:
            return False
        if event.pod_uid in self.counted or event.at is None or event.at <= self.observe_since:
            return True
        namespace, queue = victim[:2]
        if event.reason in SAME_QUEUE_ACTIONS:
            preemptor_queue = queue
        self._count(event.pod_uid, (namespace, queue, event.reason, preemptor_queue), victim)
        if event.pod_uid in self.recent:  # already gone: forget it in time
            forget_at = self.clock() + KEEP_SECONDS
            self.counted[event.pod_uid] = forget_at
            self._expiring.append((forget_at, event.pod_uid))
        return True

    def _count(self, uid: str, key: Key, place: Place) -> None:
        self.counted[uid] = None
        n = self.counts[key] = self.counts.get(key, 0) + 1
        self.text[key] = EVICTIONS.line(key, n).encode()
        self.version += 1
        namespace, queue, podgroup, job_name = place
        if key[2] in PREEMPTION_REASONS and podgroup:
            group = (namespace, podgroup)
            job_name, queue, before = self.preempted.get(group, (job_name or podgroup, queue, 0))
            self.preempted[group] = (job_name, queue, before + 1)
            self.preempted_text[group] = JOB_PREEMPTED.line((namespace, job_name, queue), before + 1).encode()

    def forget_group(self, group: GroupKey) -> None:
        """The PodGroup is gone (every shard sees it): its job's preemption count goes with it."""
        if self.preempted.pop(group, None) is not None:
            del self.preempted_text[group]
            self.version += 1

    def _prune(self) -> None:
        now = self.clock()
        while self._expiring and self._expiring[0][0] <= now:
            forget_at, uid = self._expiring.popleft()
            if self.counted.get(uid) == forget_at:
                del self.counted[uid]
        self.recent.prune(now)

    def write(self, out: list[bytes], allows: Callable[[str], bool]) -> None:
        if self.text and allows(EVICTIONS.name):
            out.append(EVICTIONS.header.encode())
            out.extend(self.text[key] for key in sorted(self.text))
        if self.preempted_text and allows(JOB_PREEMPTED.name):
            out.append(JOB_PREEMPTED.header.encode())
            out.extend(self.preempted_text[group] for group in sorted(self.preempted_text))
