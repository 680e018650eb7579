"""When will a waiting job start: the queues played forward from now, as Slurm computes its expected start
times (`squeue --start`) from its own scheduler's plan.

Pure functions over plain inputs (the queues, the cluster's room, the running and waiting jobs, run
durations from the ledger): no I/O, so the watchdog's periodic pass, the tests and `bench/eta.py` call the
same code. The model, in the words of the code below:

- **Running jobs end at their expected end.** A run's length is drawn from the run durations the ledger has
  seen: its workload's (namespace + workload), else its queue's, else the whole cluster's, else
  `DEFAULT_RUN_SECONDS`. A level is used when it has at least `MIN_RUNS` runs and one of them lasted longer
  than this run has already lasted: the expected length is the median of the runs longer than the elapsed
  time (a job that has run 50 minutes of a workload whose runs take 10 or 60 minutes will take 60), the
  low and high bounds their first and third quartiles. A run that outlasted every recorded one gets the
  default as its remaining time.
- **Waiting jobs are admitted in Volcano's order** (`core.queueorder.sort_key`: priority, then the older
  PodGroup, then the name; the order the simulator's scheduler and Volcano's enqueue take jobs in), each
  when its gang's request (PodGroup `minResources`) fits every capped queue on its path to the root and the
  cluster's room: the same rules as `core.pending.shortage`. A job that does not fit is skipped, not waited
  for: a later, smaller job that fits starts first (recorded `queue-order`). An admitted job then runs for
  its workload's median length (the low and high bounds: its quartiles) and frees its room at the end. Its
  first pod runs `start_latency` after its admission (the caller's choice; the watchdog's: 1.5 s, as
  recorded), which it holds room for too.
- **Node fit is checked once, not played:** the gang's largest single pod must fit some node's allocatable,
  else the job never starts (`node_too_small`). Where pods land is not simulated, so a cluster whose free
  room is fragmented across nodes starts jobs later than estimated.
- **A job that can never start** (its queue or a parent missing or closed, a capability or the cluster below
  its request, its largest pod bigger than any node, or a reason the caller knows such as
  `min_available_above_pods`) gets no estimate and that reason; one still waiting after `HORIZON_SECONDS`
  gets `beyond_horizon`.

Three plays (low, median, high lengths) give `start`, `low` and `high`. Each play is driven by an event heap
over end times, and a job is tried again only when the queue or cluster resource that stopped it gained
enough room for it (a heap per blocking resource, ordered by the amount asked). Jobs of one queue with the
same request are one class: only the first of a class is tried, since the others cannot fit where it does
not. So a round costs about (jobs + ends) x log, not jobs x ends.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from volcano_monitor.core.model import ROOT_QUEUE, Queue
from volcano_monitor.core.pending import (
    CLOSED_STATES,
    CLUSTER_TOO_SMALL,
    EPSILON,
    QUEUE_CLOSED,
    QUEUE_MISSING,
    QUEUE_TOO_SMALL,
    queue_path,
)
from volcano_monitor.core.queueorder import SortKey
from volcano_monitor.watchdog.findings.redact import when_ends

DEFAULT_RUN_SECONDS = 3600.0  # a run nothing is known about (no workload, queue or cluster history)
MIN_RUNS = 3  # runs a level needs before its durations are trusted over the next level's
HORIZON_SECONDS = 30 * 86400.0  # a job not started within this is `beyond_horizon`
# From admission to its first pod running: the scheduler's period (1 s), the job controller creating the pods,
# binding, the container starting. Recorded on real Volcano (`queue-order`): `holder`'s pod ended at 15.8 s,
# `urgent`'s and `plain`'s ran at 17.2 s. The room is held from admission, so each job admitted after another's
# end adds it again. (The simulator takes 3 s of its time: bench/eta.py passes that.)
START_LATENCY_SECONDS = 1.5
NODE_TOO_SMALL = "node_too_small"
BEYOND_HORIZON = "beyond_horizon"
CLUSTER = ""  # the scope key of the cluster's room (a queue cannot be named "")
ROOM_NOW = "room now"

Amounts = Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Running:
    """A job holding room now."""

    namespace: str
    name: str
    queue: str
    workload: str
    started: float  # epoch seconds
    holds: Amounts  # what its pods request, in base units


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job waiting to start. `admitted`: its PodGroup is past enqueue (Inqueue): it takes its room first."""

    uid: str
    namespace: str
    name: str
    queue: str
    workload: str
    order: SortKey  # core.queueorder.sort_key of its PodGroup
    request: Amounts  # the gang's minResources
    largest_pod: Amounts = field(default_factory=dict)  # the gang's largest single pod; {} when unknown
    admitted: bool = False
    never: str = ""  # a reason the caller knows it cannot start (core.pending reason), else ""


