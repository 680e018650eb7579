"""Scheduled digests end to end: two replicas' schedulers sharing one database, the leader's sender
delivering to the local chat inbox over HTTP. A digest arrives exactly once per period whatever the
leader does (a change of leader, two replicas that both believe they lead), and its link serves the
period's HTML report."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from tests.simtools import wait_for
from tests.watchdog.views.report.test_compute import SINCE, UNTIL, expected, insert, make_alerts, make_rows
from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.actions.notify.sender import Notifier
from volcano_monitor.watchdog.config import Settings, load
from volcano_monitor.watchdog.state.db.models import ReportDigestSent
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health
from volcano_monitor.watchdog.views.report.digest import DigestScheduler, due_period

API = "http://watchdog.example:9747"
# Fridays 12:00 UTC: UNTIL is a Friday noon at least a week ago, so the digest of [SINCE, UNTIL) is due at UNTIL.
SCHEDULE = "0 12 * * fri"


class Flag:
    """A replica's leadership, switched by the test."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def is_leader(self) -> bool:
        return self.value


@pytest.fixture
def inbox() -> Iterator[ChatInbox]:
    box = ChatInbox().start()
    yield box
    box.stop()


def settings_for(inbox: ChatInbox) -> Settings:
    return load(None, environ={}, notifications={
        "receivers": [{"name": "team", "webhook": {"url": f"{inbox.url}/webhook/digest"}}],
        "route": {"receiver": "team"}, "api_url": API,
        "delivery": {"poll_interval_seconds": 0.05, "initial_backoff_seconds": 0.05, "timeout_seconds": 2}},
        reports={"digests": [{"name": "weekly", "schedule": SCHEDULE, "receiver": "team", "by": "queue",
                              "period": "7d", "top": 3}], "check_interval_seconds": 0.05})


def sent(engine: Engine) -> int:
    with Session(engine) as session:
        return int(session.scalar(select(func.count()).select_from(ReportDigestSent)) or 0)


def test_digest_arrives_once_through_a_leader_change(engine: Engine, inbox: ChatInbox) -> None:
    rows, alerts = make_rows(), make_alerts()
    insert(engine, rows, alerts)
    want = expected(rows, alerts, "queue")["(all)"]
    settings = settings_for(inbox)
    now = [UNTIL + timedelta(minutes=3)]
    a, b = Flag(True), Flag(False)
    notifier_a = Notifier(Outbox(settings.notifications), engine, settings.notifications.delivery, leader=a)
    notifier_b = Notifier(Outbox(settings.notifications), engine, settings.notifications.delivery, leader=b)
    replicas = [DigestScheduler(settings.reports, engine, flag, API, wake=notifier.wake, identity=name,
                                clock=lambda: now[0])
                for flag, notifier, name in ((a, notifier_a, "a"), (b, notifier_b, "b"))]
    notifier_a.start()
    notifier_b.start()
    try:
        assert replicas[1].run_once() == 0  # not the leader
        assert replicas[0].run_once() == 1
        messages = inbox.wait_for(1, timeout=10)
        a.value, b.value = False, True  # the leader changes; the new one looks at the same schedule
        for replica in replicas:
            assert replica.run_once() == 0
        now[0] += timedelta(hours=5)
        assert replicas[1].run_once() == 0
        wait_for(lambda: notifier_b._was_leader, timeout=5)
    finally:
        notifier_a.stop()
        notifier_b.stop()
    assert len(inbox.messages()) == 1 and sent(engine) == 1
    body = messages[0].body
    alert = body["alerts"][0]
    assert alert["kind"] == "ReportDigest" and alert["subject"] == "weekly"
    assert f"{want['runs']} runs, {want['failed']} failed, {want['alerts']} alerts" in alert["summary"]
    assert f"CPU core {want['cpu_used']:.1f} of {want['cpu_req']:.1f} h used" in alert["summary"]
    assert f"GPU {want['gpu_used']:.1f} of {want['gpu_req']:.1f} h used" in alert["summary"]
    assert len([r for r in alert["reasons"] if r.startswith("top waster ")]) == 3
    # the link opens the HTML report of exactly that period, from the watchdog's API
    link = urlsplit(alert["url"])
    assert f"{link.scheme}://{link.netloc}" == API and link.path == "/api/v1/reports"
    client = TestClient(create_app(engine, Settings(), Health(ready=lambda: True, collectors=dict)))
    page = client.get(f"{link.path}?{link.query}")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert f"{SINCE:%Y-%m-%d %H:%M} to {UNTIL:%Y-%m-%d %H:%M}" in page.text
    assert f"<td>(all)</td><td>{want['runs']}</td>" in page.text


def test_two_replicas_that_both_lead_queue_each_period_once(engine: Engine, inbox: ChatInbox) -> None:
    """Split brain (a lease that changed hands while the old leader still ran): both replicas look at
    the schedules at the same moments; the unique (name, period start) lets one digest per period through."""
    settings = settings_for(inbox)
    periods = [UNTIL - timedelta(days=7 * i) + timedelta(minutes=1) for i in range(4)]
    leader = Flag(True)
    notifier = Notifier(Outbox(settings.notifications), engine, settings.notifications.delivery, leader=leader)
    notifier.start()
    try:
        for now in periods:
            replicas = [DigestScheduler(settings.reports, engine, leader, API, identity=str(i), clock=lambda n=now: n)
                        for i in range(2)]
            barrier = threading.Barrier(2)
            counts: list[int] = []

            def run(replica: DigestScheduler, barrier: threading.Barrier = barrier, counts: list[int] = counts) -> None:
                barrier.wait()
                counts.append(replica.run_once())

            threads = [threading.Thread(target=run, args=(r,)) for r in replicas]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            assert sorted(counts) == [0, 1]
            notifier.wake()
        inbox.wait_for(len(periods), timeout=15)
    finally:
        notifier.stop()
    assert len(inbox.messages()) == len(periods) == sent(engine)
    starts = sorted(m.body["alerts"][0]["summary"].split(" to ")[0][-20:] for m in inbox.messages())
    assert len(set(starts)) == len(periods)


def test_due_period_and_lateness() -> None:
    digest = settings_for(ChatInbox()).reports.digests[0]
    assert due_period(digest, UNTIL, 3600) == (SINCE, UNTIL)
    assert due_period(digest, UNTIL + timedelta(minutes=59), 3600) == (SINCE, UNTIL)
    assert due_period(digest, UNTIL + timedelta(minutes=61), 3600) is None  # too late: skipped
    assert due_period(digest, UNTIL - timedelta(minutes=1), 86400 * 8) == (SINCE - timedelta(days=7), SINCE)


def test_a_digest_must_name_a_configured_receiver() -> None:
    from volcano_monitor.watchdog.config import ConfigError

    with pytest.raises(ConfigError, match=r"reports.digests\[0\].receiver: no receiver named 'nobody'"):
        load(None, environ={}, reports={"digests": [{"name": "w", "schedule": SCHEDULE, "receiver": "nobody"}]})
    with pytest.raises(ConfigError, match="day of week"):
        load(None, environ={}, reports={"digests": [{"name": "w", "schedule": "0 9 * * 9", "receiver": "x"}]})
    assert datetime.now(UTC) > UNTIL - timedelta(days=3650)
