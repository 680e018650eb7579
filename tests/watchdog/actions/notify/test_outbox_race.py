"""Concurrent writers of one notification group lose no alert change (issue 12, defect A).

The worker enqueues an alert change (in its own transaction, on its own connection) while the
sender is flushing the same group. The sender is held right after it has read the group's entries and
before it writes anything, until the worker has committed or is waiting on a lock the sender holds,
so the interleaving that used to lose the change is forced rather than hoped for. Afterwards the
group is flushed on (within `group_interval`, far before `repeat_interval`) and the chat's last word
on every alert must be the alert's latest state. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, text
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.notify.message import AlertItem, Message
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import NotificationDelivery

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
GROUP_INTERVAL = 60.0


def make_outbox() -> Outbox:
    settings = load(None, environ={}, notifications={
        "receivers": [{"name": "chat", "webhook": {"url": "http://127.0.0.1:1/x"}}],
        "route": {"receiver": "chat", "group_by": ["alertname"], "group_wait": "0s",
                  "group_interval": f"{GROUP_INTERVAL:g}s", "repeat_interval": "4h"}}).notifications
    return Outbox(settings)


def alert(name: str, status: str = "firing") -> AlertItem:
    return AlertItem(kind="JobFailed", severity="critical", status=status, summary=f"Job ml/{name} failed",
                     namespace="ml", queue="prod", job_name=name, fingerprint=f"fp-{name}")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(engine: Engine, box: Outbox, seconds: float, *items: AlertItem, flush: bool = True) -> None:
    """One uncontended transaction: enqueue at T0+seconds, then (optionally) flush what is due."""
    with Session(engine) as session, session.begin():
        for item in items:
            box.enqueue(session, item, at(seconds))
        if flush:
            box.flush_due(session, at(seconds))


class SenderPause:
    """Holds the sender's thread right after its first read of notification entries (the read its
    writes are computed from), until the worker is done or is blocked on a lock the sender holds.
    Installed on the sender's engine only, so the worker's reads pass freely."""

    def __init__(self, engine: Engine, worker_done: threading.Event, worker_blocked: Callable[[], bool]) -> None:
        self.reached = threading.Event()
        self.worker_done = worker_done
        self.worker_blocked = worker_blocked
        self._armed = True
        event.listen(engine, "after_cursor_execute", self._after_execute)

    def _after_execute(self, *args: Any) -> None:
        statement = str(args[2])
        if not self._armed or not statement.lstrip().upper().startswith("SELECT") \
                or "FROM notification_entries" not in statement:
            return
        self._armed = False
        self.reached.set()
        deadline = time.monotonic() + 20
        while not self.worker_done.wait(0.02) and not self.worker_blocked() and time.monotonic() < deadline:
            pass


def lock_waiter(url: str) -> Iterator[Callable[[], bool]]:
    """A probe: is any session of this database waiting on a lock? (Always False on SQLite, whose
    writers in this race never wait: the sender is held before its first write.)"""
    if not url.startswith("postgresql"):
        yield lambda: False
        return
    probe = make_engine(url)

    def blocked() -> bool:
        with probe.connect() as connection:
            return bool(connection.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'")).scalar())

    yield blocked
    probe.dispose()


def race(url: str, box: Outbox, seconds: float, *items: AlertItem) -> None:
    """The sender flushes at T0+seconds while the worker enqueues `items` at the same time."""
    sender_engine, worker_engine = make_engine(url), make_engine(url)
    worker_done = threading.Event()
    errors: list[BaseException] = []
    probe = lock_waiter(url)
    pause = SenderPause(sender_engine, worker_done, next(probe))

    def sender() -> None:
        try:
            with Session(sender_engine) as session, session.begin():
                box.flush_due(session, at(seconds))
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    def worker() -> None:
        try:
            with Session(worker_engine) as session, session.begin():
                for item in items:
                    box.enqueue(session, item, at(seconds))
        except BaseException as exc:
            errors.append(exc)
        finally:
            worker_done.set()

    sending = threading.Thread(target=sender, name="test-sender")
    sending.start()
    try:
        assert pause.reached.wait(20), "the sender never read the group's entries"
        enqueueing = threading.Thread(target=worker, name="test-worker")
        enqueueing.start()
        enqueueing.join(30)
        assert not enqueueing.is_alive(), "the worker's enqueue never finished"
    finally:
        sending.join(30)
        next(probe, None)
        sender_engine.dispose()
        worker_engine.dispose()
    assert not sending.is_alive(), "the sender's flush never finished"
    assert errors == [], errors


def last_words(engine: Engine, box: Outbox, after: float) -> dict[str, str]:
    """Flush on for group_interval after the race (repeat_interval is hours away), then each alert's
    status in the last message that mentions it."""
    step(engine, box, after + GROUP_INTERVAL)
    step(engine, box, after + 2 * GROUP_INTERVAL)
    with Session(engine) as session:
        messages = [Message.from_dict(m) for m in session.scalars(
            select(NotificationDelivery.message).order_by(NotificationDelivery.id))]
    said: dict[str, str] = {}
    for message in messages:
        for item in message.alerts:
            said[item.job_name] = item.status
    return said


@pytest.mark.parametrize("scenario", ["resolve-during-first-message", "join-while-closing", "refire-while-closing"])
def test_concurrent_enqueue_and_flush_lose_no_change(engine: Engine, database_url: str, scenario: str) -> None:
    box = make_outbox()
    if scenario == "resolve-during-first-message":
        step(engine, box, 0, alert("a"), flush=False)  # due at once (group_wait 0)
        race(database_url, box, 0, alert("a", "resolved"))  # the first message is being made
        latest = {"a": "resolved"}
    else:
        step(engine, box, 0, alert("a"))  # told firing
        step(engine, box, 10, alert("a", "resolved"), flush=False)  # due at T0+60
        if scenario == "join-while-closing":  # the flush ends the group (nothing fires) ...
            race(database_url, box, GROUP_INTERVAL, alert("b"))  # ... as b joins it
            latest = {"a": "resolved", "b": "firing"}
        else:  # the flush forgets a, told resolved ...
            race(database_url, box, GROUP_INTERVAL, alert("a"))  # ... as a fires again
            latest = {"a": "firing"}
    said = last_words(engine, box, GROUP_INTERVAL)
    # An alert never told firing may go unmentioned once resolved; any other must end as it is.
    assert {k: v for k, v in said.items() if k in latest} == {
        k: v for k, v in latest.items() if v == "firing" or k in said}, said