@dataclass(frozen=True, slots=True)
class Estimate:
    """Expected start (epoch seconds) with its low/high range and what it waits for; or, when `start` is
    None, `reason` says why there is none."""

    start: float | None
    low: float | None
    high: float | None
    waits_for: str  # "when research/llama-pretrain ends", "room now", or the reason's words
    reason: str = ""  # "" with an estimate; else queue_missing, queue_too_small, node_too_small, ...


def quantile(values: Sequence[float], q: float, lo: int = 0) -> float:
    """The q-quantile of sorted `values[lo:]`, linearly interpolated (numpy's default)."""
    n = len(values) - lo
    pos = q * (n - 1)
    i = math.floor(pos)
    if i + 1 >= n:
        return values[lo + n - 1]
    return values[lo + i] + (values[lo + i + 1] - values[lo + i]) * (pos - i)


Bounds = tuple[float, float, float]  # low, median, high


class Durations:
    """Run durations in seconds from the ledger, sorted per workload, per queue and for the cluster."""

    def __init__(self, workloads: Mapping[tuple[str, str], Sequence[float]] | None = None,
                 queues: Mapping[str, Sequence[float]] | None = None, cluster: Sequence[float] = (),
                 default: float = DEFAULT_RUN_SECONDS) -> None:
        self.workloads = {k: sorted(v) for k, v in (workloads or {}).items()}
        self.queues = {k: sorted(v) for k, v in (queues or {}).items()}
        self.cluster = sorted(cluster)
        self.default = default

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[str, str, str, float]], default: float = DEFAULT_RUN_SECONDS) -> Durations:
        """From (namespace, workload, queue, seconds) of finished runs."""
        workloads: dict[tuple[str, str], list[float]] = {}
        queues: dict[str, list[float]] = {}
        cluster: list[float] = []
        for namespace, workload, queue, seconds in runs:
            if seconds < 0:
                continue
            workloads.setdefault((namespace, workload), []).append(seconds)
            queues.setdefault(queue, []).append(seconds)
            cluster.append(seconds)
        return cls(workloads, queues, cluster, default)

    def length(self, namespace: str, workload: str, queue: str, elapsed: float = 0.0) -> Bounds:
        """The run's total length (low, median, high) given it has lasted `elapsed` seconds: the quartiles
        of the first level's runs longer than that; a run longer than all of them: elapsed + the default."""
        for values in (self.workloads.get((namespace, workload)), self.queues.get(queue), self.cluster):
            if not values or len(values) < MIN_RUNS:
                continue
            lo = bisect_right(values, elapsed)
            if lo < len(values):
                return quantile(values, 0.25, lo), quantile(values, 0.5, lo), quantile(values, 0.75, lo)
        if elapsed > 0:
            return elapsed + self.default, elapsed + self.default, elapsed + self.default
        return self.default, self.default, self.default


def _limits(queue: Queue) -> dict[str, float]:
    return {name: amount for name, amount in queue.capability}


def _exceeds(request: Amounts, limit: Amounts) -> str:
    """The first resource the request asks more of than `limit` names (unnamed: unlimited), or ""."""
    for name, asked in request.items():
        cap = limit.get(name)
        if cap is not None and asked > cap + EPSILON:
            return name
    return ""


def _fits_some_node(pod: Amounts, nodes: Sequence[Amounts]) -> bool:
    """Node fit as far as it is known: no nodes (or none with an allocatable) known is no verdict."""
    nodes = [node for node in nodes if node]
    if not pod or not nodes:
        return True
    return any(all(asked <= node.get(name, 0.0) + EPSILON for name, asked in pod.items() if asked > 0)
               for node in nodes)


@dataclass(slots=True)
class _Job:
    index: int
    name: str  # namespace/name, for "when ... ends"
    chain: tuple[str, ...]  # the capped scopes on its path: queues with a capability, then CLUSTER
    request: dict[str, float]
    lengths: Bounds
    klass: int  # its class: jobs of one queue and request


