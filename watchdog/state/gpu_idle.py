"""GPU idle seconds per job, counted from the Prometheus collector's rounds (DCGM and HAMi utilisation).

Each round of samples (one instant, every container Prometheus reported) is grouped by job, over the
pods that requested GPUs. A job is:

- **idle** when every one of its GPU pods reported GPU utilisation and all of them are below
  `idle_util_percent`: its idle seconds grow by the time since the job's previous round, when that
  round found it idle too (an interval counts when both its ends are idle);
- **busy** when each GPU pod reported and one is at or above it: the idle seconds go back to 0 (they
  count the current streak, as Run:ai's idle-GPU rules do, so the limit means "idle this long in a row");
- **no_gpu_data** when a GPU pod has usage samples (it runs) but no DCGM_FI_DEV_GPU_UTIL series: a node
  without the DCGM exporter, or a pod mapping that is off. Never idle: nothing is known about its GPUs.

On shared cards (HAMi, Volcano's vGPU) a pod's utilisation is that of its share of the card, as the collector
reads it (watchdog.sources.shared_gpus): with HAMi's series its own, so a pod is idle when it used ~nothing
even while the pods beside it keep the card busy; with DCGM only, the card's utilisation split across the pods
sharing it, so a pod is idle exactly when its card is (DCGM cannot tell which pod used the card). The
threshold means the same on a whole card and on a quarter: 5 % is 5 % of what the pod holds. A HAMi container
that never touched its vGPU has no HAMi series (HAMi-core writes them on first CUDA use): without a DCGM series
naming its pod either, it is no_gpu_data, not idle.

Why the time since the previous round, capped: a gap longer than `max_gap_seconds` (collector down,
leadership moved) says nothing about what the GPUs did, so it adds nothing rather than a guess.

Only the Prometheus collector's rounds are fed here (the metrics API has no GPU data: a round of it would
make every GPU job look unreported). Lives on the worker thread; `snapshot()` is safe from others.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace

from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.state.samples import PodInfo, PodLookup, UsageSample

IDLE, BUSY, NO_GPU_DATA = "idle", "busy", "no_gpu_data"
STATES = (IDLE, BUSY, NO_GPU_DATA)


@dataclass(frozen=True, slots=True)
class JobGpu:
    """What is known of one job's GPUs after its latest round."""

    uid: str
    namespace: str
    job_name: str
    queue: str
    state: str
    idle_seconds: float  # the current idle streak (0 unless idle)
    # the highest utilisation among its GPU pods in the latest round (on a shared card: of the pod's share)
    gpu_util_percent: float | None
    gpu_pods: int
    last_ts: float
    state_since: float  # when the job entered its current state (this replica's view)


class GpuIdleTracker:
    def __init__(self, settings: GpuIdleSettings, max_gap_seconds: float = 180.0) -> None:
        self.settings = settings
        self.max_gap_seconds = max_gap_seconds
        self._jobs: dict[str, JobGpu] = {}
        self._lock = threading.Lock()

    def observe(self, samples: Iterable[UsageSample], pods: PodLookup) -> None:
        """One collection round: update every GPU job that has samples in it."""
        # Per job, per GPU pod: its highest container utilisation (only the container holding GPUs has
        # a DCGM series), None when no container of the pod reported any.
        utils: dict[str, dict[str, float | None]] = {}
        info_of: dict[str, PodInfo] = {}
        ts_of: dict[str, float] = {}
        for sample in samples:
            info = pods(sample.namespace, sample.pod)
            if info is None or not info.job_uid or info.gpus <= 0:
                continue
            job = utils.setdefault(info.job_uid, {})
            info_of[info.job_uid] = info
            ts_of[info.job_uid] = max(ts_of.get(info.job_uid, sample.ts), sample.ts)
            value, before = sample.gpu_util_percent, job.get(sample.pod)
            job[sample.pod] = before if value is None else value if before is None else max(before, value)
        updated = {uid: self._next(self._jobs.get(uid), info_of[uid], list(job.values()), ts_of[uid])
                   for uid, job in utils.items()}
        with self._lock:
            self._jobs.update(updated)

    def _next(self, old: JobGpu | None, info: PodInfo, utils: list[float | None], ts: float) -> JobGpu:
        known = [u for u in utils if u is not None]
        if len(known) < len(utils):
            state = NO_GPU_DATA
        elif all(u < self.settings.idle_util_percent for u in known):
            state = IDLE
        else:
            state = BUSY
        # An interval counts when the rounds at both its ends found the GPUs idle.
        was_idle = old is not None and old.state == IDLE
        gap = ts - old.last_ts if old is not None else 0.0
        step = gap if was_idle and 0 < gap <= self.max_gap_seconds else 0.0
        idle = ((old.idle_seconds if old is not None and was_idle else 0.0) + step) if state == IDLE else 0.0
        since = old.state_since if old is not None and old.state == state else ts
        return JobGpu(uid=info.job_uid, namespace=info.namespace, job_name=info.job_name, queue=info.queue,
                      state=state, idle_seconds=idle, gpu_util_percent=max(known) if known else None,
                      gpu_pods=len(utils), last_ts=ts, state_since=since)

    def forget(self, keep: set[str], older_than: float) -> None:
        """Drop jobs that are no longer live (not in `keep`) or were last seen before `older_than`."""
        with self._lock:
            self._jobs = {uid: job for uid, job in self._jobs.items() if uid in keep and job.last_ts >= older_than}

    def snapshot(self) -> list[JobGpu]:
        with self._lock:
            return sorted((replace(job) for job in self._jobs.values()), key=lambda j: (j.namespace, j.job_name))

    def get(self, uid: str) -> JobGpu | None:
        with self._lock:
            return self._jobs.get(uid)
