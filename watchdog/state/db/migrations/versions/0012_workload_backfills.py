"""workload backfills: one row per workload whose history came from Prometheus

Revision ID: 0012
Revises: 0011

`workload_backfills` records each workload the leader back-filled, unique on (namespace, workload): a
restart or a second replica finds the row (or fails to insert it) and never adds the same samples twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workload_backfills",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("workload", sa.String(length=253), nullable=False),
        sa.Column("range_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("range_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("containers", sa.Integer(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("namespace", "workload", name="uq_workload_backfills_key"),
    )


def downgrade() -> None:
    op.drop_table("workload_backfills")
