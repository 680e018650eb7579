from __future__ import annotations

import ctypes
import ctypes.util
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.engine import alembic_config, make_engine, migrate
from volcano_monitor.watchdog.state.db.models import Alert, Base, JobRun


def test_migrations_create_the_models_schema_exactly(engine: Engine) -> None:
    assert {"job_runs", "usage_rollups", "workload_histograms", "alerts", "alembic_version"} <= set(
        inspect(engine).get_table_names())
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == [], f"models and migrations disagree: add a migration for {diff}"


def test_migrate_is_idempotent(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    migrate(engine)
    engine.dispose()


def alert(state: str) -> Alert:
    now = datetime.now(UTC)
    return Alert(fingerprint="f1", kind="JobFailed", severity="critical", state=state, details={"x": [1, "ü"]},
                 started_at=now, last_seen_at=now, updated_at=now)


def test_one_unresolved_alert_per_fingerprint(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        session.add_all([alert("resolved"), alert("resolved"), alert("firing")])
    with pytest.raises(IntegrityError), Session(engine) as session, session.begin():
        session.add(alert("pending"))
    with Session(engine) as session:
        stored = session.query(Alert).filter_by(state="firing").one()
        assert stored.details == {"x": [1, "ü"]} and stored.started_at.tzinfo is not None


def test_ledger_uid_is_unique(engine: Engine) -> None:
    now = datetime.now(UTC)
    row = {"uid": "u1", "namespace": "n", "name": "j", "workload": "j", "updated_at": now}
    with Session(engine) as session, session.begin():
        session.add(JobRun(**row))
    with pytest.raises(IntegrityError), Session(engine) as session, session.begin():
        session.add(JobRun(**row))


def test_sqlite_runs_in_wal_mode(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/w.db")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


def test_migrate_command(database_url: str) -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
                             "--database-url", database_url,
                             "migrate"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    engine = make_engine(database_url)
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    assert f"revision {head}" in result.stdout
    assert "job_runs" in inspect(engine).get_table_names()
    engine.dispose()


def test_migrate_command_reports_an_unreachable_database() -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli", "--database-url",
                             "postgresql+psycopg://nobody:secret@127.0.0.1:1/x", "migrate"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Connection refused" in result.stderr
    assert "secret" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _sqlite_memory_used() -> int:
    """SQLite's own allocations in this process (page caches above all): Debian's Python links _sqlite3 to
    the system's libsqlite3, so this is the library the engine uses."""
    library = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
    library.sqlite3_memory_used.restype = ctypes.c_int64
    return int(library.sqlite3_memory_used())


def test_sqlite_keeps_two_warm_connections_however_many_threads_used_it(tmp_path: Path) -> None:
    """Each kept connection holds a page cache of up to 2 MiB: with SQLAlchemy's default pool (five
    kept, handed out in turn) they all filled as the database grew, the watchdog's slow growth in
    bench/soak.py. Busy moments may open more; giving them back closes all but two."""
    engine = make_engine(f"sqlite:///{tmp_path}/w.db")
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
        connection.exec_driver_sql("INSERT INTO t (payload) SELECT printf('%.500c', 'x') FROM "
                                   "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30000) "
                                   "SELECT i FROM n)")
    baseline = _sqlite_memory_used()
    barrier = threading.Barrier(5)
    counts: list[int] = []

    def scan() -> None:  # five threads read the whole table at once: five connections, five full caches
        with engine.connect() as connection:
            barrier.wait(timeout=30)
            counts.append(connection.exec_driver_sql("SELECT count(*), sum(length(payload)) FROM t").one()[0])
            barrier.wait(timeout=30)

    threads = [threading.Thread(target=scan) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert counts == [30000] * 5 and not any(thread.is_alive() for thread in threads)
    assert engine.pool.checkedin() == 2  # type: ignore[attr-defined]
    cache_bytes = 2000 * 1024  # SQLite's default cache_size (-2000 KiB) per connection
    assert _sqlite_memory_used() - baseline < 2 * cache_bytes + 1024 * 1024
    with engine.connect() as first:  # the last connection given back is the next handed out: it is warm
        warm = first.connection.dbapi_connection
    with engine.connect() as second:
        assert second.connection.dbapi_connection is warm
    engine.dispose()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:",
                                 "sqlite:///file::memory:?cache=shared&uri=true"])
def test_an_in_memory_sqlite_database_keeps_sqlalchemys_pool(url: str) -> None:
    """Its pool is what SQLAlchemy picks for the URL (one connection per thread, or the shared-cache
    URI's pool): two kept connections would drop the database whenever the others closed."""
    engine, default = make_engine(url), create_engine(url)
    assert type(engine.pool) is type(default.pool)
    assert engine.pool.status().split(" ", 2)[2:] == default.pool.status().split(" ", 2)[2:]  # sizes, not ids
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT 1").scalar() == 1
    engine.dispose()
    default.dispose()
