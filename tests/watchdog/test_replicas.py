"""Several replicas, one truth (issue 12, defect 1): two watchdog processes with leader election on one
PostgreSQL database store what one watchdog alone stores on another, watching the same simulated
cluster; `kill -9` of the leader hands over to the follower within the lease, and nothing is lost or
sent twice.

Compared per finished job: used CPU core-seconds within 5 % plus two poll intervals' share of the run,
for the runs that did not span the failover (usage is not collected between the leader's death and
the takeover: docs/watchdog.md), i.e. that ended before the kill or started after the new leader's first
usage poll.
Doubled usage (every replica adding what it polled, the defect) would be 100 % off.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from tests.watchdog.conftest import POSTGRES_ADMIN
from tests.watchdog.harness import FAST_DETECTORS, alerts, runs
from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.simulator.resources import LEASES
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.watchdog.runtime.app import Intervals
from volcano_monitor.watchdog.state.db.engine import make_engine

SPEED = 150
LEASE_SECONDS = 3.0
FLUSH_SECONDS = Intervals().flush  # usage the leader holds in memory, lost with it on kill -9
FLUSH = timedelta(seconds=FLUSH_SECONDS + 1)
MIN_RUN = timedelta(seconds=4)
# The simulator publishes PodMetrics every second: a poll up to a second late misses one report, which the
# next one covers (recorder: the gap cap). 0.2 s polls: longer stalls were common with 3 watchdogs on 2 cores.
POLL_SECONDS = 0.5
EVENT_KINDS = {"JobFailed", "RetryExhausted", "JobRetrying", "PodRejected", "PodOOMKilled"}


@pytest.fixture
def databases() -> Iterator[tuple[str, str]]:
    """Two fresh PostgreSQL databases: the pair's and the single replica's."""
    names = [f"vm_ha_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    base = POSTGRES_ADMIN.rsplit("/", 1)[0].split("://", 1)[1]
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql+psycopg://{base}/{names[0]}", f"postgresql+psycopg://{base}/{names[1]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def config(path: Path, inbox: ChatInbox, identity: str | None) -> Path:
    settings: dict[str, Any] = {
        "detectors": {**FAST_DETECTORS, "idle_window_seconds": 600},  # 5-minute rollups
        "sources": {"metrics_api": {"interval_seconds": POLL_SECONDS}},
        "notifications": {
            "receivers": [{"name": "inbox", "webhook": {"url": f"{inbox.url}/webhook/volcano"}}],
            "route": {"receiver": "inbox", "group_by": ["alertname", "namespace", "job_name", "subject"],
                      "group_wait": 0, "group_interval": "1s", "repeat_interval": "1h"},
            "delivery": {"poll_interval_seconds": 0.1}},
    }
    if identity:
        settings["leader_election"] = {"enabled": True, "identity": identity, "namespace": "default",
                                       "lease_duration_seconds": LEASE_SECONDS, "renew_interval_seconds": 0.5}
    path.write_text(yaml.safe_dump(settings))
    return path


def start(kubeconfig: Path, database_url: str, config_path: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
         "--kubeconfig", str(kubeconfig), "--cluster-name", "default", "--database-url",
         database_url,
         "--listen", f"127.0.0.1:{port}", "--config", str(config_path)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return process, port


def ready(port: int) -> bool:
    """/readyz: the informers have synced (usage can be attributed from then on)."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def last_poll(port: int) -> float | None:
    """When the replica's usage collector last polled with success (Unix time); None before its first
    poll. It polls only while it leads."""
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    prefix = 'volcano_watchdog_collector_last_success_timestamp_seconds{collector="metrics_api"} '
    return next((float(line[len(prefix):]) for line in body.splitlines() if line.startswith(prefix)), None)


def holder(sim: SimulatorThread) -> str:
    def read() -> str:
        for lease in sim.store.objects(LEASES):
            return str(lease.get("spec", {}).get("holderIdentity") or "")
        return ""
    return sim.call(read)


def used(engine: Engine) -> dict[str, tuple[float, datetime | None, datetime | None]]:
    return {r.uid: (r.cpu_core_seconds_used, r.started_at, r.finished_at) for r in runs(engine)}


def comparable(start_: datetime | None, finish: datetime | None) -> bool:
    """Long enough for several usage samples: a run of a second or two (the scenario runs 150 times
    faster than life) gets one sample on one replica and none on the other."""
    return start_ is not None and finish is not None and finish - start_ >= MIN_RUN


def finished(engine: Engine, since: datetime) -> int:
    """Comparable runs started after `since`, stored so far (0 while the schema is being created)."""
    try:
        return sum(1 for _, start_, finish in used(engine).values()
                   if comparable(start_, finish) and start_ is not None and start_ > since)
    except SQLAlchemyError:
        return 0


