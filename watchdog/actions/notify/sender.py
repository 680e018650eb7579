"""The sender: one thread that turns due groups into messages and delivers them, on the leader only.

Delivery is at most once per message: a message is marked `sending` (committed) before the HTTP
request and `sent` after it; a process that dies in between leaves it `sending`, and the next leader
marks it `uncertain` instead of posting it again (see `outbox.settle_inflight`). Failures are retried
with exponential backoff and jitter up to `delivery.max_attempts`, then the message is a dead letter
(kept, listed by the API, counted in metrics); a 4xx answer other than 429 is a dead letter at once
(a wrong URL or token does not heal by waiting). Messages of one group go out in order: a group's
next message waits while an older one is pending.

The database being away is waited out; a result that could not be recorded is kept in memory and
recorded first when the database is back, so a delivered message is not sent again.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import httpx
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.watchdog.actions.notify import outbox
from volcano_monitor.watchdog.actions.notify.channels import Channel, SendResult, build_channel, send
from volcano_monitor.watchdog.actions.notify.message import Message
from volcano_monitor.watchdog.actions.notify.outbox import DEAD, PENDING, SENT, UNCERTAIN, Outbox
from volcano_monitor.watchdog.actions.notify.settings import Delivery
from volcano_monitor.watchdog.state.db.engine import describe_error

__all__ = ["Leader", "Notifier", "RateLimiter"]

log = logging.getLogger(__name__)


class Leader(Protocol):
    def is_leader(self) -> bool: ...


class RateLimiter:
    """Token bucket per receiver: `per_minute` messages a minute, bursts up to that many."""

    def __init__(self, per_minute: float, clock: Callable[[], float]) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, per_minute)
        self.tokens = self.capacity
        self.clock = clock
        self.last = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def wait_seconds(self) -> float:
        return max(0.0, (1 - self.tokens) / self.rate)


@dataclass
class _Unrecorded:
    delivery_id: int
    state: str
    error: str
    attempts: int
    next_attempt_at: datetime | None


@dataclass
class NotifierStats:
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (receiver, outcome)
    db_errors: int = 0
    last_error: str = ""


class Notifier:
    def __init__(self, outbox_: Outbox, engine: Engine, delivery: Delivery, leader: Leader | None = None,
                 clock: Callable[[], float] = time.time, client: httpx.Client | None = None) -> None:
        self.outbox = outbox_
        self.engine = engine
        self.delivery = delivery
        self.leader: Leader = leader or AlwaysLeader().start()
        self.clock = clock
        self.identity = f"{socket.gethostname()[:40]}-{uuid.uuid4().hex[:8]}"
        self.channels: dict[str, Channel] = {name: build_channel(r) for name, r in outbox_.receivers.items()}
        self.limits = {name: RateLimiter(r.rate_limit_per_minute, clock) for name, r in outbox_.receivers.items()}
        self.client = client or httpx.Client(timeout=delivery.timeout_seconds, follow_redirects=False)
        self.stats = NotifierStats()
        self._was_leader = False
        self._unrecorded: list[_Unrecorded] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> Notifier:
        if self.outbox.enabled:
            self._thread = threading.Thread(target=self._loop, name="notifier", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.delivery.timeout_seconds + 5)
        self.client.close()

    def wake(self) -> None:
        """Something was enqueued: look now rather than at the next poll."""
        self._wake.set()

    def _loop(self) -> None:
        backoff = Backoff(0.5, 30.0)
        while not self._stop.is_set():
            try:
                wait = self.run_once()
                backoff.reset()
            except SQLAlchemyError as exc:
                self.stats.db_errors += 1
                self.stats.last_error = describe_error(exc)
                wait = backoff.next_delay()
                log.error("notifier: database unavailable (%s); retrying in %.1fs", self.stats.last_error, wait)
            except Exception:  # a bug must not end notifications
                log.exception("notifier round failed")
                wait = backoff.next_delay()
            self._wake.wait(wait)
            self._wake.clear()

    # ---- one round -----------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def run_once(self) -> float:
        """Record what is owed, settle a predecessor's in-flight messages on becoming leader, make due
        messages, deliver due messages. Returns the seconds until there may be something to do."""
        poll = self.delivery.poll_interval_seconds
        leader = self.leader.is_leader()
        if not leader:
            self._was_leader = False
            return poll
        self._record_pending()
        if not self._was_leader:
            with Session(self.engine) as session, session.begin():
                for delivery_id, receiver in outbox.settle_inflight(session, self._now()):
                    self.stats.outcomes[(receiver, UNCERTAIN)] += 1
                    log.warning("notification %d to %s was in flight when its sender stopped: not sent again",
                                delivery_id, receiver)
            self._was_leader = True
        with Session(self.engine) as session, session.begin():
            self.outbox.flush_due(session, self._now())
        waits = [poll]
        with Session(self.engine) as session:
            due = [(d.id, d.receiver, d.attempts, d.message) for d in outbox.due_deliveries(session, self._now())]
        blocked: set[str] = set()
        for delivery_id, receiver, attempts, message in due:
            if self._stop.is_set() or not self.leader.is_leader():
                break
            if receiver in blocked:
                continue
            limit = self.limits.get(receiver)
            if limit is not None and not limit.take():
                blocked.add(receiver)  # its later messages wait too: order is kept
                waits.append(limit.wait_seconds())
                continue
            self._deliver(delivery_id, receiver, attempts, message)
        with Session(self.engine) as session:
            due_at = self.outbox.next_due(session)
        if due_at is not None:
            waits.append((due_at - self._now()).total_seconds())
        return max(0.01, min(waits))

    def _deliver(self, delivery_id: int, receiver: str, attempts: int, raw: dict[str, object]) -> None:
        now = self._now()
        with Session(self.engine) as session, session.begin():
            if not outbox.claim(session, delivery_id, self.identity, now):
                return
        channel = self.channels.get(receiver)
        if channel is None:  # the receiver was removed from the configuration
            result = SendResult(ok=False, error=f"no receiver named {receiver!r} is configured", retryable=False)
        else:
            try:
                message = Message.from_dict(dict(raw))
            except (KeyError, TypeError, ValueError) as exc:
                result = SendResult(ok=False, error=f"stored message is unreadable: {type(exc).__name__}",
                                    retryable=False)
            else:
                result = send(channel, message, self.client, self.clock())
        attempts += 1
        if result.ok:
            outcome = _Unrecorded(delivery_id, SENT, "", attempts, None)
            self.stats.outcomes[(receiver, SENT)] += 1
        elif result.retryable and attempts < self.delivery.max_attempts:
            delay = min(self.delivery.max_backoff_seconds, self.delivery.initial_backoff_seconds * 2 ** (attempts - 1))
            delay *= 0.5 + random.random() / 2  # jitter: replicas and groups do not retry in step
            outcome = _Unrecorded(delivery_id, PENDING, result.error, attempts, self._now() + timedelta(seconds=delay))
            self.stats.outcomes[(receiver, "failed")] += 1
            log.warning("notification %d to %s failed (%s); attempt %d, next in %.1fs",
                        delivery_id, receiver, result.error, attempts, delay)
        else:
            outcome = _Unrecorded(delivery_id, DEAD, result.error, attempts, None)
            self.stats.outcomes[(receiver, "failed")] += 1
            self.stats.outcomes[(receiver, DEAD)] += 1
            log.error("notification %d to %s is a dead letter after %d attempt(s): %s",
                      delivery_id, receiver, attempts, result.error)
        self._unrecorded.append(outcome)
        self._record_pending()

    def _record_pending(self) -> None:
        """Write down delivery results (kept in memory while the database is away)."""
        if not self._unrecorded:
            return
        with Session(self.engine) as session, session.begin():
            now = self._now()
            for item in self._unrecorded:
                outbox.mark(session, item.delivery_id, self.identity, now, state=item.state, error=item.error,
                            attempts=item.attempts, next_attempt_at=item.next_attempt_at)
        self._unrecorded.clear()