class _Play:
    """One play of the queues forward with one choice of lengths (0 low, 1 median, 2 high)."""

    def __init__(self, limits: dict[str, dict[str, float]], jobs: list[_Job], classes: list[list[int]],
                 running: list[tuple[float, str, tuple[str, ...], dict[str, float]]], which: int, now: float,
                 latency: float = 0.0) -> None:
        self.free = {scope: dict(limit) for scope, limit in limits.items()}
        self.jobs, self.classes, self.which, self.now, self.latency = jobs, classes, which, now, latency
        self.next_in_class = [0] * len(classes)
        self.blocked: dict[tuple[str, str], list[tuple[float, int]]] = {}
        self.ends: list[tuple[float, int, str, tuple[str, ...], dict[str, float]]] = []
        self.seq = 0
        for end, name, chain, holds in running:
            self._take(chain, holds)
            self._push_end(end, name, chain, holds)
        self.start: dict[int, tuple[float, str]] = {}

    def _take(self, chain: tuple[str, ...], amounts: Mapping[str, float], sign: float = -1.0) -> None:
        for scope in chain:
            free = self.free[scope]
            for name, amount in amounts.items():
                if name in free:
                    free[name] += sign * amount

    def _push_end(self, end: float, name: str, chain: tuple[str, ...], holds: dict[str, float]) -> None:
        self.seq += 1
        heapq.heappush(self.ends, (end, self.seq, name, chain, holds))

    def _blocker(self, job: _Job) -> tuple[str, str] | None:
        for scope in job.chain:
            free = self.free[scope]
            for name, asked in job.request.items():
                left = free.get(name)
                if left is not None and asked > left + EPSILON:
                    return scope, name
        return None

    def _round(self, at: float, candidates: list[int], event: str) -> None:
        """Try the candidate classes' first jobs in Volcano's order; an admitted job's class offers its next."""
        heap = [(self.classes[k][self.next_in_class[k]], k) for k in candidates
                if self.next_in_class[k] < len(self.classes[k])]
        heapq.heapify(heap)
        while heap:
            index, klass = heapq.heappop(heap)
            job = self.jobs[index]
            blocker = self._blocker(job)
            if blocker is not None:
                heapq.heappush(self.blocked.setdefault(blocker, []), (job.request[blocker[1]], klass))
                continue
            self._take(job.chain, job.request)
            self.start[index] = (at + self.latency, event)
            self._push_end(at + self.latency + job.lengths[self.which], job.name, job.chain, job.request)
            self.next_in_class[klass] += 1
            if self.next_in_class[klass] < len(self.classes[klass]):
                heapq.heappush(heap, (self.classes[klass][self.next_in_class[klass]], klass))

    def run(self, first: list[int], horizon: float) -> dict[int, tuple[float, str]]:
        self._round(self.now, first, ROOM_NOW)
        while self.ends and len(self.start) < len(self.jobs):
            at = self.ends[0][0]
            if at > horizon:
                break
            touched: set[tuple[str, str]] = set()
            last = ""
            while self.ends and self.ends[0][0] <= at:
                _, _, name, chain, holds = heapq.heappop(self.ends)
                self._take(chain, holds, +1.0)
                touched.update((scope, r) for scope in chain for r in holds if r in self.free[scope])
                last = name
            candidates: list[int] = []
            for key in touched:
                waiting = self.blocked.get(key)
                left = self.free[key[0]][key[1]]
                while waiting and waiting[0][0] <= left + EPSILON:
                    candidates.append(heapq.heappop(waiting)[1])
            if candidates:
                self._round(max(at, self.now), list(set(candidates)), when_ends(last))
        return self.start


def never_reason(job: Waiting, queues: Mapping[str, Queue], cluster: Amounts,
                 nodes: Sequence[Amounts]) -> tuple[str, str]:
    """(reason, words) when the job can never start as the cluster stands, else ("", "")."""
    path, missing = queue_path(job.queue, queues)
    if missing:
        return QUEUE_MISSING, f"queue {missing} does not exist"
    for queue in path:
        if queue.state in CLOSED_STATES:
            return QUEUE_CLOSED, f"queue {queue.name} is {queue.state}"
    if job.never:
        return job.never, job.never.replace("_", " ")
    for queue in path:
        if queue.name != ROOT_QUEUE and queue.capability:
            name = _exceeds(job.request, _limits(queue))
            if name:
                return QUEUE_TOO_SMALL, f"queue {queue.name}: capability of {name} below the request"
    name = _exceeds(job.request, cluster)
    if name:
        return CLUSTER_TOO_SMALL, f"cluster: allocatable {name} below the request"
    if not _fits_some_node(job.largest_pod, nodes):
        return NODE_TOO_SMALL, "its largest pod fits no node"
    return "", ""


