"""Manual resolve through the worker: alert_requests, and alerts.held

Revision ID: 0007
Revises: 0006

`POST /api/v1/alerts/{id}/resolve` used to update the row behind the worker's back: its alert book kept
the episode open and later sent a second "resolved" message. Requests now go into alert_requests and the
leader's worker carries them out; `held` marks an alert resolved by hand while its cause persisted.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("held", sa.Boolean(), server_default=sa.text("false"), nullable=False))
    op.create_table(
        "alert_requests",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("alert_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_alert_requests_pending", "alert_requests", ["done_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_alert_requests_pending", table_name="alert_requests")
    op.drop_table("alert_requests")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_column("held")
