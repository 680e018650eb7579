"""job_runs: cost per resource and basis, and the queue's path in the queue tree

Revision ID: 0014
Revises: 0013

Six cost columns (cpu, memory, gpu x used, requested), which the usage recorder adds to with the
resource-seconds, priced by each pod's node (watchdog.state.prices), and `queue_path` (root first), so
a report rolls children into their parent queue. Existing rows keep everything and start at cost 0
and an empty path (their queue alone): what they used before prices were configured is not priced
after the fact, since the node each interval ran on was never stored.

`cost_retired`: the cost of ledger rows retention removes, per queue, so the cost counters on /metrics
never go down.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

COSTS = ("cost_cpu_used", "cost_cpu_requested", "cost_memory_used", "cost_memory_requested", "cost_gpu_used",
         "cost_gpu_requested")


def upgrade() -> None:
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        for name in COSTS:
            batch_op.add_column(sa.Column(name, sa.Float(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("queue_path", sa.Text(), server_default="", nullable=False))
    op.create_table(
        "cost_retired",
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("requested", sa.Float(), nullable=False),
        sa.Column("used", sa.Float(), nullable=False),
        sa.Column("idle", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("queue"),
    )


def downgrade() -> None:
    op.drop_table("cost_retired")
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        batch_op.drop_column("queue_path")
        for name in reversed(COSTS):
            batch_op.drop_column(name)
