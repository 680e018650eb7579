"""The watchdog's tables (SQLAlchemy 2). Schema changes go through Alembic (watchdog/state/db/migrations):
change a model, then add a migration; a test fails when the two disagree.

Times are timezone-aware UTC datetimes. Resource amounts are floats in base units (cores, bytes,
GPUs); "…_seconds" columns are integrals over time (core-seconds, byte-seconds, GPU-seconds).

One piece: this is the schema, one declarative class per table sharing one metadata; Alembic's autogenerate
check (tests/watchdog/state/test_db.py) compares the migrations with it whole, and a reader looking for a
column finds every table in one place.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from volcano_monitor.watchdog.state.db.scope import Clustered, insert_default

# SQLite only autoincrements INTEGER PRIMARY KEY; PostgreSQL gets 64-bit keys.
Id = BigInteger().with_variant(Integer(), "sqlite")
Name = String(253)  # a Kubernetes name / namespace / label value


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite would hand back naive ones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given: use an aware UTC datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON}


ClusterColumn = Clustered  # the cluster a row belongs to (watchdog.state.db.scope)


class JobRun(ClusterColumn, Base):
    """One record per run of a job, kept after the Job object is gone (the ledger)."""

    __tablename__ = "job_runs"
    __table_args__ = (
        UniqueConstraint("cluster", "uid", name="uq_job_runs_cluster_uid"),
        Index("ix_job_runs_namespace_name", "cluster", "namespace", "name"),
        Index("ix_job_runs_queue", "queue"),
        Index("ix_job_runs_finished_at", "cluster", "finished_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(String(64))  # the Job's UID (a Kubeflow job: its PodGroup's)
    kind: Mapped[str] = mapped_column(String(64), default="Job")
    namespace: Mapped[str] = mapped_column(Name)
    name: Mapped[str] = mapped_column(Name)
    workload: Mapped[str] = mapped_column(Name)  # the job's name without its run suffix (or a configured label)
    queue: Mapped[str] = mapped_column(Name, default="")
    created_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    phase: Mapped[str] = mapped_column(String(32), default="")
    reason: Mapped[str] = mapped_column(String(256), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    retry_count: Mapped[int] = mapped_column(Integer, default=0)
    requested_cpu_cores: Mapped[float] = mapped_column(Float, default=0.0)
    requested_memory_bytes: Mapped[float] = mapped_column(Float, default=0.0)
    requested_gpus: Mapped[float] = mapped_column(Float, default=0.0)
    cpu_core_seconds_requested: Mapped[float] = mapped_column(Float, default=0.0)
    cpu_core_seconds_used: Mapped[float] = mapped_column(Float, default=0.0)
    memory_byte_seconds_requested: Mapped[float] = mapped_column(Float, default=0.0)
    memory_byte_seconds_used: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_seconds_requested: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_seconds_used: Mapped[float] = mapped_column(Float, default=0.0)  # utilisation x GPUs x seconds
    # The same resource-seconds priced by the node each pod ran on, added with them (watchdog.state.prices).
    cost_cpu_used: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    cost_cpu_requested: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    cost_memory_used: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    cost_memory_requested: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    cost_gpu_used: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    cost_gpu_requested: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # The queue and its ancestors, root first ("root/eng/team-a"; "" in rows older than it): a report rolls
    # a parent's children into it from the database alone.
    queue_path: Mapped[str] = mapped_column(Text, default="", server_default="")
    # Pods of the run as Volcano last counted them. A finished Job's final status drops its counts, so
    # succeeded/failed keep the last status that reported finished pods (see watchdog.state.ledger).
    pods_pending: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    pods_running: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    pods_succeeded: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    pods_failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    object_deleted: Mapped[bool] = mapped_column(default=False)
    # When the object was seen deleted (or found gone). A run deleted before it finished keeps
    # finished_at NULL: a deletion is not a finish.
    deleted_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class CostRetired(ClusterColumn, Base):
    """The cost of ledger rows retention removed, per queue and basis, so the cost counters on /metrics
    (`volcano_watchdog_queue_cost_total`: these plus the ledger's) never go down."""

    __tablename__ = "cost_retired"

    cluster: Mapped[str] = mapped_column(Name, primary_key=True, default=insert_default)
    queue: Mapped[str] = mapped_column(Name, primary_key=True)
    requested: Mapped[float] = mapped_column(Float, default=0.0)
    used: Mapped[float] = mapped_column(Float, default=0.0)
    idle: Mapped[float] = mapped_column(Float, default=0.0)


class _RollupColumns:
    """What a rollup row holds of one container over one bucket (shared by both resolutions)."""

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    bucket_start: Mapped[datetime]
    bucket_seconds: Mapped[int] = mapped_column(Integer)
    namespace: Mapped[str] = mapped_column(Name)
    pod: Mapped[str] = mapped_column(Name)
    container: Mapped[str] = mapped_column(Name)
    job_uid: Mapped[str] = mapped_column(String(64), default="")
    workload: Mapped[str] = mapped_column(Name, default="")
    task: Mapped[str] = mapped_column(Name, default="")
    queue: Mapped[str] = mapped_column(Name, default="")
    samples: Mapped[int] = mapped_column(Integer, default=0)
    cpu_cores_sum: Mapped[float] = mapped_column(Float, default=0.0)
    cpu_cores_max: Mapped[float] = mapped_column(Float, default=0.0)
    memory_bytes_sum: Mapped[float] = mapped_column(Float, default=0.0)
    memory_bytes_max: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_samples: Mapped[int] = mapped_column(Integer, default=0)
    gpu_util_sum: Mapped[float] = mapped_column(Float, default=0.0)  # percent
    gpu_util_max: Mapped[float] = mapped_column(Float, default=0.0)
    cpu_request_cores: Mapped[float] = mapped_column(Float, default=0.0)
    memory_request_bytes: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_request: Mapped[float] = mapped_column(Float, default=0.0)


class UsageRollup(ClusterColumn, _RollupColumns, Base):
    """Usage of one container over one time bucket: a few numbers instead of every raw sample."""

    __tablename__ = "usage_rollups"
    __table_args__ = (
        # Leads with bucket_start, so it also serves retention's range deletes, JobIdle's window and
        # the API's latest bucket.
        UniqueConstraint("cluster", "bucket_start", "namespace", "pod", "container",
                         name="uq_usage_rollups_bucket_container"),
        Index("ix_usage_rollups_job_uid", "job_uid"),
        Index("ix_usage_rollups_queue_bucket", "queue", "bucket_start"),  # the demand policy's window per queue
    )


class UsageRollupHourly(ClusterColumn, _RollupColumns, Base):
    """`usage_rollups` rows older than `retention.downsample_after_hours`, merged per container and hour
    (watchdog.runtime.retention). Sums and sample counts add, maxima take the greater, so every total the
    readers compute stays exact; requests are sample-weighted means (request x samples stays exact).
    The demand policy needs each 5-minute bucket's mean, which an hour's sums cannot give back: it reads
    the highest one (`cpu_cores_mean_max`, `gpus_used_max`), an upper bound of every bucket of the hour.
    A separate table, so the 5-minute table's oldest rows are always the next to downsample."""

    __tablename__ = "usage_rollups_hourly"
    __table_args__ = (
        UniqueConstraint("cluster", "bucket_start", "namespace", "pod", "container",
                         name="uq_usage_rollups_hourly_bucket_container"),
        Index("ix_usage_rollups_hourly_queue_bucket", "queue", "bucket_start"),
    )

    buckets: Mapped[int] = mapped_column(Integer, default=0)  # 5-minute rows merged into this one
    cpu_cores_mean_max: Mapped[float] = mapped_column(Float, default=0.0)  # highest bucket mean of cores
    # Highest bucket's GPUs in use: mean utilisation x GPUs requested, or the GPUs requested where no
    # utilisation was measured (the demand policy's figure).
    gpus_used_max: Mapped[float] = mapped_column(Float, default=0.0)


class WorkloadHistogram(ClusterColumn, Base):
    """Decaying usage histograms of one workload x task x container, for recommendations."""

    __tablename__ = "workload_histograms"
    __table_args__ = (
        UniqueConstraint("cluster", "namespace", "workload", "task", "container", name="uq_workload_histograms_key"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(Name)
    workload: Mapped[str] = mapped_column(Name)
    task: Mapped[str] = mapped_column(Name, default="")
    container: Mapped[str] = mapped_column(Name)
    cpu: Mapped[dict[str, Any]]  # serialized histogram (see watchdog.findings.recommendations.book)
    memory: Mapped[dict[str, Any]]
    samples: Mapped[int] = mapped_column(BigInteger, default=0)
    first_sample_at: Mapped[datetime | None]
    last_sample_at: Mapped[datetime | None]
    last_oom_at: Mapped[datetime | None]
    last_oom_memory_bytes: Mapped[float] = mapped_column(Float, default=0.0)
    # The container as last seen: requests, limits, queue and caps
    # (watchdog.findings.recommendations.policy.ContainerSpec);
    # NULL until a pod of it is seen. None is SQL NULL (not JSON null): an upsert without a spec keeps the
    # stored one through COALESCE.
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    updated_at: Mapped[datetime]


class Alert(ClusterColumn, Base):
    """One episode of an alert: pending -> firing -> resolved. At most one unresolved row per fingerprint."""

    __tablename__ = "alerts"
    __table_args__ = (
        Index("uq_alerts_active_fingerprint", "cluster", "fingerprint", unique=True,
              sqlite_where=text("state != 'resolved'"), postgresql_where=text("state != 'resolved'")),
        Index("ix_alerts_fingerprint", "fingerprint"),  # once-per-run kinds look up resolved rows too
        Index("ix_alerts_state", "state"),
        Index("ix_alerts_resolved_at", "resolved_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    namespace: Mapped[str] = mapped_column(Name, default="")
    queue: Mapped[str] = mapped_column(Name, default="")
    job_name: Mapped[str] = mapped_column(Name, default="")
    subject: Mapped[str] = mapped_column(Name, default="")  # the pod / podgroup / queue the alert is about
    summary: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]]
    started_at: Mapped[datetime]
    fired_at: Mapped[datetime | None]
    resolved_at: Mapped[datetime | None]
    last_seen_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # Resolved by hand while its cause still held: no new episode opens until the detector reports the
    # cause gone (then this is cleared), so a persisting cause is not re-announced right away.
    held: Mapped[bool] = mapped_column(default=False, server_default=text("false"))


class AlertRequest(ClusterColumn, Base):
    """A person's request about an alert (resolve), made through the API on any replica and carried out
    by the leader's worker, the only writer of alert state: the alert book, the outbox and the row then
    change in one transaction, and exactly one "resolved" message goes out."""

    __tablename__ = "alert_requests"
    __table_args__ = (Index("ix_alert_requests_pending", "done_at", "id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    alert_id: Mapped[int] = mapped_column(Id)
    action: Mapped[str] = mapped_column(String(16))  # "resolve"
    requested_at: Mapped[datetime]
    done_at: Mapped[datetime | None]
    outcome: Mapped[str] = mapped_column(String(32), default="")  # resolved / already_resolved / no_such_alert


class NotificationGroup(ClusterColumn, Base):
    """One message group of one route and receiver (Alertmanager's aggregation group): the alerts that
    share the route's `group_by` label values. `flush_at`: when the next message is due (None: nothing
    to say until an alert changes). Written in the transaction that changes an alert."""

    __tablename__ = "notification_groups"
    __table_args__ = (
        Index("ix_notification_groups_flush_at", "flush_at"),
        UniqueConstraint("cluster", "group_key", name="uq_notification_groups_cluster_key"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    group_key: Mapped[str] = mapped_column(String(64))
    receiver: Mapped[str] = mapped_column(String(64))
    route: Mapped[str] = mapped_column(String(64))  # the route's path in the tree, e.g. "0.2"
    labels: Mapped[dict[str, Any]]
    flush_at: Mapped[datetime | None]
    last_flush_at: Mapped[datetime | None]
    # Bumped by every writer of the group or its entries, compare-and-set (watchdog.actions.notify.outbox):
    # the worker's enqueue and the sender's flush cannot overwrite each other's change.
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class NotificationEntry(ClusterColumn, Base):
    """An alert's latest state inside a group, and the state last put into a message (`notified_status`)."""

    __tablename__ = "notification_entries"
    __table_args__ = (UniqueConstraint("group_id", "fingerprint", name="uq_notification_entries_group_fingerprint"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    group_id: Mapped[int] = mapped_column(Id, ForeignKey("notification_groups.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))  # firing / resolved
    notified_status: Mapped[str | None] = mapped_column(String(16))
    alert: Mapped[dict[str, Any]]  # watchdog.actions.notify.message.AlertItem as a dict
    changed_at: Mapped[datetime]


class NotificationDelivery(ClusterColumn, Base):
    """One message in the outbox: pending -> sending -> sent, or failed attempts back to pending with a
    later `next_attempt_at`, then dead; `uncertain` when a process died between sending and marking
    (never sent again: the chat services have no idempotency key). Delivered in `id` order per group."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        Index("ix_notification_deliveries_state_next", "state", "next_attempt_at"),
        Index("ix_notification_deliveries_group", "group_id", "id"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    group_id: Mapped[int] = mapped_column(Id, ForeignKey("notification_groups.id", ondelete="CASCADE"))
    receiver: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    message: Mapped[dict[str, Any]]  # watchdog.actions.notify.message.Message as a dict
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime]
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[datetime | None]
    sent_at: Mapped[datetime | None]
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Silence(ClusterColumn, Base):
    """Mutes notifications of matching alerts between `starts_at` and `ends_at` (expiring sets `ends_at`)."""

    __tablename__ = "silences"
    __table_args__ = (Index("ix_silences_ends_at", "ends_at"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    matchers: Mapped[list[str]] = mapped_column(JSON)
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(Name, default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class CapabilityPlan(ClusterColumn, Base):
    """The latest plan of one queue's capability policy (watchdog.actions.capability): one row per queue, replaced
    by the leader at every reconcile, so any replica's API can show it."""

    __tablename__ = "capability_plans"
    __table_args__ = (UniqueConstraint("cluster", "queue", name="uq_capability_plans_cluster_queue"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    queue: Mapped[str] = mapped_column(Name)
    policy: Mapped[str] = mapped_column(String(16))  # share / demand
    mode: Mapped[str] = mapped_column(String(16))  # dry-run / apply
    outcome: Mapped[str] = mapped_column(String(16))  # applied, dry_run, unchanged, held, conflict, failed
    resources: Mapped[dict[str, Any]]  # resource -> {current, target, planned, allocated, why, held}
    inputs: Mapped[dict[str, Any]]
    identity: Mapped[str] = mapped_column(Name, default="")  # the replica that planned
    planned_at: Mapped[datetime]


class CapabilityChange(ClusterColumn, Base):
    """The audit trail of capability changes: applied to a Queue, or planned in dry-run mode."""

    __tablename__ = "capability_changes"
    __table_args__ = (Index("ix_capability_changes_queue_created", "queue", "created_at"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    queue: Mapped[str] = mapped_column(Name)
    policy: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[str] = mapped_column(String(16))  # applied / dry_run
    before: Mapped[dict[str, Any]]  # resource -> amount (base units) of the resources changed; null: unset
    after: Mapped[dict[str, Any]]
    why: Mapped[dict[str, Any]]  # resource -> explanation
    inputs: Mapped[dict[str, Any]]
    resource_version: Mapped[str] = mapped_column(String(64), default="")  # the Queue's, after the patch
    identity: Mapped[str] = mapped_column(Name, default="")
    created_at: Mapped[datetime]


class ReportDigestSent(ClusterColumn, Base):
    """A scheduled report digest put into the outbox: one row per digest and period, so a second
    replica (or a new leader) never queues the same digest again. Written in the transaction that
    queues the message; the unique key makes a racing second writer fail instead."""

    __tablename__ = "report_digests"
    __table_args__ = (UniqueConstraint("cluster", "name", "period_start", name="uq_report_digests_name_period"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    period_start: Mapped[datetime]
    period_end: Mapped[datetime]
    receiver: Mapped[str] = mapped_column(String(64))
    delivery_id: Mapped[int | None] = mapped_column(Id)
    identity: Mapped[str] = mapped_column(Name, default="")  # the replica that queued it
    created_at: Mapped[datetime]


class OomResubmission(ClusterColumn, Base):
    """OOM auto scale-up's audit trail and lineage (watchdog/actions/oomscale): one row per attempt of a
    lineage (the first run OOM-killed, then its `-oom<N>` resubmissions). The unique key is what makes
    the action idempotent: the leader inserts the row before it creates the Job, so a retry, a restart
    or a second replica finds it (or fails to insert it) and never submits the same attempt twice."""

    __tablename__ = "oom_resubmissions"
    __table_args__ = (
        UniqueConstraint("cluster", "namespace", "lineage_uid", "attempt",
                         name="uq_oom_resubmissions_lineage_attempt"),
        Index("ix_oom_resubmissions_namespace_lineage", "namespace", "lineage"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(Name)
    lineage: Mapped[str] = mapped_column(Name)  # the first run's Job name
    lineage_uid: Mapped[str] = mapped_column(String(64))  # the first run's Job UID
    attempt: Mapped[int] = mapped_column(Integer)  # 1 for <lineage>-oom1, ...
    source_name: Mapped[str] = mapped_column(Name)  # the Job that was OOM-killed
    source_uid: Mapped[str] = mapped_column(String(64))
    new_name: Mapped[str] = mapped_column(Name)  # the Job submitted (or that would be, in dry-run)
    queue: Mapped[str] = mapped_column(Name, default="")
    mode: Mapped[str] = mapped_column(String(16))  # dry-run / apply
    outcome: Mapped[str] = mapped_column(String(16))  # pending / applied / dry_run / capped / exhausted / failed
    containers: Mapped[dict[str, Any]]  # "task/container" -> {request, limit, peak, new_request, new_limit, why}
    message: Mapped[str] = mapped_column(Text, default="")
    identity: Mapped[str] = mapped_column(Name, default="")  # the replica that decided
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
class GpuIdleAbortRow(ClusterColumn, Base):
    """The audit trail of the GPU idle abort action: one row per job run (unique UID), written by the
    leader before it creates the Volcano Command, so a retried pass (a database error, a new leader)
    finds the row and never aborts the same run twice. `state`: pending (Command not created yet),
    created, dry_run, gone (the job ended or changed before), failed."""

    __tablename__ = "gpu_idle_aborts"
    __table_args__ = (
        Index("ix_gpu_idle_aborts_state", "state"),
        Index("ix_gpu_idle_aborts_created_at", "created_at"),
        UniqueConstraint("cluster", "job_uid", name="uq_gpu_idle_aborts_cluster_job_uid"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    job_uid: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(Name)
    job_name: Mapped[str] = mapped_column(Name)
    queue: Mapped[str] = mapped_column(Name, default="")
    mode: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    command_name: Mapped[str] = mapped_column(Name, default="")
    alert_id: Mapped[int | None] = mapped_column(Id)
    idle_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    limit_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    grace_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")
    identity: Mapped[str] = mapped_column(Name, default="")  # the replica that acted
    created_at: Mapped[datetime]
    acted_at: Mapped[datetime | None]
class WorkloadBackfill(ClusterColumn, Base):
    """A workload whose recommendation histograms got their history from Prometheus
    (watchdog.findings.recommendations.backfill):
    one row per workload, written in the transaction that stores the merged histograms, so a restart or
    another replica never back-fills it again (the unique key makes a racing second writer fail)."""

    __tablename__ = "workload_backfills"
    __table_args__ = (UniqueConstraint("cluster", "namespace", "workload", name="uq_workload_backfills_key"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(Name)
    workload: Mapped[str] = mapped_column(Name)
    range_start: Mapped[datetime]  # the history read: (range_start, range_end]
    range_end: Mapped[datetime]
    containers: Mapped[int] = mapped_column(Integer, default=0)  # task x container keys that got history
    samples: Mapped[int] = mapped_column(BigInteger, default=0)  # one-a-minute equivalents added
    created_at: Mapped[datetime]


class ClusterHeartbeat(Base):
    """The last sign of life of each cluster's watchdog (one row per cluster, written by its leader):
    another cluster's leader raises ClusterStale when it grows old (watchdog.findings.detectors.fleet)."""

    __tablename__ = "cluster_heartbeats"

    cluster: Mapped[str] = mapped_column(Name, primary_key=True)
    identity: Mapped[str] = mapped_column(Name, default="")  # the leader that wrote it
    started_at: Mapped[datetime]  # when this cluster first wrote a heartbeat
    seen_at: Mapped[datetime]
