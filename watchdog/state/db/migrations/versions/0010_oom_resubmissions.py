"""OOM auto scale-up: the lineage and audit trail of resubmissions

Revision ID: 0010
Revises: 0009

`oom_resubmissions` holds one row per attempt of a lineage, unique on (namespace, lineage_uid,
attempt): the leader inserts it before creating the `-oom<N>` Job, so no attempt is submitted twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "oom_resubmissions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("lineage", sa.String(length=253), nullable=False),
        sa.Column("lineage_uid", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("source_name", sa.String(length=253), nullable=False),
        sa.Column("source_uid", sa.String(length=64), nullable=False),
        sa.Column("new_name", sa.String(length=253), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("containers", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("identity", sa.String(length=253), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("namespace", "lineage_uid", "attempt", name="uq_oom_resubmissions_lineage_attempt"),
    )
    op.create_index("ix_oom_resubmissions_namespace_lineage", "oom_resubmissions", ["namespace", "lineage"])


def downgrade() -> None:
    op.drop_index("ix_oom_resubmissions_namespace_lineage", table_name="oom_resubmissions")
    op.drop_table("oom_resubmissions")
