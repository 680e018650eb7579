"""The sender against a local chat server: outages of every kind end with each message delivered
exactly once and in order per group; hopeless messages become dead letters; rate limits delay."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import wait_for
from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.watchdog.actions.notify.message import AlertItem
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.actions.notify.sender import Notifier, RateLimiter
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.state.db.models import NotificationDelivery

JOBS = ("a", "b", "c")


@pytest.fixture
def inbox() -> Iterator[ChatInbox]:
    box = ChatInbox(secrets={"dingtalk": "SECtest"}).start()
    yield box
    box.stop()


def notifier_for(engine: Engine, url: str, **receiver: Any) -> Notifier:
    settings = load(None, environ={}, notifications={
        "receivers": [{"name": "team", "dingtalk": {"url": url, "secret": "SECtest"}, **receiver}],
        "route": {"receiver": "team", "group_by": ["job_name"], "group_wait": 0, "group_interval": 0},
        "delivery": {"initial_backoff_seconds": 0.05, "max_backoff_seconds": 0.2, "max_attempts": 100,
                     "poll_interval_seconds": 0.05, "timeout_seconds": 2}}).notifications
    return Notifier(Outbox(settings), engine, settings.delivery)


def enqueue(engine: Engine, notifier: Notifier, *items: AlertItem) -> None:
    with Session(engine) as session, session.begin():
        for item in items:
            notifier.outbox.enqueue(session, item, datetime.now(UTC))
    notifier.wake()


def job_alert(name: str, status: str) -> AlertItem:
    return AlertItem(kind="JobFailed", severity="critical", status=status, summary=f"Job ml/{name} Failed",
                     namespace="ml", queue="research", job_name=name, fingerprint=f"fp-{name}")


def told(inbox: ChatInbox) -> list[tuple[str, str]]:
    """(job, FIRING|RESOLVED) per delivered message, in arrival order."""
    out = []
    for message in inbox.messages("dingtalk"):
        title = message.body["markdown"]["title"]
        job = re.search(r"job_name=(\w+)", title)
        assert job, title
        out.append((job.group(1), "FIRING" if "FIRING" in title else "RESOLVED"))
    return out


def states(engine: Engine) -> list[str]:
    with Session(engine) as session:
        return list(session.scalars(select(NotificationDelivery.state).order_by(NotificationDelivery.id)))


def test_outage_of_every_kind_then_every_message_exactly_once_in_order(engine: Engine, inbox: ChatInbox) -> None:
    notifier = notifier_for(engine, f"{inbox.url}/dingtalk/robot/send?access_token=tok")
    notifier.start()
    try:
        inbox.stop()  # connection refused
        enqueue(engine, notifier, *(job_alert(j, "firing") for j in JOBS))
        wait_for(lambda: notifier.stats.outcomes[("team", "failed")] >= 6, timeout=10)
        enqueue(engine, notifier, *(job_alert(j, "resolved") for j in JOBS))  # queued behind the firing ones
        inbox.start()
        inbox.fail("status500", 4)
        inbox.fail("errcode", 4)  # HTTP 200 with DingTalk's error code: not delivered
        wait_for(lambda: len(inbox.messages()) >= 6 and "pending" not in states(engine), timeout=20)
        time.sleep(0.3)  # anything more would be a duplicate
    finally:
        notifier.stop()
    delivered = told(inbox)
    assert sorted(delivered) == sorted((j, s) for j in JOBS for s in ("FIRING", "RESOLVED"))  # each exactly once
    for job in JOBS:
        assert [s for j, s in delivered if j == job] == ["FIRING", "RESOLVED"]  # in order within the group
    assert inbox.rejected >= 8
    assert states(engine) == ["sent"] * 6
    assert notifier.stats.outcomes[("team", "sent")] == 6
    assert notifier.stats.outcomes[("team", "failed")] >= 6 + 8


def test_hopeless_messages_become_dead_letters(engine: Engine, inbox: ChatInbox) -> None:
    wrong_path = notifier_for(engine, f"{inbox.url}/nowhere?access_token=tok")  # 404: dead at once
    enqueue(engine, wrong_path, job_alert("a", "firing"))
    wrong_path.run_once()
    assert states(engine) == ["dead"] and wrong_path.stats.outcomes[("team", "dead")] == 1
    with Session(engine) as session:
        error = session.scalars(select(NotificationDelivery.last_error)).one()
    assert "404" in error and "tok" not in error

    settings_url = f"{inbox.url}/dingtalk/robot/send?access_token=tok"
    flaky = notifier_for(engine, settings_url)
    flaky.delivery = flaky.delivery.model_copy(update={"max_attempts": 3})
    inbox.fail("status500", 100)
    enqueue(engine, flaky, job_alert("b", "firing"))
    flaky.start()
    try:
        wait_for(lambda: states(engine) == ["dead", "dead"], timeout=10)
    finally:
        flaky.stop()
    assert flaky.stats.outcomes[("team", "failed")] == 3 and inbox.messages() == []


def test_rate_limit_delays_but_does_not_drop(engine: Engine, inbox: ChatInbox) -> None:
    notifier = notifier_for(engine, f"{inbox.url}/dingtalk/robot/send?access_token=tok", rate_limit_per_minute=120)
    started = time.monotonic()
    limit = notifier.limits["team"]
    # One message now, then one every half second from now: the bucket refills from `last`, so one set at
    # construction would credit the time a busy machine took to get here (0.3 s was seen under xdist).
    limit.tokens, limit.last = 1, limit.clock()
    notifier.start()
    try:
        enqueue(engine, notifier, *(job_alert(j, "firing") for j in JOBS))
        inbox.wait_for(3, timeout=10)
    finally:
        notifier.stop()
    assert time.monotonic() - started >= 0.9  # 1 at once + 2 x 0.5 s
    assert len(inbox.messages()) == 3


def test_rate_limiter_refills() -> None:
    now = [0.0]
    limiter = RateLimiter(60, lambda: now[0])
    assert all(limiter.take() for _ in range(60)) and not limiter.take()
    assert limiter.wait_seconds() == pytest.approx(1.0)
    now[0] = 2.0
    assert limiter.take() and limiter.take() and not limiter.take()
