"""Engines for SQLite (the default: WAL, one writer) and PostgreSQL, and schema migration.

SQLite allows one writer at a time: the watchdog funnels its writes through one thread, and WAL
lets the API read meanwhile. `busy_timeout` covers the short overlaps (migrations, retention).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str, **kwargs: Any) -> Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: DBAPIConnection, _: ConnectionPoolEntry) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **kwargs)


def describe_error(exc: BaseException) -> str:
    """The driver's first line (e.g. "connection refused"), without SQLAlchemy's SQL and parameters."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def display_url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine
    return config


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` (applied at start and by `volcano-watchdog migrate`)."""
    command.upgrade(alembic_config(engine), revision)
