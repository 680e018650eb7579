"""Settings of the running machinery: leader election among replicas (`leader_election:`), retention of
time-ordered data (`retention:`) and the cluster this watchdog watches (`cluster:`)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

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


CLUSTER_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


class ClusterSettings(Section):
    """Which cluster this watchdog watches, when several share one database (each its own Deployment and
    leader): every row it stores carries the name, and nothing it does touches another cluster's rows.
    Its leader writes a heartbeat; the leaders of the other clusters raise ClusterStale when it stops."""

    name: str | None = Field(
        default=None,
        description="This cluster's name (letters, digits, '.', '_', '-'; at most 63). Default: the kubeconfig's "
                    "current context, else \"default\". Required once the database holds another cluster's rows.")
    heartbeat_interval_seconds: float = Field(default=30, gt=0, description="How often the leader writes the "
                                                                             "cluster's heartbeat.")
    stale_after_seconds: float = Field(
        default=300, gt=0, description="Another cluster whose heartbeat is older than this raises ClusterStale "
                                       "(resolved when it writes again).")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str | None) -> str | None:
        if value is not None and not CLUSTER_NAME.fullmatch(value):
            raise ValueError("must be 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or "
                             "digit")
        return value

    @model_validator(mode="after")
    def _stale_after_heartbeats(self) -> ClusterSettings:
        if self.stale_after_seconds < 2 * self.heartbeat_interval_seconds:
            raise ValueError(f"cluster.stale_after_seconds ({self.stale_after_seconds:g}) must be at least twice "
                             f"cluster.heartbeat_interval_seconds ({self.heartbeat_interval_seconds:g})")
        return self


def cluster_name_from_context(context: str | None) -> str:
    """A kubeconfig context's name as a cluster name ("arn:aws:eks:...:cluster/prod" -> "arn-aws-eks-...-prod"
    style: characters a name cannot hold become '-'); "default" when there is none."""
    if not context:
        return "default"
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", context).strip("-._")[:63].rstrip("-._")
    return name or "default"
