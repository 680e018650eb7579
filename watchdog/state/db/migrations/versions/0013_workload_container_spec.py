"""workload histograms: the container's spec as last seen (requests, limits, queue, caps)

Revision ID: 0013
Revises: 0012

`workload_histograms.spec` (JSON, NULL until a pod of the container is seen) holds what a recommendation
needs besides usage: the container's current requests and limits (to keep its limit/request ratio, as
the VPA does), its queue, and the caps seen with it (the queue's capability, the largest node's
allocatable). Stored with the histograms so `volcano-watchdog recommend`, which reads only the database,
computes what the API and the web UI show.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workload_histograms", schema=None) as batch_op:
        batch_op.add_column(sa.Column("spec", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workload_histograms", schema=None) as batch_op:
        batch_op.drop_column("spec")
