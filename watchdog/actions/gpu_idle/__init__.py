"""GPU idle time per job: seconds each job's GPUs were all idle, a per-queue limit that raises GpuIdle,
"no GPU data" for GPU jobs DCGM does not report, and the opt-in AbortJob action (docs/gpu-idle.md)."""
