"""Alembic environment: runs with the engine the watchdog hands over (no alembic.ini needed)."""

from __future__ import annotations

from alembic import context

from watchdog.db.models import Base

engine = context.config.attributes["engine"]
with engine.begin() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                      compare_type=True)
    context.run_migrations()
