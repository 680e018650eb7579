"""The GPU idle families of the watchdog's /metrics, from the tracker's and the aborter's memory."""

from __future__ import annotations

from collections.abc import Mapping

from volcano_monitor.watchdog.gpuidle.tracker import NO_GPU_DATA, STATES, JobGpu
from volcano_monitor.watchdog.metrics import DCGM_LABEL_STYLE, GPU_IDLE_ABORTS, JOB_GPU_IDLE, JOB_GPU_STATE

DCGM_STYLES = ("namespace", "exported", "unknown")


def render_gpu_idle_metrics(jobs: list[JobGpu], aborts: Mapping[tuple[str, str], int],
                            dcgm_style: str | None = None) -> str:
    """`dcgm_style`: the Prometheus collector's (None: no Prometheus source; "unknown": not detected yet)."""
    idle = [JOB_GPU_IDLE.line((j.namespace, j.job_name, j.queue), j.idle_seconds) for j in jobs
            if j.state != NO_GPU_DATA]
    states = [JOB_GPU_STATE.line((j.namespace, j.job_name, j.queue, state), int(j.state == state))
              for j in jobs for state in STATES]
    counts = [GPU_IDLE_ABORTS.line(key, value) for key, value in sorted(aborts.items())]
    styles = [DCGM_LABEL_STYLE.line((style,), int(style == dcgm_style)) for style in DCGM_STYLES] \
        if dcgm_style is not None else []
    return (JOB_GPU_IDLE.header + "".join(idle) + JOB_GPU_STATE.header + "".join(states)
            + GPU_IDLE_ABORTS.header + "".join(counts) + DCGM_LABEL_STYLE.header + "".join(styles))
