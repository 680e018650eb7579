"""Replicas that migrate at the same moment (init containers, startup) apply the schema once and all
succeed (issue 12, defect B), on a fresh PostgreSQL database and a fresh SQLite file.

Replicas are processes. The rendezvous test makes the race certain rather than likely: each replica
is held just before it creates `alembic_version` (it has read that there is no schema yet) until the
other has got as far, or is waiting on the lock (tests/watchdog/state/migrate_replica.py). Without a lock
both get there and one fails; with it the second reads the version only once the first has
finished. A test of the unlocked upgrade keeps the rendezvous honest: if it stopped failing, the
interleaving would no longer be forced and the locked test would prove nothing.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from tests.watchdog.conftest import POSTGRES_ADMIN
from volcano_monitor.watchdog.state.db.engine import alembic_config, make_engine


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nobody has migrated: a new SQLite file, or a uniquely named PostgreSQL database
    (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    name = f"vm_migrate_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN.split("://", 1)[1].rsplit("/", 1)[0]
    yield f"postgresql+psycopg://{base}/{name}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_together(url: str, rendezvous: Path, mode: str, replicas: int = 2) -> list[tuple[int, str]]:
    """Start `replicas` processes migrating `url` at once (held at the version table, see
    tests/watchdog/state/migrate_replica.py). Returns each one's exit code and stderr."""
    rendezvous.mkdir()
    argv = [sys.executable, "-m", "tests.watchdog.state.migrate_replica", url, str(rendezvous), str(replicas), mode]
    processes = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(replicas)]
    results = []
    for process in processes:
        _, err = process.communicate(timeout=120)
        results.append((process.returncode, err))
    return results


def last_error(stderr: str) -> str:
    """The exception line of a replica's traceback, or the CLI's one-line error ("" when neither)."""
    lines = [line for line in stderr.splitlines() if line.startswith(("sqlalchemy.", "volcano-watchdog:"))]
    return lines[-1] if lines else ""


def assert_schema_once(url: str) -> None:
    """One row in alembic_version, at head, and the tables there."""
    engine = make_engine(url)
    try:
        head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
        with engine.connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        assert versions == [head]
        assert {"job_runs", "alerts", "notification_groups", "capability_changes"} <= set(
            inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_concurrent_migrations_apply_the_schema_once(fresh_url: str, tmp_path: Path) -> None:
    results = migrate_together(fresh_url, tmp_path / "rendezvous", "locked")
    assert [rc for rc, _ in results] == [0, 0], [last_error(err) for _, err in results]
    assert_schema_once(fresh_url)
    # Both started migrating, one created the version table: the other, let in by the lock, found it.
    assert [len(list((tmp_path / "rendezvous").glob(f"{what}-*"))) for what in ("started", "arrived")] == [2, 1]


def test_without_the_lock_the_race_is_real(fresh_url: str, tmp_path: Path) -> None:
    results = migrate_together(fresh_url, tmp_path / "rendezvous", "unlocked")
    assert sorted(rc for rc, _ in results) == [0, 1], \
        "the rendezvous no longer forces concurrent migrations: the test above proves nothing"


def test_two_migrate_commands_started_together(fresh_url: str) -> None:
    """What two replicas' init containers do: `volcano-watchdog migrate` twice at once."""
    argv = [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli", "--database-url", fresh_url, "migrate"]
    processes = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    results = [(p.wait(120), *p.communicate()) for p in processes]
    assert [rc for rc, _, _ in results] == [0, 0], [last_error(err) for _, _, err in results]
    assert_schema_once(fresh_url)