# slow(0): slow (~100 s), but `make test` runs it alone after the parallel suite (Makefile ALONE): beside
# the other xdist worker the pair's and the single replica's core-seconds parted (8.6 vs 6.6) in 2 clean
# runs of 4; which side is wrong is still to be found (compare each with the simulator's integral).
@pytest.mark.slow(0)
def test_two_replicas_store_what_one_stores_and_fail_over(databases: tuple[str, str], tmp_path: Path) -> None:
    pair_url, single_url = databases
    inbox_pair, inbox_single = ChatInbox().start(), ChatInbox().start()
    kubeconfig, log = tmp_path / "k.yaml", tmp_path / "watchdog.log"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    try:
        with SimulatorThread(scenario="default", speed=SPEED, tick_interval=0.05) as sim:
            write_kubeconfig(kubeconfig, sim.url)
            processes["single"], ports["single"] = start(
                kubeconfig, single_url, config(tmp_path / "s.yaml", inbox_single, None), log)
            for name in ("replica-a", "replica-b"):
                processes[name], ports[name] = start(
                    kubeconfig, pair_url, config(tmp_path / f"{name}.yaml", inbox_pair, name), log)
            wait_for(lambda: holder(sim) in ("replica-a", "replica-b"), timeout=30)
            wait_for(lambda: all(ready(port) for port in ports.values()), timeout=30)
            synced = datetime.now().astimezone()  # from here on every side's informers watch the same events
            time.sleep(2)  # a few usage samples in, on both sides
            collecting = datetime.now().astimezone()
            pair, single = make_engine(pair_url), make_engine(single_url)
            wait_for(lambda: finished(pair, collecting) >= 3, timeout=90)
            time.sleep(FLUSH_SECONDS + 2)  # those runs' usage is flushed before the kill
            leader = holder(sim)
            killed_at = datetime.now().astimezone()
            processes[leader].send_signal(signal.SIGKILL)
            processes[leader].wait(10)
            follower = "replica-b" if leader == "replica-a" else "replica-a"
            started = time.monotonic()
            wait_for(lambda: holder(sim) == follower, timeout=LEASE_SECONDS + 10, interval=0.1)
            took_over = time.monotonic() - started
            # Runs compared after the failover start once the new leader polls usage: one that started between
            # the Lease change and that first poll (later on a loaded machine) lost its first samples there.
            wait_for(lambda: last_poll(ports[follower]) is not None, timeout=30, interval=0.1)
            took_over_at = datetime.now().astimezone()
            wait_for(lambda: finished(pair, took_over_at) >= 3, timeout=90)
            time.sleep(3)
            stopping = datetime.now().astimezone()
            for name, process in processes.items():
                if process.poll() is None:
                    process.terminate()
                    assert process.wait(20) == 0, f"{name}: {log.read_text()[-3000:]}"
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        inbox_pair.stop()
        inbox_single.stop()

    assert took_over <= LEASE_SECONDS + 2, f"the follower took {took_over:.1f}s to lead"
    # Per finished job, runs that did not span the failover: used core-seconds agree (see `tolerance`).
    pair_runs, single_runs = used(pair), used(single)
    compared = 0
    for uid, (cpu_single, start_, finish) in single_runs.items():
        if uid not in pair_runs or not comparable(start_, finish):
            continue
        assert start_ is not None and finish is not None
        if not ((collecting < start_ and finish < killed_at - FLUSH) or start_ > took_over_at):
            continue  # before the pair collected, unflushed when the leader died, or across the failover
        cpu_pair = pair_runs[uid][0]
        if cpu_single <= 0 and cpu_pair <= 0:
            continue  # ran without usage samples on either side (nothing to compare)
        # Each side integrates its own polls: at either end of a run it may miss up to one poll interval
        # (more when a loaded machine delays a poll), so the bound widens for short runs.
        tolerance = 0.05 + 2 * POLL_SECONDS / (finish - start_).total_seconds()
        assert cpu_pair == pytest.approx(cpu_single, rel=tolerance), (
            f"run {uid} ({start_:%T.%f}..{finish:%T.%f}; killed {killed_at:%T.%f}, led again {took_over_at:%T.%f}): "
            f"{cpu_pair} vs {cpu_single} core-s")
        compared += 1
    assert compared >= 3, f"only {compared} finished runs to compare"
    # Alerts: one row per fingerprint and episode, and every event-driven alert the single replica
    # stored is stored by the pair too (the new leader stores what it observed as a follower).
    pair_alerts, single_alerts = alerts(pair), alerts(single)
    firing_rows = Counter(a.fingerprint for a in pair_alerts if a.fired_at is not None and a.kind in EVENT_KINDS)
    assert all(n == 1 for n in firing_rows.values()), firing_rows
    # The simulator plays on while the processes start and stop one after another: a short episode (a Job
    # retrying for a moment) in the first or last moments may fall before one side's first list or after
    # its last watch event, and reach only the other side, so those are left out.
    settled = stopping - timedelta(seconds=3)
    expected = {(a.kind, a.fingerprint) for a in single_alerts
                if a.kind in EVENT_KINDS and a.fired_at is not None and synced < a.fired_at < settled}
    assert expected, f"no event-driven alert fired between {synced:%T.%f} and {settled:%T.%f} to compare"
    lost = expected - {(a.kind, a.fingerprint) for a in pair_alerts}
    assert not lost, f"alerts the pair never stored: {lost}"
    # Messages: no alert announced firing twice by the pair.
    told = Counter((alert["fingerprint"], alert["status"]) for message in inbox_pair.messages()
                   for alert in message.body["alerts"] if alert["status"] == "firing")
    assert told and all(n == 1 for n in told.values()), told
    pair.dispose()
    single.dispose()
