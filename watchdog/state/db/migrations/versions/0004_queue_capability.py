"""queue capability

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("capability_changes",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("queue", sa.String(length=253), nullable=False),
    sa.Column("policy", sa.String(length=16), nullable=False),
    sa.Column("mode", sa.String(length=16), nullable=False),
    sa.Column("outcome", sa.String(length=16), nullable=False),
    sa.Column("before", sa.JSON(), nullable=False),
    sa.Column("after", sa.JSON(), nullable=False),
    sa.Column("why", sa.JSON(), nullable=False),
    sa.Column("inputs", sa.JSON(), nullable=False),
    sa.Column("resource_version", sa.String(length=64), nullable=False),
    sa.Column("identity", sa.String(length=253), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("id")
    )
    with op.batch_alter_table("capability_changes", schema=None) as batch_op:
        batch_op.create_index("ix_capability_changes_queue_created", ["queue", "created_at"], unique=False)

    op.create_table("capability_plans",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("queue", sa.String(length=253), nullable=False),
    sa.Column("policy", sa.String(length=16), nullable=False),
    sa.Column("mode", sa.String(length=16), nullable=False),
    sa.Column("outcome", sa.String(length=16), nullable=False),
    sa.Column("resources", sa.JSON(), nullable=False),
    sa.Column("inputs", sa.JSON(), nullable=False),
    sa.Column("identity", sa.String(length=253), nullable=False),
    sa.Column("planned_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("queue")
    )


def downgrade() -> None:
    op.drop_table("capability_plans")
    with op.batch_alter_table("capability_changes", schema=None) as batch_op:
        batch_op.drop_index("ix_capability_changes_queue_created")

    op.drop_table("capability_changes")
