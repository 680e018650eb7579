"""job_runs: pod counts per run, and deleted_at (a deletion is not a finish)

Revision ID: 0005
Revises: 0004

Rows the ledger marked finished at their deletion although the run never reached a terminal phase
(the old ledger set finished_at = deletion time) get that time moved to deleted_at and finished_at
cleared; other deleted rows get deleted_at = their last update, the best time known.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TERMINAL = ("Completed", "Failed", "Aborted", "Terminated")
COUNTS = ("pods_pending", "pods_running", "pods_succeeded", "pods_failed")


def upgrade() -> None:
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        for name in COUNTS:
            batch_op.add_column(sa.Column(name, sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    runs = sa.table("job_runs", sa.column("phase", sa.String()), sa.column("object_deleted", sa.Boolean()),
                    sa.column("finished_at", sa.DateTime(timezone=True)),
                    sa.column("deleted_at", sa.DateTime(timezone=True)),
                    sa.column("updated_at", sa.DateTime(timezone=True)))
    deleted = runs.c.object_deleted.is_(True)
    op.execute(runs.update().where(deleted, runs.c.phase.not_in(TERMINAL))
               .values(deleted_at=sa.func.coalesce(runs.c.finished_at, runs.c.updated_at), finished_at=None))
    op.execute(runs.update().where(deleted, runs.c.deleted_at.is_(None)).values(deleted_at=runs.c.updated_at))


def downgrade() -> None:
    runs = sa.table("job_runs", sa.column("finished_at", sa.DateTime(timezone=True)),
                    sa.column("deleted_at", sa.DateTime(timezone=True)))
    op.execute(runs.update().where(runs.c.finished_at.is_(None), runs.c.deleted_at.is_not(None))
               .values(finished_at=runs.c.deleted_at))
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        batch_op.drop_column("deleted_at")
        for name in reversed(COUNTS):
            batch_op.drop_column(name)
