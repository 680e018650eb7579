"""notification outbox and silences

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("notification_groups",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("group_key", sa.String(length=64), nullable=False),
    sa.Column("receiver", sa.String(length=64), nullable=False),
    sa.Column("route", sa.String(length=64), nullable=False),
    sa.Column("labels", sa.JSON(), nullable=False),
    sa.Column("flush_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("last_flush_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("group_key")
    )
    with op.batch_alter_table("notification_groups", schema=None) as batch_op:
        batch_op.create_index("ix_notification_groups_flush_at", ["flush_at"], unique=False)

    op.create_table("silences",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("matchers", sa.JSON(), nullable=False),
    sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("created_by", sa.String(length=253), nullable=False),
    sa.Column("comment", sa.Text(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("id")
    )
    with op.batch_alter_table("silences", schema=None) as batch_op:
        batch_op.create_index("ix_silences_ends_at", ["ends_at"], unique=False)

    op.create_table("notification_deliveries",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("group_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("receiver", sa.String(length=64), nullable=False),
    sa.Column("state", sa.String(length=16), nullable=False),
    sa.Column("message", sa.JSON(), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("claimed_by", sa.String(length=64), nullable=True),
    sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("last_error", sa.Text(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(["group_id"], ["notification_groups.id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id")
    )
    with op.batch_alter_table("notification_deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_notification_deliveries_group", ["group_id", "id"], unique=False)
        batch_op.create_index("ix_notification_deliveries_state_next", ["state", "next_attempt_at"], unique=False)

    op.create_table("notification_entries",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("group_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("fingerprint", sa.String(length=64), nullable=False),
    sa.Column("status", sa.String(length=16), nullable=False),
    sa.Column("notified_status", sa.String(length=16), nullable=True),
    sa.Column("alert", sa.JSON(), nullable=False),
    sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(["group_id"], ["notification_groups.id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("group_id", "fingerprint", name="uq_notification_entries_group_fingerprint")
    )


def downgrade() -> None:
    op.drop_table("notification_entries")
    with op.batch_alter_table("notification_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_notification_deliveries_state_next")
        batch_op.drop_index("ix_notification_deliveries_group")

    op.drop_table("notification_deliveries")
    with op.batch_alter_table("silences", schema=None) as batch_op:
        batch_op.drop_index("ix_silences_ends_at")

    op.drop_table("silences")
    with op.batch_alter_table("notification_groups", schema=None) as batch_op:
        batch_op.drop_index("ix_notification_groups_flush_at")

    op.drop_table("notification_groups")
