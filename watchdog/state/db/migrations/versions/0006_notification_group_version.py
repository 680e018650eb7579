"""notification_groups.version: compare-and-set by the outbox's writers

Revision ID: 0006
Revises: 0005

The worker (enqueue) and the sender (flush) both read a group and its entries and write them back;
each now claims the group by bumping `version` only if it is still the version it read, so a change
landing between another writer's read and write is never overwritten (issue 12, defect A).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("notification_groups", schema=None) as batch_op:
        batch_op.add_column(sa.Column("version", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("notification_groups", schema=None) as batch_op:
        batch_op.drop_column("version")
