"""The GPU idle families of the watchdog's /metrics, from the tracker's and the aborter's memory."""

from __future__ import annotations

from collections.abc import Mapping

from volcano_monitor.core.exposition import COUNTER, Family
from volcano_monitor.watchdog.state.gpu_idle import NO_GPU_DATA, STATES, JobGpu

JOB_GPU_IDLE = Family("volcano_watchdog_job_gpu_idle_seconds_total",
                      "Seconds the job's GPUs have all been below gpu_idle.idle_util_percent, counted per collection "
                      "interval from DCGM; back to 0 when they get busy (the current idle streak). Absent for jobs "
                      "with no GPU data (see volcano_watchdog_job_gpu_state). Leader only.",
                      ("namespace", "job_name", "queue"), COUNTER)
JOB_GPU_STATE = Family("volcano_watchdog_job_gpu_state",
                       "1 for the state of the job's GPUs in the latest collection: idle, busy, or no_gpu_data "
                       "(the job requests GPUs but Prometheus has no DCGM_FI_DEV_GPU_UTIL series for them: never "
                       "idle). Leader only.", ("namespace", "job_name", "queue", "state"))
GPU_IDLE_ABORTS = Family("volcano_watchdog_gpu_idle_aborts_total",
                         "Jobs the GPU idle policy aborted through a Volcano Command, by queue and outcome: created, "
                         "dry_run (would have), gone (the job ended or changed first), failed; counted by the "
                         "replica that acted.", ("queue", "outcome"), COUNTER)
DCGM_LABEL_STYLE = Family("volcano_watchdog_dcgm_label_style",
                          "1 for the label style the Prometheus collector reads DCGM series in: namespace "
                          "(namespace/pod/container), exported (exported_namespace/exported_pod/exported_container), "
                          "or unknown (auto, and no DCGM series seen yet). Absent without the Prometheus source.",
                          ("style",))


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
