"""every table: the cluster a row belongs to; cluster_heartbeats

Revision ID: 0015
Revises: 0014

One database, many clusters (watchdog.state.db.scope). Every table gets `cluster`; the rows already
there take the name of the cluster the migrating watchdog runs as (`cluster.name`), since until now a
database held one cluster's rows. Every unique key leads with the cluster, so two clusters may hold the
same job UID (a simulator seeded alike), queue, pod or digest period without meeting.

On PostgreSQL the column's server default is dropped once old rows are filled: a writer that forgets
the cluster then fails instead of filing rows under the migration's name. SQLite keeps it (dropping a
default means recreating every table; a SQLite file holds one cluster's rows anyway).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TABLES = ("job_runs", "usage_rollups", "usage_rollups_hourly", "workload_histograms", "alerts", "alert_requests",
          "notification_groups", "notification_entries", "notification_deliveries", "silences",
          "capability_plans", "capability_changes", "report_digests", "oom_resubmissions", "gpu_idle_aborts",
          "workload_backfills")
# Unique constraints made without a name (`unique=True`): PostgreSQL named them <table>_<column>_key;
# SQLite reflects them unnamed, so a naming convention names them for the batch to drop.
UNNAMED = {"job_runs": ("uid", "uq_job_runs_cluster_uid"),
           "notification_groups": ("group_key", "uq_notification_groups_cluster_key"),
           "capability_plans": ("queue", "uq_capability_plans_cluster_queue"),
           "gpu_idle_aborts": ("job_uid", "uq_gpu_idle_aborts_cluster_job_uid")}
NAMED = {"usage_rollups": ("uq_usage_rollups_bucket_container", ("bucket_start", "namespace", "pod", "container")),
         "usage_rollups_hourly": ("uq_usage_rollups_hourly_bucket_container",
                                  ("bucket_start", "namespace", "pod", "container")),
         "workload_histograms": ("uq_workload_histograms_key", ("namespace", "workload", "task", "container")),
         "report_digests": ("uq_report_digests_name_period", ("name", "period_start")),
         "oom_resubmissions": ("uq_oom_resubmissions_lineage_attempt", ("namespace", "lineage_uid", "attempt")),
         "workload_backfills": ("uq_workload_backfills_key", ("namespace", "workload"))}
INDEXES = {"ix_job_runs_namespace_name": ("job_runs", ("namespace", "name")),
           "ix_job_runs_finished_at": ("job_runs", ("finished_at",))}
ACTIVE = "state != 'resolved'"


def upgrade() -> None:
    name = str(context.config.attributes.get("cluster", "default"))
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in TABLES:
        op.add_column(table, sa.Column("cluster", sa.String(length=253), server_default=name, nullable=False))
        if postgres:
            op.alter_column(table, "cluster", server_default=None)
    for table, (column, new) in UNNAMED.items():
        if postgres:
            op.drop_constraint(f"{table}_{column}_key", table, type_="unique")
            op.create_unique_constraint(new, table, ["cluster", column])
            continue
        with op.batch_alter_table(table, recreate="always",
                                  naming_convention={"uq": "uq_%(table_name)s_%(column_0_name)s"}) as batch_op:
            batch_op.drop_constraint(f"uq_{table}_{column}", type_="unique")
            batch_op.create_unique_constraint(new, ["cluster", column])
    for table, (constraint, columns) in NAMED.items():
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_constraint(constraint, type_="unique")
            batch_op.create_unique_constraint(constraint, ["cluster", *columns])
    for index, (table, columns) in INDEXES.items():
        op.drop_index(index, table_name=table)
        op.create_index(index, table, ["cluster", *columns])
    op.drop_index("uq_alerts_active_fingerprint", table_name="alerts")
    op.create_index("uq_alerts_active_fingerprint", "alerts", ["cluster", "fingerprint"], unique=True,
                    sqlite_where=sa.text(ACTIVE), postgresql_where=sa.text(ACTIVE))
    _cost_retired_by_cluster(name)
    op.create_table(
        "cluster_heartbeats",
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("identity", sa.String(length=253), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cluster"),
    )


def _cost_retired_by_cluster(name: str) -> None:
    """cost_retired's key becomes (cluster, queue): a new table, the rows copied under `name`."""
    op.create_table(
        "cost_retired_by_cluster",
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("requested", sa.Float(), nullable=False),
        sa.Column("used", sa.Float(), nullable=False),
        sa.Column("idle", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "queue"),
    )
    op.execute(sa.text("INSERT INTO cost_retired_by_cluster (cluster, queue, requested, used, idle) "
                       "SELECT :name, queue, requested, used, idle FROM cost_retired").bindparams(name=name))
    op.drop_table("cost_retired")
    op.rename_table("cost_retired_by_cluster", "cost_retired")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE cost_retired RENAME CONSTRAINT cost_retired_by_cluster_pkey TO cost_retired_pkey")


def downgrade() -> None:
    raise NotImplementedError("one database may now hold several clusters' rows: there is no way back to one")
