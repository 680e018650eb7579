"""Settings of the running machinery: leader election among replicas (`leader_election:`) and retention of
time-ordered data (`retention:`)."""

from __future__ import annotations

from pydantic import Field

from volcano_monitor.core.settings import Section


class LeaderElection(Section):
    """Several replicas elect one leader with a coordination.k8s.io Lease; only the leader sends
    messages and patches queues. Off: this replica acts as the leader."""

    enabled: bool = Field(default=False, description="Take part in leader election.")
    namespace: str = Field(default="default", description="Namespace of the Lease (the chart sets its own).")
    lease_name: str = Field(default="volcano-watchdog", description="Name of the Lease.")
    identity: str | None = Field(default=None, description="This replica's name in the Lease (default: hostname).")
    lease_duration_seconds: float = Field(default=15, gt=0, description="A leader silent this long is replaced.")
    renew_interval_seconds: float = Field(default=5, gt=0, description="How often the leader renews.")


class Retention(Section):
    """How long time-ordered data is kept; enforced every `check_interval_seconds`, in chunks of `chunk_rows`
    on a thread of its own (watchdog.runtime.retention)."""

    usage_days: float = Field(default=14, gt=0, description="Usage rollups per container.")
    jobs_days: float = Field(default=180, gt=0, description="Job ledger rows, counted from the job's finish.")
    alerts_days: float = Field(default=90, gt=0, description="Resolved alerts, counted from their resolution.")
    histograms_days: float = Field(
        default=30, gt=0, description="Recommendation histograms of a workload with no usage sample (nor OOM kill) "
                                      "for this long: a renamed or retired job.")
    check_interval_seconds: float = Field(default=3600, gt=0, description="Seconds between retention passes.")
    downsample_after_hours: float = Field(
        default=24, ge=0,
        description="5-minute usage rollups older than this are merged into hourly rows (sums and maxima kept; the "
                    "demand policy reads each hour's highest 5-minute usage). At least the JobIdle window is always "
                    "kept at 5 minutes. 0: never downsample.")
    chunk_rows: int = Field(
        default=5000, ge=100, le=1_000_000,
        description="Rows deleted or downsampled per transaction: each chunk holds the database's write lock "
                    "(SQLite) or its rows (PostgreSQL) only briefly, so the writer is never blocked for long.")
