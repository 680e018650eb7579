"""The GPU idle families of the watchdog's /metrics, from the tracker's and the aborter's memory."""

from __future__ import annotations

from collections.abc import Mapping

from watchdog.gpuidle.tracker import NO_GPU_DATA, STATES, JobGpu
from watchdog.metrics import GPU_IDLE_ABORTS, JOB_GPU_IDLE, JOB_GPU_STATE


def render_gpu_idle_metrics(jobs: list[JobGpu], aborts: Mapping[tuple[str, str], int]) -> str:
    idle = [JOB_GPU_IDLE.line((j.namespace, j.job_name, j.queue), j.idle_seconds) for j in jobs
            if j.state != NO_GPU_DATA]
    states = [JOB_GPU_STATE.line((j.namespace, j.job_name, j.queue, state), int(j.state == state))
              for j in jobs for state in STATES]
    counts = [GPU_IDLE_ABORTS.line(key, value) for key, value in sorted(aborts.items())]
    return (JOB_GPU_IDLE.header + "".join(idle) + JOB_GPU_STATE.header + "".join(states)
            + GPU_IDLE_ABORTS.header + "".join(counts))
