"""Attributes usage samples to pods' jobs and turns them into what the watchdog keeps: per-container
rollups (one row per container per bucket, however many samples), decaying histograms (through the
`HistogramBook`) and the ledger's used/requested resource-seconds per job run.

Why deltas: memory holds only what changed since the last `flush()`, and `flush()` *merges* it into
the stored rows (sums add, maxima take the greater). So a restart loses nothing already flushed,
flushing the same bucket many times is correct, and storage grows with containers x buckets, not
with samples.

Why integrals per pod between consecutive samples: a sample says "this much right now" (for CPU: the
rate over the window just before it), so `value * (ts - previous ts)` is the usage of that interval.
The interval is capped at twice the expected interval between two distinct reports, so a gap in
collection (watchdog down, source down) is not counted as a long stretch at the last value. That
interval is the poll interval (`expected_interval_seconds`) or, when the sample says it averages a
longer `window`, that window (metrics-server's resolution: polled faster than it publishes, each new
report covers the whole span since the previous one). Capping at twice the poll interval alone
undercounted such a source three times over, and lost a whole report's worth whenever one poll was a
little late and a report went by unseen; the newest rate stands for one missed report, as it does
for one missed poll.
Cost: each interval's resource-seconds are also multiplied by the price of the pod's node (`prices`, a
`watchdog.state.prices.PriceBook`, asked once per pod per `ingest` call) and added to the run's cost
columns with the seconds, in the same statement: see watchdog.state.prices for why there.
GPUs are physical GPUs (`PodInfo.gpus`, a pod's share of shared cards): requested GPU-seconds are the share
x seconds (four pods at 25 % of one card for an hour: one GPU-hour), used GPU-seconds a sample's
utilisation x the physical GPUs it is of (`UsageSample.gpus`, else the pod's share) x seconds.
Requested resource-seconds use the same intervals (per pod, not per container), so used/requested
ratios compare like with like. A pod's first sample stands for its source's averaging `window` before
it (capped; 0 if unknown). A sample at or before the last one already seen for its container
(metrics-server repeating its last scrape) is a duplicate and is dropped. The expected interval is in
sample time: against a simulator running at N x speed it is the poll interval times N.

Why the session hooks: the caller owns the transaction. What `flush()` wrote is forgotten only when
that transaction commits; if it rolls back (database down), the deltas go back into memory and the
next flush writes them, so the ledger does not silently lose usage.

Thread-safety: `ingest` and `flush` may run on different threads; a lock guards the in-memory state.
The SQL a flush runs (one statement per table and batch, per dialect) is watchdog.state.rollup_sql.

One piece: `ingest`, `flush` and `_restore` share one layout of positional delta lists (the hot loop's
state, mutated in place for speed); split across modules, that layout's invariants would be too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

from volcano_monitor.watchdog.state.prices import FREE, Price
from volcano_monitor.watchdog.state.rollup_sql import (
    Rollup,
    RollupKey,
    add_to_job_runs,
    write_rollups,
)
from volcano_monitor.watchdog.state.samples import PodInfo, PodLookup, UsageSample

log = logging.getLogger(__name__)

# Beyond these a value is garbage, not usage (and would poison sums, or not fit a datetime).
MAX_CPU_CORES = 1e5
MAX_MEMORY_BYTES = float(2**60)
MAX_TIMESTAMP = 253402214400.0  # 9999-12-31
MAX_PENDING_ROLLUPS = 1_000_000  # a batch failing to flush is dropped beyond this (counted)
JOB_VALUES = 12  # a job delta: the 12 columns of rollup_sql.JOB_COLUMNS, then when it was first seen



class HistogramSink(Protocol):
    """What the recorder needs of `watchdog.findings.recommendations.book.HistogramBook`."""

    def add_usage(self, namespace: str, workload: str, task: str, container: str, ts: float,
                  cpu_cores: float, memory_bytes: float) -> None: ...


@dataclass(slots=True)
class _Batch:
    rollups: dict[RollupKey, Rollup]
    jobs: dict[str, list[float]]
    committed: bool = False


@dataclass(slots=True)
class _SessionHooks:
    batches: list[_Batch] = field(default_factory=list)


def _merge_rollup(into: dict[RollupKey, Rollup], key: RollupKey, r: Rollup) -> None:
    have = into.get(key)
    if have is None:
        into[key] = r
        return
    for i in (0, 1, 3, 5, 6):  # counts and sums add, maxima take the greater
        have[i] += r[i]
    for i in (2, 4, 7):
        have[i] = max(have[i], r[i])


def _merge_job(into: dict[str, list[float]], uid: str, delta: list[float]) -> None:
    have = into.get(uid)
    if have is None:
        into[uid] = delta
        return
    for i in range(JOB_VALUES):
        have[i] += delta[i]
    have[JOB_VALUES] = min(have[JOB_VALUES], delta[JOB_VALUES])


class UsageRecorder:
    def __init__(self, histograms: HistogramSink, bucket_seconds: int = 300, *,
                 expected_interval_seconds: float = 30.0, pending_job_seconds: float = 3600.0,
                 max_rollups_per_flush: int = 5000,
                 current_bucket_write_seconds: float | None = None,
                 prices: Callable[[PodInfo], Price] | None = None) -> None:
        if bucket_seconds <= 0:
            raise ValueError("bucket_seconds must be positive")
        self.histograms = histograms
        self.prices: Callable[[PodInfo], Price] = prices or (lambda _: FREE)
        self.bucket_seconds = int(bucket_seconds)
        # How often the open bucket's rollups are written (default: once per bucket length). Each
        # write of a row PostgreSQL already has costs a new row version in five indexes: writing
        # every container at every poll would make storage the bottleneck. Finished buckets are
        # always written at the next flush; a crash loses at most this much of rollup detail (the
        # ledger integrals are written at every flush).
        self.current_bucket_write_seconds = (
            float(bucket_seconds) if current_bucket_write_seconds is None else current_bucket_write_seconds)
        self._current_written_at = float("-inf")
        self.max_interval = 2.0 * expected_interval_seconds
        self.max_rollups_per_flush = max_rollups_per_flush
        self.backlog = 0  # rollup rows due that the last flush left for the next one
        self.pending_job_seconds = pending_job_seconds  # a job delta whose ledger row never appears is dropped
        self._lock = threading.Lock()
        self._rollups: dict[RollupKey, Rollup] = {}
        self._jobs: dict[str, list[float]] = {}
        # Per container: [last ts, last cpu ts, last memory ts, last gpu ts, bucket, its rollup delta,
        # rollup generation, pod state]. Per pod: [last ts, PodInfo, ingest serial of the PodInfo,
        # job delta, job generation, job uid, Price of its node]. The cached references are valid while the generation
        # matches: flush() and restore replace or remove deltas, and bump it.
        self._containers: dict[tuple[str, str, str], list[Any]] = {}
        self._pods: dict[tuple[str, str], list[Any]] = {}
        self._pod_containers: dict[tuple[str, str], list[str]] = {}  # the containers of each pod, to forget
        self._serial = 0
        self._rollup_gen = 0
        self._job_gen = 0
        self._last_prune = 0.0
        # Counters for self-metrics and tests.
        self.accepted = 0
        self.unattributed = 0  # samples of pods the caches do not know
        self.duplicates = 0  # samples not newer than the container's last one
        self.invalid = 0  # samples with an unusable timestamp, names or no usable value
        self.bad_values = 0  # single values (NaN, negative, absurd) dropped from otherwise good samples
        self.dropped_rollups = 0  # rollup deltas dropped because too many failed to flush
        self.dropped_job_deltas = 0  # job deltas dropped because their ledger row never appeared
        self.restored_batches = 0  # flushes whose transaction rolled back (their deltas were kept)

    # ---- ingest ---------------------------------------------------------------------------------

    def ingest(self, samples: Iterable[UsageSample], pods: PodLookup) -> int:
        """Attribute and account `samples`; returns how many were accepted. `pods` is asked once
        per pod per call (the attribution may change between calls: a job seen late, a new phase)."""
        accepted = 0
        bucket_seconds = self.bucket_seconds
        cap = self.max_interval
        add_usage = self.histograms.add_usage
        price_of = self.prices
        with self._lock:
            self._serial += 1
            serial, rollup_gen, job_gen = self._serial, self._rollup_gen, self._job_gen
            rollups, jobs, containers, pod_states = self._rollups, self._jobs, self._containers, self._pods
            for s in samples:
                ckey = (s.namespace, s.pod, s.container)
                state = containers.get(ckey)
                pstate: Any = state[7] if state is not None else pod_states.get(ckey[:2])
                if pstate is None:
                    info = pods(s.namespace, s.pod)
                elif pstate[2] != serial:
                    info = pstate[1] = pods(s.namespace, s.pod)
                    pstate[2] = serial
                    if info is not None:
                        pstate[6] = price_of(info)
                else:
                    info = pstate[1]
                if info is None:
                    self.unattributed += 1
                    continue
                ts, cpu, memory, gpu = s.ts, s.cpu_cores, s.memory_bytes, s.gpu_util_percent
                # usable amounts only: NaN, infinite, negative or absurd is as good as missing
                if cpu is not None and not 0.0 <= cpu <= MAX_CPU_CORES:
                    cpu = None
                    self.bad_values += 1
                if memory is not None and not 0.0 <= memory <= MAX_MEMORY_BYTES:
                    memory = None
                    self.bad_values += 1
                if gpu is not None and not 0.0 <= gpu <= 100.0:
                    gpu = None
                    self.bad_values += 1
                if not 0.0 < ts < MAX_TIMESTAMP or (cpu is None and memory is None and gpu is None):
                    self.invalid += 1
                    continue
                if state is None:
                    if not all(type(name) is str and 0 < len(name) <= 253 and "\x00" not in name for name in ckey):
                        self.invalid += 1  # would not fit the columns (or collide once cut to fit)
                        continue
                    if pstate is None:
                        pstate = pod_states[ckey[:2]] = [0.0, info, serial, None, -1, "", price_of(info)]
                    state = containers[ckey] = [0.0, 0.0, 0.0, 0.0, -1, None, -1, pstate]
                    self._pod_containers.setdefault(ckey[:2], []).append(ckey[2])
                elif ts <= state[0]:
                    self.duplicates += 1
                    continue
                state[0] = ts
                uid = info.job_uid
                price = pstate[6]
                acc: Any = None  # the job's delta list (typed loosely: this loop is the hot path)
                window = s.window  # what the sample averages (NaN or negative: unknown)
                span = 2.0 * window if window + window > cap else cap  # longest interval it can stand for
                if uid:
                    first = window if 0.0 <= window <= cap else (cap if window > cap else 0.0)
                    if pstate[4] == job_gen and pstate[5] == uid:
                        acc = pstate[3]
                    else:
                        acc = jobs.get(uid)
                        if acc is None:
                            acc = jobs[uid] = [0.0] * JOB_VALUES + [ts]
                        pstate[3], pstate[4], pstate[5] = acc, job_gen, uid
                    last = pstate[0]
                    if ts > last:
                        pstate[0] = ts
                        dt = first if last == 0.0 else min(ts - last, span)
                        acc[1] += info.cpu_request_cores * dt
                        acc[3] += info.memory_request_bytes * dt
                        acc[5] += info.gpus * dt
                        acc[7] += info.cpu_request_cores * dt * price.cpu
                        acc[9] += info.memory_request_bytes * dt * price.memory
                        acc[11] += info.gpus * dt * price.gpu
                elif ts > pstate[0]:
                    pstate[0] = ts
                bucket = int(ts // bucket_seconds) * bucket_seconds
                if state[4] == bucket and state[6] == rollup_gen:
                    r = state[5]
                    r[8] = info
                else:
                    rkey = (bucket, *ckey)
                    r = rollups.get(rkey)
                    if r is None:
                        r = rollups[rkey] = [0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, info]
                    else:
                        r[8] = info
                    state[4], state[5], state[6] = bucket, r, rollup_gen
                if cpu is not None or memory is not None:
                    r[0] += 1
                if cpu is not None:
                    r[1] += cpu
                    if cpu > r[2]:
                        r[2] = cpu
                    if acc is not None:
                        used = cpu * (min(ts - state[1], span) if state[1] > 0 else first)
                        acc[0] += used
                        acc[6] += used * price.cpu
                    state[1] = ts
                if memory is not None:
                    r[3] += memory
                    if memory > r[4]:
                        r[4] = memory
                    if acc is not None:
                        used = memory * (min(ts - state[2], span) if state[2] > 0 else first)
                        acc[2] += used
                        acc[8] += used * price.memory
                    state[2] = ts
                if gpu is not None:
                    r[5] += 1
                    r[6] += gpu
                    if gpu > r[7]:
                        r[7] = gpu
                    if acc is not None:
                        dt = min(ts - state[3], span) if state[3] > 0 else first
                        used = gpu / 100.0 * (s.gpus or info.gpus) * dt
                        acc[4] += used
                        acc[10] += used * price.gpu
                    state[3] = ts
                if cpu is not None and memory is not None and info.workload:
                    add_usage(s.namespace, info.workload, info.task, s.container, ts, cpu, memory)
                accepted += 1
            self.accepted += accepted
        return accepted

    # ---- flush ----------------------------------------------------------------------------------

    def flush(self, session: Session, now: datetime, *, final: bool = False) -> int:
        """Merge the deltas since the last flush into usage_rollups and job_runs (in the caller's
        transaction); returns rows written. Job deltas are written every time (jobs without a ledger
        row yet stay pending); rollups of finished buckets too, those of the bucket still open only
        every `current_bucket_write_seconds` (or when `final`, e.g. at shutdown)."""
        now_ts = now.timestamp()
        with self._lock:
            if final or now_ts - self._current_written_at >= self.current_bucket_write_seconds:
                due = list(self._rollups)
                self._current_written_at = now_ts
            else:
                closed_before = now_ts - self.bucket_seconds  # a bucket starting at or before this is finished
                due = [key for key in self._rollups if key[0] <= closed_before]
            self.backlog = 0
            if not final and len(due) > self.max_rollups_per_flush:
                # Every container's bucket closes at once: 20k rows in one transaction kept the writer
                # (events, alerts) waiting a second. Oldest buckets first; the rest goes with the next
                # flushes, which the worker then runs without waiting a full interval (`backlog`).
                due.sort()
                self.backlog = len(due) - self.max_rollups_per_flush
                due = due[:self.max_rollups_per_flush]
            rollups = {key: self._rollups.pop(key) for key in due}
            batch = _Batch(rollups, self._jobs)
            self._jobs = {}
            self._rollup_gen += 1
            self._job_gen += 1
        try:
            session.flush()  # ledger rows added through the ORM in this transaction must be visible
            written = write_rollups(session, batch.rollups, self.bucket_seconds)
            written += self._write_jobs(session, batch, now, now_ts)
        except Exception:
            self._restore(batch)
            raise
        self._prune(now_ts)
        if batch.rollups or batch.jobs:
            self._hooks(session).batches.append(batch)
        return written

    def _write_jobs(self, session: Session, batch: _Batch, now: datetime, now_ts: float) -> int:
        """Add the job deltas to their ledger rows; the deltas of runs with no row yet wait (merged back into
        memory) until `pending_job_seconds`, then are dropped and counted."""
        if not batch.jobs:
            return 0
        uids = list(batch.jobs)
        existing = add_to_job_runs(session, batch.jobs, now)
        pending: dict[str, list[float]] = {}
        for uid in uids:
            if uid in existing:
                continue
            delta = batch.jobs.pop(uid)  # not written: what stays in the batch is what a rollback restores
            if now_ts - delta[JOB_VALUES] > self.pending_job_seconds:
                self.dropped_job_deltas += 1
                log.info("usage of job run %s dropped: no ledger row appeared within %gs", uid,
                         self.pending_job_seconds)
            else:
                pending[uid] = delta
        if pending:
            with self._lock:
                self._job_gen += 1
                for uid, delta in pending.items():
                    _merge_job(self._jobs, uid, delta)
        return len(batch.jobs)

    # ---- commit / rollback bookkeeping ----------------------------------------------------------

    def _hooks(self, session: Session) -> _SessionHooks:
        """Per-session listeners (registered once: SQLAlchemy cannot remove a listener while it runs)."""
        key = ("volcano-watchdog.usage-recorder", id(self))
        hooks: _SessionHooks | None = session.info.get(key)
        if hooks is not None:
            return hooks
        hooks = session.info[key] = _SessionHooks()

        def after_commit(_: Session) -> None:  # fires only for the outermost transaction
            for b in hooks.batches:
                b.committed = True

        def after_transaction_end(_: Session, transaction: SessionTransaction) -> None:
            if transaction.parent is not None or not hooks.batches:
                return
            done, hooks.batches = hooks.batches, []
            for b in done:
                if not b.committed:
                    self._restore(b)

        event.listen(session, "after_commit", after_commit)
        event.listen(session, "after_transaction_end", after_transaction_end)
        return hooks

    def _restore(self, batch: _Batch) -> None:
        """Put a batch that was not committed back into the deltas."""
        self.restored_batches += 1
        log.warning("usage flush not committed: %d rollups and %d job deltas kept for the next flush",
                    len(batch.rollups), len(batch.jobs))
        with self._lock:
            if len(self._rollups) + len(batch.rollups) > MAX_PENDING_ROLLUPS:
                self.dropped_rollups += len(batch.rollups)
                log.error("%d usage rollups dropped: too many waiting for a flush that keeps failing",
                          len(batch.rollups))
                batch.rollups = {}
            self._rollup_gen += 1
            self._job_gen += 1
            for key, r in batch.rollups.items():
                _merge_rollup(self._rollups, key, r)
            for uid, delta in batch.jobs.items():
                _merge_job(self._jobs, uid, delta)

    def reset_integration(self) -> None:
        """Forget when each pod was last sampled (not what is waiting to be flushed): a replica that leads
        again must not count the time another leader already counted since its own last sample."""
        with self._lock:
            self._containers, self._pods, self._pod_containers = {}, {}, {}

    def forget_pod(self, namespace: str, pod: str) -> None:
        """The pod is gone: drop its integration state now rather than at the next prune (an hour later),
        so memory follows the live pods (300k pods a day would otherwise hold ~12k dead ones)."""
        with self._lock:
            self._pods.pop((namespace, pod), None)
            for container in self._pod_containers.pop((namespace, pod), ()):
                self._containers.pop((namespace, pod, container), None)

    def _prune(self, now_ts: float) -> None:
        """Forget per-container/pod integration state of pods not seen for a while (gone pods)."""
        horizon = max(3600.0, 10 * self.max_interval)
        if now_ts - self._last_prune < horizon / 4:
            return
        self._last_prune = now_ts
        with self._lock:
            self._containers = {k: v for k, v in self._containers.items() if now_ts - v[0] < horizon}
            self._pods = {k: v for k, v in self._pods.items() if now_ts - v[0] < horizon}
            self._pod_containers = {k: v for k, v in self._pod_containers.items() if k in self._pods}
