from __future__ import annotations

from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.db.engine import alembic_config, make_engine, migrate
from volcano_monitor.watchdog.db.models import Alert, Base, JobRun


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

    result = subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.cli", "--database-url", database_url,
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

    result = subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.cli", "--database-url",
                             "postgresql+psycopg://nobody:secret@127.0.0.1:1/x", "migrate"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Connection refused" in result.stderr
    assert "secret" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
