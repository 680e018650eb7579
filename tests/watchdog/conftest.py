"""Storage tests run against SQLite and PostgreSQL (PostgreSQL on 127.0.0.1:5432 in CI: .ci/run
starts it). A PostgreSQL that cannot be reached fails the tests; it never skips them."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from volcano_monitor.watchdog.state.db.engine import make_engine, migrate

POSTGRES_ADMIN = os.environ.get("VOLCANO_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    name = f"vm_test_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is needed at {POSTGRES_ADMIN} (set VOLCANO_TEST_POSTGRES): {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN.rsplit("/", 1)[0]
    yield f"postgresql+psycopg://{base.split('://', 1)[1]}/{name}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'watchdog.db'}"
    url: str = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    with engine.begin() as connection:  # each test starts from an empty schema
        connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    engine.dispose()
    return url


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per session (per xdist worker), from the migrations as they are now."""
    path = tmp_path_factory.mktemp("migrated") / "watchdog.db"
    created = make_engine(f"sqlite:///{path}")
    migrate(created)
    created.dispose()
    return path


@pytest.fixture
def engine(request: pytest.FixtureRequest, database_url: str) -> Iterator[Engine]:
    """A migrated database. SQLite's is a copy of `migrated_sqlite` (alembic takes ~0.5 s a test, over a
    hundred tests use this); PostgreSQL's is migrated here (a copy from a template database is no faster)."""
    if database_url.startswith("sqlite:///"):
        template: Path = request.getfixturevalue("migrated_sqlite")
        path = database_url.removeprefix("sqlite:///")
        with closing(sqlite3.connect(template)) as source, closing(sqlite3.connect(path)) as target:
            source.backup(target)  # the backup API: whatever of the template is still in its WAL comes along
        created = make_engine(database_url)
    else:
        created = make_engine(database_url)
        migrate(created)
    yield created
    created.dispose()
