"""Storage tests run against SQLite and PostgreSQL (PostgreSQL on 127.0.0.1:5432 in CI: .ci/run
starts it). A PostgreSQL that cannot be reached fails the tests; it never skips them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from volcano_monitor.watchdog.db.engine import make_engine, migrate

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


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    created = make_engine(database_url)
    migrate(created)
    yield created
    created.dispose()
