"""report digests: one row per scheduled digest and period

Revision ID: 0009
Revises: 0008

`report_digests` records each digest the leader queued, unique on (name, period_start): a second
replica or a new leader finds the row (or fails to insert it) and does not queue the digest again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "report_digests",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("period_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("receiver", sa.String(length=64), nullable=False),
        sa.Column("delivery_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("identity", sa.String(length=253), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "period_start", name="uq_report_digests_name_period"),
    )


def downgrade() -> None:
    op.drop_table("report_digests")
