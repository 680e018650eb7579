"""The watchdog killed with SIGKILL in the middle of the scenario and started again: no alert fires
twice and no ledger row is lost or duplicated. Also: the database goes away for a while and comes
back, and nothing that happened meanwhile is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import yaml
from sqlalchemy import Engine

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from tests.watchdog.conftest import POSTGRES_ADMIN
from tests.watchdog.harness import FAST_DETECTORS, alerts, fast_settings, kinds_by_workload, runs, start_watchdog
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.watchdog.state.db.engine import make_engine

SPEED = 600


def start_cli(kubeconfig: Path, database_url: str, config: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
         "--kubeconfig", str(kubeconfig), "--cluster-name", "default", "--database-url",
         database_url,
         "--listen", f"127.0.0.1:{free_port()}", "--config", str(config)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_kill_9_and_restart_fires_nothing_twice_and_loses_no_ledger_row(database_url: str, tmp_path: Path) -> None:
    config = tmp_path / "watchdog.yaml"
    config.write_text(yaml.safe_dump({"detectors": {**FAST_DETECTORS, "idle_window_seconds": 600},  # 5-min rollups
                                      "sources": {"metrics_api": {"interval_seconds": 0.5}}}))
    kubeconfig, log = tmp_path / "k.yaml", tmp_path / "watchdog.log"
    engine = make_engine(database_url)
    with SimulatorThread(scenario="default", speed=SPEED, tick_interval=0.05) as sim:
        write_kubeconfig(kubeconfig, sim.url)
        first = start_cli(kubeconfig, database_url, config, log)
        try:
            wait_for(lambda: len([a for a in safe_alerts(engine) if a.fired_at is not None]) >= 4, timeout=60)
            time.sleep(1.0)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        before_runs = {r.uid: (r.namespace, r.name) for r in runs(engine)}
        before_fired = {a.fingerprint for a in alerts(engine) if a.fired_at is not None}
        second = start_cli(kubeconfig, database_url, config, log)
        try:
            # Long enough for the restarted watchdog to relist everything and run its checks.
            wait_for(lambda: len(runs(engine)) > len(before_runs), timeout=60)
            time.sleep(3)
        finally:
            second.terminate()
            assert second.wait(20) == 0, log.read_text()[-3000:]
    after = runs(engine)
    assert len({r.uid for r in after}) == len(after)
    assert set(before_runs) <= {r.uid for r in after}, "a ledger row was lost"
    rows_per_fingerprint = Counter(a.fingerprint for a in alerts(engine) if a.fired_at is not None)
    once_per_run = {"JobFailed", "RetryExhausted", "JobRetrying", "PodRejected", "PodOOMKilled", "OverRequested"}
    twice = {fp: n for fp, n in rows_per_fingerprint.items() if n > 1}
    kinds = {a.fingerprint: a.kind for a in alerts(engine)}
    assert not {fp for fp in twice if kinds[fp] in once_per_run}, f"fired twice: {twice}"
    assert before_fired, "nothing had fired before the kill: the test proved nothing"
    for fingerprint in before_fired:  # what fired before the kill is not fired again (one firing row each)
        assert rows_per_fingerprint[fingerprint] == 1 or kinds[fingerprint] not in once_per_run
    engine.dispose()


def safe_alerts(engine: Engine) -> list:  # type: ignore[type-arg]
    try:
        return alerts(engine)
    except Exception:
        return []


@pytest.fixture
def outage_database(postgres_url: str) -> str:
    """A PostgreSQL database the test can make unreachable (connections refused) and reachable again."""
    engine = make_engine(postgres_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    engine.dispose()
    return postgres_url


def set_reachable(database_url: str, reachable: bool) -> None:
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(reachable).lower()}')
        if not reachable:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


def test_database_outage_is_waited_out_and_nothing_is_lost(outage_database: str, tmp_path: Path) -> None:
    engine = make_engine(outage_database)
    with SimulatorThread(scenario="default", speed=SPEED, tick_interval=0.05) as sim:
        watchdog = start_watchdog(sim, engine, tmp_path, fast_settings(outage_database))
        try:
            wait_for(lambda: watchdog.ready() and len(runs(engine)) >= 3, timeout=30)
            set_reachable(outage_database, False)
            try:
                wait_for(lambda: watchdog.stats.db_errors >= 2, timeout=30)
                time.sleep(2)  # the scenario moves on while the database is away
            finally:
                set_reachable(outage_database, True)
            wait_for(lambda: watchdog.idle() and watchdog.stats.db_errors > 0, timeout=30)
            time.sleep(2)
            jobs = {o["metadata"]["uid"] for o in job_objects(sim)}
            wait_for(lambda: jobs <= {r.uid for r in runs(engine)}, timeout=30)
        finally:
            watchdog.stop()
    fired = kinds_by_workload([a for a in alerts(engine) if a.fired_at is not None])
    assert fired, "no alert fired across the outage"
    assert watchdog.stats.skipped == 0  # an outage is waited out, not skipped
    engine.dispose()


def job_objects(sim: SimulatorThread) -> list[dict]:  # type: ignore[type-arg]
    from volcano_monitor.simulator import resources as R

    return sim.call(sim.store.objects, R.JOBS)
