"""Digests from real replicas: two `volcano-watchdog run` processes with leader election on one
PostgreSQL database, watching the simulated cluster, a digest due every minute. The leader is killed
(-9) after the first; the follower takes over and sends the next minute's. Each period's digest
reaches the chat inbox once: the new leader does not send again the one the old leader queued."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tests.simtools import wait_for
from tests.watchdog.test_replicas import LEASE_SECONDS, databases, holder, ready, start  # noqa: F401
from volcano_monitor.simulator.chatinbox import ChatInbox, InboxMessage
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import ReportDigestSent


def config(path: Path, inbox: ChatInbox, identity: str) -> Path:
    settings: dict[str, Any] = {
        "notifications": {"receivers": [{"name": "inbox", "webhook": {"url": f"{inbox.url}/webhook/digest"}}],
                          "route": {"receiver": "inbox"}, "api_url": "http://watchdog.example",
                          "delivery": {"poll_interval_seconds": 0.1}},
        "reports": {"digests": [{"name": "minutely", "schedule": "* * * * *", "receiver": "inbox", "period": "1h"}],
                    "check_interval_seconds": 0.2},
        "leader_election": {"enabled": True, "identity": identity, "namespace": "default",
                            "lease_duration_seconds": LEASE_SECONDS, "renew_interval_seconds": 0.5},
    }
    path.write_text(yaml.safe_dump(settings))
    return path


def last_period_end(url: str) -> datetime:
    engine = make_engine(url)
    with Session(engine) as session:
        last = session.scalars(select(func.max(ReportDigestSent.period_end))).one()
    engine.dispose()
    assert last is not None
    return last


def digests(inbox: ChatInbox) -> list[InboxMessage]:
    return [m for m in inbox.messages() if m.body["alerts"][0]["kind"] == "ReportDigest"]


@pytest.mark.slow(45)
def test_each_period_once_through_a_kill_of_the_leader(databases: tuple[str, str], tmp_path: Path) -> None:  # noqa: F811
    url = databases[0]
    inbox = ChatInbox().start()
    kubeconfig, log = tmp_path / "k.yaml", tmp_path / "watchdog.log"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with SimulatorThread(scenario="default", speed=50, tick_interval=0.05) as sim:
            write_kubeconfig(kubeconfig, sim.url)
            ports = {}
            for name in ("replica-a", "replica-b"):
                processes[name], ports[name] = start(kubeconfig, url, config(tmp_path / f"{name}.yaml", inbox, name),
                                                     log)
            wait_for(lambda: holder(sim) in ports and all(ready(p) for p in ports.values()), timeout=60)
            wait_for(lambda: len(digests(inbox)) >= 1, timeout=30)
            leader = holder(sim)
            processes[leader].send_signal(signal.SIGKILL)
            processes[leader].wait(10)
            # What the old leader told: a start near a minute's end tells two minutes at once, so "the second
            # digest" may be its own; the follower's are those after these.
            told_by_leader = len(digests(inbox))
            last_of_leader = last_period_end(url)
            follower = "replica-b" if leader == "replica-a" else "replica-a"
            wait_for(lambda: holder(sim) == follower, timeout=LEASE_SECONDS + 10, interval=0.1)
            time.sleep(3)  # the follower leads: it must not send the old leader's digest of the minute again
            sent = [m.body["alerts"][0]["fingerprint"] for m in digests(inbox)]
            assert len(sent) == len(set(sent)), "the new leader sent the old leader's digest again"
            wait_for(lambda: len(digests(inbox)) > told_by_leader, timeout=75)
            time.sleep(2)
            for name, process in processes.items():
                if process.poll() is None:
                    process.terminate()
                    assert process.wait(20) == 0, f"{name}: {log.read_text()[-3000:]}"
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        inbox.stop()
    told = digests(inbox)
    fingerprints = [m.body["alerts"][0]["fingerprint"] for m in told]
    assert len(fingerprints) == len(set(fingerprints)) >= 2, fingerprints
    engine = make_engine(url)
    with Session(engine) as session:
        rows = list(session.scalars(select(ReportDigestSent).order_by(ReportDigestSent.period_end)))
    engine.dispose()
    assert len(rows) == len(told)
    assert [r.identity for r in rows if r.period_end > last_of_leader] and \
        all(r.identity == follower for r in rows if r.period_end > last_of_leader)