def cluster_room(queues: Mapping[str, Queue], nodes: Sequence[Amounts]) -> dict[str, float]:
    """The cluster's allocatable as core.pending reads it: root's `spec.deserved`, else the nodes' sum."""
    root = queues.get(ROOT_QUEUE)
    if root is not None and root.deserved:
        return {name: amount for name, amount in root.deserved}
    total: dict[str, float] = {}
    for node in nodes:
        for name, amount in node.items():
            total[name] = total.get(name, 0.0) + amount
    return total


def estimate(now: float, queues: Mapping[str, Queue], nodes: Sequence[Amounts], running: Iterable[Running],
             waiting: Iterable[Waiting], durations: Durations, cluster: Amounts | None = None,
             horizon: float = HORIZON_SECONDS, start_latency: float = 0.0) -> dict[str, Estimate]:
    """Expected start of every waiting job, by uid. `nodes`: each node's allocatable; `cluster`: the
    cluster's allocatable (default: `cluster_room`); `start_latency`: seconds from admission to the first pod
    running (`START_LATENCY_SECONDS` on a real cluster; 0 predicts admissions)."""
    room = dict(cluster) if cluster is not None else cluster_room(queues, nodes)
    limits: dict[str, dict[str, float]] = {CLUSTER: room}
    chains: dict[str, tuple[str, ...]] = {}

    def chain_of(queue_name: str) -> tuple[str, ...]:
        found = chains.get(queue_name)
        if found is None:
            path, _ = queue_path(queue_name, queues)
            capped = []
            for queue in path:
                if queue.name != ROOT_QUEUE and queue.capability:
                    limits.setdefault(queue.name, _limits(queue))
                    capped.append(queue.name)
            found = chains[queue_name] = (*capped, CLUSTER)
        return found

    out: dict[str, Estimate] = {}
    playable: list[Waiting] = []
    for job in waiting:
        reason, words = never_reason(job, queues, room, nodes)
        if reason:
            out[job.uid] = Estimate(None, None, None, words, reason)
        else:
            playable.append(job)
    playable.sort(key=lambda j: (not j.admitted, j.order))  # admitted (Inqueue) jobs take their room first
    jobs: list[_Job] = []
    class_of: dict[tuple[str, tuple[tuple[str, float], ...]], int] = {}
    classes: list[list[int]] = []
    lengths: dict[tuple[str, str, str], Bounds] = {}
    for i, job in enumerate(playable):
        key = (job.namespace, job.workload, job.queue)
        bounds = lengths.get(key)
        if bounds is None:
            bounds = lengths[key] = durations.length(job.namespace, job.workload, job.queue)
        request = {name: amount for name, amount in job.request.items() if amount > 0}
        klass_key = (job.queue, tuple(sorted(request.items()))) if not job.admitted else (job.uid, ())
        klass = class_of.get(klass_key)
        if klass is None:
            klass = class_of[klass_key] = len(classes)
            classes.append([])
        classes[klass].append(i)
        jobs.append(_Job(i, f"{job.namespace}/{job.name}", chain_of(job.queue), request, bounds, klass))
    held = []
    for run in running:
        elapsed = max(0.0, now - run.started)
        low, mid, high = durations.length(run.namespace, run.workload, run.queue, elapsed)
        held.append(((run.started + low, run.started + mid, run.started + high), f"{run.namespace}/{run.name}",
                     chain_of(run.queue), dict(run.holds)))
    plays = []
    for which in range(3):
        play = _Play(limits, jobs, classes,
                     [(max(now, ends[which]), name, chain, holds) for ends, name, chain, holds in held], which, now,
                     start_latency)
        plays.append(play.run(list(range(len(classes))), now + horizon))
    for sim, wait in zip(jobs, playable, strict=True):
        middle = plays[1].get(sim.index)
        if middle is None:
            out[wait.uid] = Estimate(None, None, None, f"not started within {horizon / 86400:g} days",
                                     BEYOND_HORIZON)
            continue
        early, late = plays[0].get(sim.index), plays[2].get(sim.index)
        start = middle[0]
        out[wait.uid] = Estimate(start, min(start, early[0]) if early is not None else start,
                                 max(start, late[0]) if late is not None else now + horizon, middle[1])
    return out
