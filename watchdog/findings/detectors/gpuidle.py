"""GPU idle detectors (periodic, from the GPU idle tracker's memory):

GpuIdle — a job whose GPUs have all been idle (below `gpu_idle.idle_util_percent`) for its queue's
`gpu_idle_limit_seconds` without a break. It stays active while the job stays idle and resolves when
the job gets busy or ends. When the queue's policy aborts, the details say when (`abort_after_seconds`
of firing); `watchdog.actions.gpu_idle.abort` acts on the firing alert, never on this detector's memory alone.

GpuNoData — a job requesting GPUs whose running GPU pods have no GPU utilisation series (DCGM's
DCGM_FI_DEV_GPU_UTIL, or HAMi's per-container series on shared cards) for `gpu_idle.no_data_seconds`: the
watchdog cannot tell whether they work, and says so instead of calling them idle (info).

Shared cards: a pod holding a quarter of a card is a GPU pod like any other, and its utilisation is of its
share (watchdog.sources.shared_gpus), so "idle" means the same on a quarter and on a whole card. With DCGM
alone a shared card's use is split over the pods on it: they are idle exactly when the card is.

Why open alerts are carried: the tracker is memory, and a new leader's starts empty. An open alert of
a job the tracker has not seen since (no round yet, or a round without the job) stays active while
the job is live (and, before the informers' first lists are in, whatever the job), as JobIdle does
across gaps; one the tracker sees busy (or no longer idle) resolves.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.state.gpu_idle import IDLE, NO_GPU_DATA, GpuIdleTracker, JobGpu
from volcano_monitor.watchdog.state.signals import Signal, fingerprint

__all__ = ["GPU_IDLE", "GPU_NO_DATA", "GpuIdleDetector"]

GPU_IDLE = "GpuIdle"
GPU_NO_DATA = "GpuNoData"


class GpuIdleDetector:
    KINDS = frozenset({GPU_IDLE, GPU_NO_DATA})

    def __init__(self, settings: GpuIdleSettings, tracker: GpuIdleTracker, live: Callable[[], set[str]],
                 synced: Callable[[], bool] = lambda: True) -> None:
        self.settings = settings
        self.tracker = tracker
        self.live = live  # UIDs of the runs the informers hold now
        self.synced = synced  # the index holds the informers' first lists (before: every open alert is carried)

    def check(self, session: Session, now: datetime) -> list[Signal]:
        signals: list[Signal] = []
        jobs = {job.uid: job for job in self.tracker.snapshot()}
        for job in jobs.values():
            limit = self.settings.policy(job.queue).gpu_idle_limit_seconds
            if job.state == IDLE and limit is not None and job.idle_seconds >= limit:
                signals.append(self._idle_signal(job, limit))
            elif job.state == NO_GPU_DATA and job.last_ts - job.state_since >= self.settings.no_data_seconds:
                signals.append(self._no_data_signal(job))
        reported = {s.fingerprint for s in signals}
        live = self.live() if self.synced() else None
        for alert in session.scalars(select(Alert).where(Alert.kind.in_(self.KINDS), Alert.state != "resolved")):
            details = alert.details if isinstance(alert.details, dict) else {}
            uid = str(details.get("job_uid", ""))
            seen = jobs.get(uid)
            if alert.fingerprint in reported or (live is not None and uid not in live):
                continue
            # Carried: unknown to this tracker (a new leader), or still in the state that opened it.
            if seen is None or (alert.kind == GPU_IDLE and seen.state == IDLE) or \
                    (alert.kind == GPU_NO_DATA and seen.state == NO_GPU_DATA):
                signals.append(Signal(kind=alert.kind, fingerprint=alert.fingerprint, active=True,
                                      severity=alert.severity, namespace=alert.namespace, queue=alert.queue,
                                      job_name=alert.job_name, subject=alert.subject, summary=alert.summary,
                                      details=dict(details)))
        return signals

    def _idle_signal(self, job: JobGpu, limit: float) -> Signal:
        aborts = self.settings.aborts(job.queue)
        action = (f"; it will be aborted after {self.settings.abort.grace_seconds / 60:g} more min "
                  f"({self.settings.abort.mode})" if aborts else "")
        util = f"{job.gpu_util_percent:.1f}%" if job.gpu_util_percent is not None else "?"
        return Signal(
            kind=GPU_IDLE, fingerprint=fingerprint(GPU_IDLE, job.namespace, job.job_name, job.uid), active=True,
            severity="warning", namespace=job.namespace, queue=job.queue, job_name=job.job_name,
            subject=job.job_name,
            summary=(f"Job {job.namespace}/{job.job_name}: its GPUs have been idle (at most {util}, below "
                     f"{self.settings.idle_util_percent:g}%) for {job.idle_seconds / 60:.0f} min, over queue "
                     f"{job.queue}'s limit of {limit / 60:g} min{action}"),
            details={"job_uid": job.uid, "idle_seconds": round(job.idle_seconds, 1), "limit_seconds": limit,
                     "gpu_util_percent": job.gpu_util_percent, "gpu_pods": job.gpu_pods,
                     "threshold_percent": self.settings.idle_util_percent, "abort": aborts,
                     "abort_mode": self.settings.abort.mode if aborts else None,
                     "abort_after_seconds": self.settings.abort.grace_seconds if aborts else None},
        )

    def _no_data_signal(self, job: JobGpu) -> Signal:
        return Signal(
            kind=GPU_NO_DATA, fingerprint=fingerprint(GPU_NO_DATA, job.namespace, job.job_name, job.uid),
            active=True, severity="info", namespace=job.namespace, queue=job.queue, job_name=job.job_name,
            subject=job.job_name,
            summary=(f"Job {job.namespace}/{job.job_name} requests GPUs but Prometheus has no GPU utilisation "
                     f"series (DCGM_FI_DEV_GPU_UTIL, or HAMi's on shared cards) for {job.gpu_pods} of its GPU pods: "
                     "no GPU data (not counted as idle)"),
            details={"job_uid": job.uid, "gpu_pods": job.gpu_pods,
                     "no_data_seconds": round(job.last_ts - job.state_since, 1)},
        )
