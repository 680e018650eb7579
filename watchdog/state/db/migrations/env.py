"""Alembic environment: runs with the engine the watchdog hands over (no alembic.ini needed)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from volcano_monitor.watchdog.state.db.models import Base


def run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                      compare_type=True)
    context.run_migrations()


# `migrate` hands over the connection that holds the migration lock (watchdog.state.db.engine).
given: Connection | None = context.config.attributes.get("connection")
if given is not None:
    with given.begin():
        run_migrations(given)
else:
    with context.config.attributes["engine"].begin() as connection:
        run_migrations(connection)
