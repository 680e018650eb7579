"""gpu idle aborts: the audit trail of the GPU idle abort action

Revision ID: 0011
Revises: 0010

`gpu_idle_aborts` holds one row per aborted (or, in dry-run, would-be aborted) job run, unique on the
run's UID: the leader writes it before creating the Volcano Command, so a retried pass or a new leader
never aborts the same run twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ident = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "gpu_idle_aborts",
        sa.Column("id", ident, autoincrement=True, nullable=False),
        sa.Column("job_uid", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("job_name", sa.String(length=253), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("command_name", sa.String(length=253), nullable=False),
        sa.Column("alert_id", ident, nullable=True),
        sa.Column("idle_seconds", sa.Float(), nullable=False),
        sa.Column("limit_seconds", sa.Float(), nullable=False),
        sa.Column("grace_seconds", sa.Float(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("identity", sa.String(length=253), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_uid"),
    )
    op.create_index("ix_gpu_idle_aborts_state", "gpu_idle_aborts", ["state"])
    op.create_index("ix_gpu_idle_aborts_created_at", "gpu_idle_aborts", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_gpu_idle_aborts_created_at", table_name="gpu_idle_aborts")
    op.drop_index("ix_gpu_idle_aborts_state", table_name="gpu_idle_aborts")
    op.drop_table("gpu_idle_aborts")
