"""initial schema: ledger, usage rollups, histograms, alerts

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("job_name", sa.String(length=253), nullable=False),
        sa.Column("subject", sa.String(length=253), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index("ix_alerts_resolved_at", ["resolved_at"], unique=False)
        batch_op.create_index("ix_alerts_state", ["state"], unique=False)
        batch_op.create_index(
            "uq_alerts_active_fingerprint",
            ["fingerprint"],
            unique=True,
            sqlite_where=sa.text("state != 'resolved'"),
            postgresql_where=sa.text("state != 'resolved'"),
        )

    op.create_table(
        "job_runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("workload", sa.String(length=253), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=256), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("retry_count", sa.Integer(), nullable=False),
        sa.Column("requested_cpu_cores", sa.Float(), nullable=False),
        sa.Column("requested_memory_bytes", sa.Float(), nullable=False),
        sa.Column("requested_gpus", sa.Float(), nullable=False),
        sa.Column("cpu_core_seconds_requested", sa.Float(), nullable=False),
        sa.Column("cpu_core_seconds_used", sa.Float(), nullable=False),
        sa.Column("memory_byte_seconds_requested", sa.Float(), nullable=False),
        sa.Column("memory_byte_seconds_used", sa.Float(), nullable=False),
        sa.Column("gpu_seconds_requested", sa.Float(), nullable=False),
        sa.Column("gpu_seconds_used", sa.Float(), nullable=False),
        sa.Column("object_deleted", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uid"),
    )
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        batch_op.create_index("ix_job_runs_finished_at", ["finished_at"], unique=False)
        batch_op.create_index("ix_job_runs_namespace_name", ["namespace", "name"], unique=False)
        batch_op.create_index("ix_job_runs_queue", ["queue"], unique=False)

    op.create_table(
        "usage_rollups",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("bucket_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("bucket_seconds", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("pod", sa.String(length=253), nullable=False),
        sa.Column("container", sa.String(length=253), nullable=False),
        sa.Column("job_uid", sa.String(length=64), nullable=False),
        sa.Column("workload", sa.String(length=253), nullable=False),
        sa.Column("task", sa.String(length=253), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("cpu_cores_sum", sa.Float(), nullable=False),
        sa.Column("cpu_cores_max", sa.Float(), nullable=False),
        sa.Column("memory_bytes_sum", sa.Float(), nullable=False),
        sa.Column("memory_bytes_max", sa.Float(), nullable=False),
        sa.Column("gpu_samples", sa.Integer(), nullable=False),
        sa.Column("gpu_util_sum", sa.Float(), nullable=False),
        sa.Column("gpu_util_max", sa.Float(), nullable=False),
        sa.Column("cpu_request_cores", sa.Float(), nullable=False),
        sa.Column("memory_request_bytes", sa.Float(), nullable=False),
        sa.Column("gpu_request", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("bucket_start", "namespace", "pod", "container", name="uq_usage_rollups_bucket_container"),
    )
    with op.batch_alter_table("usage_rollups", schema=None) as batch_op:
        batch_op.create_index("ix_usage_rollups_bucket_start", ["bucket_start"], unique=False)
        batch_op.create_index("ix_usage_rollups_job_uid", ["job_uid"], unique=False)
        batch_op.create_index("ix_usage_rollups_workload", ["workload"], unique=False)

    op.create_table(
        "workload_histograms",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("workload", sa.String(length=253), nullable=False),
        sa.Column("task", sa.String(length=253), nullable=False),
        sa.Column("container", sa.String(length=253), nullable=False),
        sa.Column("cpu", sa.JSON(), nullable=False),
        sa.Column("memory", sa.JSON(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("first_sample_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_sample_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_oom_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_oom_memory_bytes", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("namespace", "workload", "task", "container", name="uq_workload_histograms_key"),
    )


def downgrade() -> None:
    op.drop_table("workload_histograms")
    with op.batch_alter_table("usage_rollups", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_rollups_workload")
        batch_op.drop_index("ix_usage_rollups_job_uid")
        batch_op.drop_index("ix_usage_rollups_bucket_start")

    op.drop_table("usage_rollups")
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_job_runs_queue")
        batch_op.drop_index("ix_job_runs_namespace_name")
        batch_op.drop_index("ix_job_runs_finished_at")

    op.drop_table("job_runs")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_alerts_active_fingerprint",
            sqlite_where=sa.text("state != 'resolved'"),
            postgresql_where=sa.text("state != 'resolved'"),
        )
        batch_op.drop_index("ix_alerts_state")
        batch_op.drop_index("ix_alerts_resolved_at")

    op.drop_table("alerts")
