"""usage history at scale: hourly rollups, the demand index, no unused workload index

Revision ID: 0008
Revises: 0007

- `usage_rollups_hourly`: 5-minute rollups older than `retention.downsample_after_hours` are merged
  into one row per container and hour (watchdog.runtime.retention), with the per-bucket peaks the demand
  policy needs (`cpu_cores_mean_max`, `gpus_used_max`).
- `ix_usage_rollups_queue_bucket` (queue, bucket_start): the demand policy reads one queue's window;
  without it every reconcile scanned the whole window of every queue.
- `ix_usage_rollups_workload` dropped: nothing reads rollups by workload (recommendations read their
  histograms), and every index costs each of the ~29M rows a day written at 100k containers.

Plain CREATE INDEX (not CONCURRENTLY): the schema is migrated at start, before anything writes; on a
PostgreSQL table of hundreds of millions of rows it takes minutes once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_rollups_hourly",
        sa.Column("buckets", sa.Integer(), nullable=False),
        sa.Column("cpu_cores_mean_max", sa.Float(), nullable=False),
        sa.Column("gpus_used_max", sa.Float(), nullable=False),
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
        sa.UniqueConstraint("bucket_start", "namespace", "pod", "container",
                            name="uq_usage_rollups_hourly_bucket_container"),
    )
    op.create_index("ix_usage_rollups_hourly_queue_bucket", "usage_rollups_hourly", ["queue", "bucket_start"])
    op.create_index("ix_usage_rollups_queue_bucket", "usage_rollups", ["queue", "bucket_start"])
    op.drop_index("ix_usage_rollups_workload", table_name="usage_rollups")


def downgrade() -> None:
    op.create_index("ix_usage_rollups_workload", "usage_rollups", ["workload"])
    op.drop_index("ix_usage_rollups_queue_bucket", table_name="usage_rollups")
    op.drop_index("ix_usage_rollups_hourly_queue_bucket", table_name="usage_rollups_hourly")
    op.drop_table("usage_rollups_hourly")
