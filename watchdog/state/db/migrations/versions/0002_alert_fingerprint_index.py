"""index alerts by fingerprint; drop a redundant rollup index

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index("ix_alerts_fingerprint", ["fingerprint"], unique=False)

    with op.batch_alter_table("usage_rollups", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_usage_rollups_bucket_start"))


def downgrade() -> None:
    with op.batch_alter_table("usage_rollups", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_usage_rollups_bucket_start"), ["bucket_start"], unique=False)

    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index("ix_alerts_fingerprint")
