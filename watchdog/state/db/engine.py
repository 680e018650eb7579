"""Engines for SQLite (the default: WAL, one writer) and PostgreSQL, and schema migration.

SQLite allows one writer at a time: the watchdog funnels its writes through one thread, and WAL
lets the API read meanwhile. `busy_timeout` covers the short overlaps (migrations, retention).

Every replica migrates at start (and its init container runs `migrate`), so migrations run under a
lock: a PostgreSQL advisory lock held on the connection Alembic uses, or on SQLite an exclusive
`flock` on `<database>.migrate.lock`. The first replica migrates; the others wait, then find the
schema at head and do nothing. Without it two replicas both see an empty database, both create
`alembic_version` and the tables, and one of them fails (or worse, half-applies a step).
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry

from volcano_monitor.watchdog.state.db.scope import DEFAULT_CLUSTER, cluster_of, scoped

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# A SQLite file's pool: each open connection keeps its own page cache (2 MiB by default), which fills as
# the database grows. SQLAlchemy's default (5 kept, handed out in turn) let every thread warm all five,
# ~10 MB that grew for the whole of bench/soak.py. Two kept, the last returned handed out first: the two
# most recently used stay warm; a busier moment opens more, closed when given back.
SQLITE_POOL_SIZE, SQLITE_POOL_OVERFLOW = 2, 13
# pg_advisory_lock key of schema migrations: any fixed bigint, the same in every replica and version
# ("vmwdmigr" in ASCII), unlikely to meet another application's key in a shared database.
MIGRATION_LOCK_KEY = 0x766D_7764_6D69_6772


def make_engine(url: str, cluster: str = DEFAULT_CLUSTER, **kwargs: Any) -> Engine:
    """An engine for `url` that writes and reads as `cluster` (watchdog.state.db.scope)."""
    return scoped(_make_engine(url, **kwargs), cluster)


def _make_engine(url: str, **kwargs: Any) -> Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if url.startswith("sqlite"):
        if "poolclass" not in kwargs and not _sqlite_in_memory(make_url(url)):
            kwargs = {"pool_size": SQLITE_POOL_SIZE, "max_overflow": SQLITE_POOL_OVERFLOW,
                      "pool_use_lifo": True} | kwargs
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


def alembic_config(engine: Engine, connection: Connection | None = None) -> Config:
    """Alembic's configuration without an alembic.ini. With `connection`, the migrations run on it
    (the one holding the migration lock) rather than on a new connection of `engine`."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine
    config.attributes["cluster"] = cluster_of(engine)  # the name rows older than the cluster column take
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` (applied at start and by `volcano-watchdog migrate`), holding
    the migration lock so replicas starting together apply each step once."""
    with migration_lock(engine) as connection:
        command.upgrade(alembic_config(engine, connection), revision)


class NotReadable(Exception):
    """A read-only command found no database, or one whose schema this version cannot read."""


def check_readable(engine: Engine) -> None:
    """For read-only commands: the database must exist with the schema at head. They never create a
    SQLite file or migrate (a typo in --database-url would otherwise print "no history" from an empty
    database it just made)."""
    database = engine.url.database or ""
    if engine.dialect.name == "sqlite" and not _sqlite_in_memory(engine.url) and not Path(database).is_file():
        raise NotReadable(f"no database at {database} (the watchdog creates it; check --database-url)")
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    if current != head:
        raise NotReadable(f"{display_url(engine)} has schema revision {current or 'none'}, this version reads "
                          f"{head}: run `volcano-watchdog migrate` first")


@contextmanager
def migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection to migrate on, held under the database's migration lock until the block ends."""
    if engine.dialect.name == "postgresql":
        with _advisory_lock(engine) as connection:
            yield connection
        return
    with _sqlite_file_lock(engine), engine.connect() as connection:
        yield connection


@contextmanager
def _advisory_lock(engine: Engine) -> Iterator[Connection]:
    """pg_advisory_lock on MIGRATION_LOCK_KEY, on the connection handed to Alembic: a session lock,
    so it is released by the unlock below or, should the process die, with its connection."""
    key = {"key": MIGRATION_LOCK_KEY}
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), key)
        connection.commit()  # Alembic begins its own transaction on this connection
        try:
            yield connection
        finally:
            _advisory_unlock(connection, key)


def _advisory_unlock(connection: Connection, key: dict[str, int]) -> None:
    """Release the lock even after a failed migration; a connection that cannot do so is discarded
    (closing the session releases it) so the migration's own error is the one reported."""
    try:
        connection.rollback()
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), key)
        connection.commit()
    except SQLAlchemyError:
        connection.invalidate()


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """An exclusive flock on `<database>.migrate.lock` beside the database file (never deleted:
    removing a lock file others may have open would let two holders in). None for an in-memory
    database, which no other process can see."""
    database = engine.url.database or ""
    if engine.dialect.name != "sqlite" or _sqlite_in_memory(engine.url):
        yield
        return
    with open(f"{database}.migrate.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sqlite_in_memory(url: URL) -> bool:
    """An in-memory SQLite database: no file, and SQLAlchemy's own pool for it (one connection per thread,
    or a shared-cache `file::memory:` URI's pool) is kept."""
    database = url.database or ""
    return database in ("", ":memory:") or database.startswith("file::memory:") or url.query.get("mode") == "memory"
