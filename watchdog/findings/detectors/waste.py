"""Waste detectors (periodic, read the database the usage recorder and the job ledger fill):

JobIdle — a running job whose containers used, over the last `idle_window_seconds`, less than
`idle_cpu_ratio` of the CPU they requested (resource "cpu"), or whose GPUs averaged less than
`idle_gpu_util_percent` utilisation (resource "gpu", only jobs that requested GPUs, a share of a shared card
included: the utilisation is of what the pod holds, `watchdog.state.samples.UsageSample`). Usage is
sample-weighted over the job's usage_rollups rows: used = sum(cpu_cores_sum) / samples, requested =
sum(cpu_request_cores x samples) / samples. The per-bucket sums are kept between checks, so a check
reads only the newest buckets (`_BucketCache`). A new alert needs evidence for the whole window: rollup
buckets from the window's start to now covering at least `MIN_COVERAGE` of it (the pods ran through
the window). An open alert only needs to stay below the threshold on whatever samples the window
holds, and survives a window without samples (the collector or the watchdog was down) as long as the
ledger says the job has not finished — so a gap in collection does not resolve and re-fire it. The
open alerts are read from the alerts table, so this holds across restarts too.

OverRequested — a finished run (job_runs) that ran at least `over_requested_min_seconds` and used less
than `over_requested_ratio` of its requested CPU core-seconds or memory byte-seconds. Once per run:
reported while the run finished less than `report_seconds` ago (then the alert resolves quietly as
the round stops reporting it), never again for the same run (see ONCE_PER_RUN_KINDS). Runs finished
less than `settle_seconds` ago are left for later, so the ledger's last usage flush is in. Its GPU figures
(the used ratio and `requested.gpus`, shown, never judged) are physical GPUs (`core.gpushare`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.detectors.settings import Detectors
from volcano_monitor.watchdog.state.db.models import Alert, JobRun, UsageRollup
from volcano_monitor.watchdog.state.ledger import ended_at, run_seconds
from volcano_monitor.watchdog.state.signals import JOB_IDLE, OVER_REQUESTED, Signal, fingerprint

__all__ = ["MIN_COVERAGE", "WasteDetector"]

MIN_COVERAGE = 0.8  # share of the idle window that rollup buckets must cover before JobIdle opens
CHUNK = 500  # uids per IN (...) query


@dataclass
class _Usage:
    uid: str
    namespace: str
    queue: str
    workload: str
    first: datetime
    last: datetime
    bucket_seconds: float
    buckets: int
    gpu_buckets: int
    samples: int
    cpu_used: float  # sum of cores over samples
    cpu_requested: float  # sum of requested cores over samples
    gpu_samples: int
    gpu_util: float  # sum of percent over GPU samples
    gpu_request: float


def _chunks(values: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(values), CHUNK):
        yield values[i:i + CHUNK]


@dataclass(slots=True)
class _Figures:
    """One job's usage in one bucket: the sums of its containers' rollup rows."""

    namespace: str
    queue: str
    workload: str
    bucket_seconds: float
    gpu: bool  # some row has GPU samples
    samples: int
    cpu_used: float
    cpu_requested: float
    gpu_samples: int
    gpu_util: float
    gpu_request: float  # the largest of its containers'


class _BucketCache:
    """Per-bucket, per-job figures of the JobIdle window, kept between checks so a check reads only
    the buckets that can still change, not the whole window (at 100k containers a 30-minute window is
    600k rows, read every minute in the writer's transaction).

    A bucket can change until the flush after it closes is in: bucket start + its length +
    `settle_seconds` (several flush intervals). Older buckets are taken from memory. The whole window
    is read again at the first check, once per window, after the clock went back or the window grew,
    and after a gap between checks longer than twice the settle time: checks missed (a database
    outage, leadership elsewhere) are when late flushes land in buckets already taken as final."""

    def __init__(self, settle_seconds: float, window_seconds: float) -> None:
        self.settle = timedelta(seconds=settle_seconds)
        self.window = timedelta(seconds=window_seconds)
        self.buckets: dict[datetime, dict[str, _Figures]] = {}
        self.settled_before: datetime | None = None  # buckets starting before this are final in `buckets`
        self.full_at: datetime | None = None
        self.last_now: datetime | None = None
        self.full_reads = 0  # for tests and curiosity
        self.partial_reads = 0

    def refresh(self, session: Session, start: datetime, now: datetime,
                live: AbstractSet[str] | None = None) -> dict[datetime, dict[str, _Figures]]:
        """The window's figures; with `live`, only those of the runs in it (the rest are never built)."""
        full = (self.settled_before is None or self.full_at is None or self.last_now is None or now < self.last_now
                or now - self.full_at >= self.window or start < self.last_now - self.window
                or now - self.last_now > 2 * self.settle)
        since = start if full or self.settled_before is None else max(start, self.settled_before)
        fresh = self._read(session, since, now, live)
        if full:
            self.buckets, self.full_at = fresh, now
            self.full_reads += 1
        else:
            self.buckets = {b: jobs for b, jobs in self.buckets.items() if start <= b < since}
            self.buckets.update(fresh)
            self.partial_reads += 1
        longest = max((f.bucket_seconds for jobs in self.buckets.values() for f in jobs.values()), default=300.0)
        self.settled_before = now - self.settle - timedelta(seconds=longest)
        self.last_now = now
        return self.buckets

    def keep(self, uids: AbstractSet[str]) -> None:
        """Forget the figures of every job not in `uids`. A bucket still settling is read again whole, so
        only final figures are really gone, and those of a run that no longer exists are never needed."""
        for jobs in self.buckets.values():
            for uid in [uid for uid in jobs if uid not in uids]:
                del jobs[uid]

    @staticmethod
    def _read(session: Session, since: datetime, now: datetime,
              live: AbstractSet[str] | None) -> dict[datetime, dict[str, _Figures]]:
        """The figures of buckets starting in [since, now], one row per bucket and job (no DISTINCT), streamed
        and, with `live`, only for the runs in it. The whole window is read once per window: its rows cover
        every run that had usage in the last `idle_window_seconds` (at 300k pods a day, thousands of finished
        ones), and building all their figures to drop most of them a moment later was a transient of tens of
        MB in bench/soak.py, which stepped the watchdog's RSS up for good (+11 MB at minute 31)."""
        r = UsageRollup
        query = (
            select(r.bucket_start, r.job_uid, func.min(r.namespace), func.min(r.queue), func.min(r.workload),
                   func.max(r.bucket_seconds), func.max(r.gpu_samples), func.sum(r.samples), func.sum(r.cpu_cores_sum),
                   func.sum(r.cpu_request_cores * r.samples), func.sum(r.gpu_samples), func.sum(r.gpu_util_sum),
                   func.max(r.gpu_request))
            .where(r.bucket_start >= since, r.bucket_start <= now, r.job_uid != "")
            .group_by(r.bucket_start, r.job_uid)
        )
        out: dict[datetime, dict[str, _Figures]] = {}
        for row in session.execute(query.execution_options(yield_per=1000)):
            if live is not None and row[1] not in live:
                continue  # gone from the cluster: cannot be idle (see WasteDetector.live)
            out.setdefault(row[0], {})[row[1]] = _Figures(
                namespace=row[2] or "", queue=row[3] or "", workload=row[4] or "", bucket_seconds=float(row[5] or 0),
                gpu=(row[6] or 0) > 0, samples=int(row[7] or 0), cpu_used=float(row[8] or 0),
                cpu_requested=float(row[9] or 0), gpu_samples=int(row[10] or 0), gpu_util=float(row[11] or 0),
                gpu_request=float(row[12] or 0))
        return out


# What an OverRequested signal reads of a run.
_OVER_COLUMNS = (JobRun.uid, JobRun.namespace, JobRun.name, JobRun.queue, JobRun.workload, JobRun.phase,
                 JobRun.started_at, JobRun.finished_at, JobRun.deleted_at, JobRun.requested_cpu_cores,
                 JobRun.requested_memory_bytes, JobRun.requested_gpus, JobRun.cpu_core_seconds_requested,
                 JobRun.cpu_core_seconds_used, JobRun.memory_byte_seconds_requested, JobRun.memory_byte_seconds_used,
                 JobRun.gpu_seconds_requested, JobRun.gpu_seconds_used)


class WasteDetector:
    KINDS = frozenset({JOB_IDLE, OVER_REQUESTED})

    def __init__(self, settings: Detectors, settle_seconds: float = 120.0, report_seconds: float = 86400.0,
                 live: Callable[[], set[str]] | None = None, synced: Callable[[], bool] = lambda: True) -> None:
        self.settings = settings
        self.settle_seconds = settle_seconds
        self.report_seconds = report_seconds
        self._cache = _BucketCache(settle_seconds, settings.idle_window_seconds)
        # UIDs of the runs the informers hold now (with `synced`: once they have listed). A run gone from
        # the cluster cannot be idle: its figures leave the cache, which then holds the live runs' window,
        # not every run that had usage in it (a busy hour's finished jobs, thousands).
        self.live = live
        self.synced = synced

    def check(self, session: Session, now: datetime) -> list[Signal]:
        return self._idle(session, now) + self._over_requested(session, now)

    # ---- JobIdle -------------------------------------------------------------------------------------

    def _usage(self, session: Session, start: datetime, now: datetime) -> dict[str, _Usage]:
        """Each job's usage over the window [start, now], from the per-bucket figures (see `_BucketCache`)."""
        live = self.live() if self.live is not None and self.synced() else None
        buckets = self._cache.refresh(session, start, now, live)
        if live is not None:
            self._cache.keep(live)  # and those that were in it and have gone since
        out: dict[str, _Usage] = {}
        for bucket_start in sorted(buckets):
            if not start <= bucket_start <= now:
                continue
            for uid, f in buckets[bucket_start].items():
                u = out.get(uid)
                if u is None:
                    out[uid] = _Usage(uid=uid, namespace=f.namespace, queue=f.queue, workload=f.workload,
                                      first=bucket_start, last=bucket_start, bucket_seconds=f.bucket_seconds,
                                      buckets=1, gpu_buckets=int(f.gpu), samples=f.samples, cpu_used=f.cpu_used,
                                      cpu_requested=f.cpu_requested, gpu_samples=f.gpu_samples, gpu_util=f.gpu_util,
                                      gpu_request=f.gpu_request)
                    continue
                u.namespace, u.queue, u.workload = (min(u.namespace, f.namespace), min(u.queue, f.queue),
                                                    min(u.workload, f.workload))
                u.last = bucket_start
                u.bucket_seconds = max(u.bucket_seconds, f.bucket_seconds)
                u.buckets += 1
                u.gpu_buckets += int(f.gpu)
                u.samples += f.samples
                u.cpu_used += f.cpu_used
                u.cpu_requested += f.cpu_requested
                u.gpu_samples += f.gpu_samples
                u.gpu_util += f.gpu_util
                u.gpu_request = max(u.gpu_request, f.gpu_request)
        return out

    def _idle(self, session: Session, now: datetime) -> list[Signal]:
        window = self.settings.idle_window_seconds
        start = now - timedelta(seconds=window)
        usage = self._usage(session, start, now)
        open_alerts: dict[tuple[str, str], Alert] = {}
        for alert in session.scalars(select(Alert).where(Alert.kind == JOB_IDLE, Alert.state != "resolved")):
            details = alert.details if isinstance(alert.details, dict) else {}
            if details.get("job_uid"):
                open_alerts[(str(details["job_uid"]), str(details.get("resource", "")))] = alert
        candidates: list[tuple[str, str, float, float]] = []  # (uid, resource, value, threshold)
        for uid, u in usage.items():
            for resource in ("cpu", "gpu"):
                measured = self._measure(u, resource)
                if measured is None:
                    continue
                value, threshold, buckets = measured
                is_open = (uid, resource) in open_alerts
                if value < threshold and (is_open or self._covers(u, buckets, start, now)):
                    candidates.append((uid, resource, value, threshold))
        carried = [key for key in open_alerts if key[0] not in usage]  # open, but no samples in the window
        runs = self._runs(session, [c[0] for c in candidates] + [k[0] for k in carried])
        signals = []
        for uid, resource, value, threshold in candidates:
            run = runs.get(uid)
            if run is not None and (run.finished_at is not None or run.object_deleted):
                continue
            signal = self._idle_signal(uid, resource, value, threshold, usage[uid], run)
            old = open_alerts.get((uid, resource))
            if old is not None and old.fingerprint != signal.fingerprint:  # e.g. the ledger row came later
                signal = replace(signal, fingerprint=old.fingerprint)
            signals.append(signal)
        for key in carried:
            run = runs.get(key[0])
            if run is None or run.finished_at is not None or run.object_deleted:
                continue  # finished or unknown: let it resolve
            old = open_alerts[key]
            signals.append(Signal(
                kind=JOB_IDLE, fingerprint=old.fingerprint, active=True, severity=old.severity,
                namespace=old.namespace, queue=old.queue, job_name=old.job_name, subject=old.subject,
                summary=old.summary, details=dict(old.details),
            ))
        return signals

    def _measure(self, u: _Usage, resource: str) -> tuple[float, float, int] | None:
        """(measured value, threshold, buckets with data) or None when the job has nothing to measure."""
        if resource == "cpu":
            if u.samples <= 0 or u.cpu_requested <= 0:
                return None
            return u.cpu_used / u.cpu_requested, self.settings.idle_cpu_ratio, u.buckets
        if u.gpu_request <= 0 or u.gpu_samples <= 0:
            return None
        return u.gpu_util / u.gpu_samples, self.settings.idle_gpu_util_percent, u.gpu_buckets

    def _covers(self, u: _Usage, buckets: int, start: datetime, now: datetime) -> bool:
        """The job's pods ran through the whole window: data from its start, fresh data, few holes."""
        width = max(u.bucket_seconds, 1.0)
        window = self.settings.idle_window_seconds
        fresh = u.last >= now - timedelta(seconds=3 * width + 60)
        from_start = u.first <= start + timedelta(seconds=width)
        expected = max(window / width, 1.0)
        return fresh and from_start and buckets >= MIN_COVERAGE * expected - 1

    @staticmethod
    def _runs(session: Session, uids: list[str]) -> dict[str, JobRun]:
        found: dict[str, JobRun] = {}
        unique = sorted(set(uids))
        for chunk in _chunks(unique):
            for run in session.scalars(select(JobRun).where(JobRun.uid.in_(chunk))):
                found[run.uid] = run
        return found

    def _idle_signal(self, uid: str, resource: str, value: float, threshold: float, u: _Usage,
                     run: JobRun | None) -> Signal:
        name = run.name if run is not None else ""
        namespace = run.namespace if run is not None else u.namespace
        queue = (run.queue if run is not None else "") or u.queue
        who = f"{namespace}/{name or u.workload}"
        if resource == "cpu":
            requested = u.cpu_requested / max(u.samples, 1)
            text = (f"Job {who} used {value:.1%} of its {requested:g}-core CPU request over the last "
                    f"{self.settings.idle_window_seconds / 60:g} min")
            measured: dict[str, Any] = {"cpu_used_ratio": round(value, 4), "cpu_requested_cores": requested,
                                        "cpu_used_cores": u.cpu_used / max(u.samples, 1)}
        else:
            held = f"{u.gpu_request:g} GPU(s)" if u.gpu_request >= 1 else f"{u.gpu_request:.0%} of a GPU"
            text = (f"Job {who}: its pods, each holding {held}, averaged {value:.1f}% utilisation "
                    f"over the last {self.settings.idle_window_seconds / 60:g} min")
            # gpus_per_container kept for readers of the old key; both are the pod's physical share (rollups'
            # gpu_request is per pod, a fraction of a card on shared GPUs)
            measured = {"gpu_util_percent": round(value, 2), "gpus_per_pod": u.gpu_request,
                        "gpus_per_container": u.gpu_request}
        return Signal(
            kind=JOB_IDLE, fingerprint=fingerprint(JOB_IDLE, namespace, name or u.workload, uid, resource),
            active=True, severity="warning", namespace=namespace, queue=queue, job_name=name,
            subject=name or u.workload, summary=text,
            details={"job_uid": uid, "resource": resource, "threshold": threshold, "workload": u.workload,
                     "window_seconds": self.settings.idle_window_seconds, **measured},
        )

    # ---- OverRequested -------------------------------------------------------------------------------

    def _over_requested(self, session: Session, now: datetime) -> list[Signal]:
        signals = []
        for run in self._over_candidates(session, now):
            end = run.finished_at or run.deleted_at
            if run.started_at is None or end is None:
                continue
            ran = (end - run.started_at).total_seconds()
            if ran < self.settings.over_requested_min_seconds:
                continue  # the SQL filter has a second of slack for the databases' time arithmetic
            signals.append(self._over_signal(run, ran, self.settings.over_requested_ratio))
        return signals

    def _over_candidates(self, session: Session, now: datetime) -> Iterator[Any]:
        """The runs of the report window that ran long enough and used less than the ratio, as rows of
        `_OVER_COLUMNS`, streamed. Every filter is in SQL: the window holds a day of runs and the check runs
        every minute, and most runs are short (at 300k pods a day, thousands of short low-usage runs were
        read and dropped in Python each time; whole JobRun objects before that, tens of MB)."""
        ratio = self.settings.over_requested_ratio
        j = JobRun
        ended = ended_at()  # a run deleted while running ended too: judged from start to deletion
        query = select(*_OVER_COLUMNS).where(
            ended >= now - timedelta(seconds=self.report_seconds),
            ended <= now - timedelta(seconds=self.settle_seconds),
            j.started_at.is_not(None),
            run_seconds(session.get_bind().dialect.name) >= self.settings.over_requested_min_seconds - 1,
            or_(and_(j.cpu_core_seconds_requested > 0, j.cpu_core_seconds_used > 0,
                     j.cpu_core_seconds_used < ratio * j.cpu_core_seconds_requested),
                and_(j.memory_byte_seconds_requested > 0, j.memory_byte_seconds_used > 0,
                     j.memory_byte_seconds_used < ratio * j.memory_byte_seconds_requested)),
        )
        return iter(session.execute(query.execution_options(yield_per=1000)))

    @staticmethod
    def _over_signal(run: Any, ran: float, ratio: float) -> Signal:  # a row of _OVER_COLUMNS
        used: dict[str, float] = {}
        if run.cpu_core_seconds_requested > 0 and run.cpu_core_seconds_used > 0:
            used["cpu"] = run.cpu_core_seconds_used / run.cpu_core_seconds_requested
        if run.memory_byte_seconds_requested > 0 and run.memory_byte_seconds_used > 0:
            used["memory"] = run.memory_byte_seconds_used / run.memory_byte_seconds_requested
        if run.gpu_seconds_requested > 0:
            used["gpu"] = run.gpu_seconds_used / run.gpu_seconds_requested
        low = {k: v for k, v in used.items() if k != "gpu" and v < ratio}
        worst = min(low.values()) if low else ratio
        parts = ", ".join(f"{k} {v:.0%}" for k, v in sorted(low.items()))
        return Signal(
            kind=OVER_REQUESTED, fingerprint=fingerprint(OVER_REQUESTED, run.namespace, run.name, run.uid),
            active=True, severity="warning" if worst < ratio / 2 else "info", namespace=run.namespace,
            queue=run.queue, job_name=run.name, subject=run.name,
            summary=f"Job {run.namespace}/{run.name} used {parts} of what it requested over {ran / 60:.0f} min",
            details={"job_uid": run.uid, "workload": run.workload, "phase": run.phase, "run_seconds": ran,
                     "used_ratio": {k: round(v, 4) for k, v in used.items()},
                     "requested": {"cpu_cores": run.requested_cpu_cores, "memory_bytes": run.requested_memory_bytes,
                                   "gpus": run.requested_gpus}},
        )
