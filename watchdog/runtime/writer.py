"""The one writer: a thread that takes what the feeds queued, observes each item once (memory: detectors,
the cluster index; see `watchdog.runtime.observe`) and stores what it calls for in one transaction, together
with the periodic passes that are due (`watchdog.runtime.tasks`). SQLite allows one writer; every detector's
state is touched by this thread alone.

When the database is unreachable the transaction rolls back, the alert book is reloaded, and the same
writes are retried after a backoff, so nothing is lost or decided twice; the informers meanwhile keep
their caches and the queue absorbs a burst (up to `QUEUE_LIMIT`, after which the feeds wait).

Several replicas, one truth: only the Lease leader stores. A follower observes (its detectors stay
warm) and keeps what it would have stored; a replica that becomes leader loads the alert book and
histograms from the database and stores, first, what it observed as a follower (`takeover_writes`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.watchdog.actions.notify.sender import Leader
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook
from volcano_monitor.watchdog.runtime.observe import Observer, Write
from volcano_monitor.watchdog.runtime.settings import Retention
from volcano_monitor.watchdog.runtime.tasks import Tasks, WorkerStats
from volcano_monitor.watchdog.state.alerts import AlertBook
from volcano_monitor.watchdog.state.db.engine import describe_error
from volcano_monitor.watchdog.state.rollups import UsageRecorder

log = logging.getLogger(__name__)

QUEUE_LIMIT = 200_000
BATCH = 2_000
Item = tuple[str, str, Any]  # (what, event type, object): an informer event or a batch of usage samples
# Queued once every feed has synced, behind their first lists (an informer hands over its list before it says
# it has synced): observing it means the lists are observed, even where the queue is never empty (a busy cluster).
FIRST_LISTS_QUEUED: Item = ("first-lists-queued", "", None)
# How long the judging passes wait for the first lists: an informer that never syncs (RBAC refuses PodGroups,
# one namespace forbidden) must not silence every periodic alert; past this they judge what is listed.
JUDGE_WAIT_SECONDS = 120.0


@dataclass
class Intervals:
    """Seconds between the writer's periodic passes."""

    checks: float = 15.0  # gang and queue detectors
    waste: float = 60.0  # idle / over-requested (reads usage from the database)
    flush: float = 15.0  # usage rollups, ledger accumulators, histograms
    requests: float = 1.0  # requests made through the API (on another replica too): resolve an alert
    heartbeat: float = 30.0  # this cluster's heartbeat, then ClusterStale for the others (cluster.*)
    rollup_bucket: int = 300  # seconds of usage one rollup row summarises


class Writer:
    def __init__(self, engine: Engine, observer: Observer, tasks: Tasks, alerts: AlertBook,
                 histograms: HistogramBook, recorder: UsageRecorder, leader: Leader, intervals: Intervals,
                 retention: Retention, clock: Callable[[], float], stats: WorkerStats,
                 feeds_synced: Callable[[], bool], fed_by_hand: Callable[[], bool]) -> None:
        self.engine, self.observer, self.tasks, self.alerts = engine, observer, tasks, alerts
        self.histograms, self.recorder, self.leader, self.intervals = histograms, recorder, leader, intervals
        self.retention, self.clock, self.stats, self.feeds_synced = retention, clock, stats, feeds_synced
        self.fed_by_hand = fed_by_hand  # no informers (tests, benchmarks): nothing to wait for before judging
        self.judge_wait_seconds = JUDGE_WAIT_SECONDS
        self.judging_unsynced = False  # the wait ran out: judging what is listed (logged once)
        self.db_retry_backoff = (0.5, 30.0)  # seconds: first wait and cap while the database is unreachable
        self.work: queue.Queue[Item] = queue.Queue(maxsize=QUEUE_LIMIT)
        self.stop = threading.Event()
        self.started = threading.Event()
        self.observed_sync = threading.Event()  # every feed's first list has been observed (reconcile, judge)
        self.requested = threading.Event()  # the API queued a request: look before the next interval
        self.reconciled = False  # failure alerts of objects deleted while we were down are resolved once
        self._lists_marked = False  # FIRST_LISTS_QUEUED is in the queue
        self.leading = False  # this replica has taken over the writes (see _check_leadership)
        self._take_over_pending = False  # ... and has yet to store what it observed as a follower
        self._book_stale = False  # the alert book is ahead of the database (a rolled-back transaction)

    def enqueue(self, what: str, event_type: str, obj: Any) -> None:
        """Called on informer and collector threads: hand over to the writer (blocks when it is far behind)."""
        while not self.stop.is_set():
            try:
                self.work.put((what, event_type, obj), timeout=1)
                return
            except queue.Full:
                log.warning("watchdog worker is %d items behind; waiting", QUEUE_LIMIT)

    def drain(self, timeout: float) -> bool:
        """Wait until everything queued so far is observed and stored (or handed to the item-by-item
        path); False after `timeout` seconds (a database that is down)."""
        deadline = time.monotonic() + timeout
        while self.work.unfinished_tasks and time.monotonic() < deadline and self.started.is_set():
            time.sleep(0.05)
        return self.work.unfinished_tasks == 0

    def run(self) -> None:
        self.started.set()
        now = self.clock()
        judge_anyway_at = now + self.judge_wait_seconds
        next_check, next_waste, next_flush = now, now + self.intervals.waste, now + self.intervals.flush
        next_retention = next_requests = next_heartbeat = now
        while not self.stop.is_set():
            synced = self.feeds_synced()  # checked before taking the batch: the initial events are queued by then
            if synced and not self._lists_marked:
                self._lists_marked = self._put_nowait(FIRST_LISTS_QUEUED)
            taken = self._take_batch(timeout=0.2)
            batch = [item for item in taken if item is not FIRST_LISTS_QUEUED]
            now = self.clock()
            periodic: list[str] = []
            if self.observed_sync.is_set() and not self.reconciled:
                periodic.append("reconcile")
            # The judging passes resolve whatever their round no longer reports, so not before every feed's first
            # list is observed: a round over a half-listed cluster (a restart, a new leader's first look) resolves
            # open alerts and fires them again a moment later, each change a chat message.
            judging = self.observed_sync.is_set() or self.fed_by_hand()
            if not judging and now >= judge_anyway_at:
                if not self.judging_unsynced:
                    self.judging_unsynced = True
                    log.warning("the informers' first lists are not all in after %.0f s: judging gang, queue, idle "
                                "and waste alerts with what is listed (see /readyz and the informers' errors)",
                                self.judge_wait_seconds)
                judging = True
            if now >= next_check and judging:
                periodic.append("checks")
                next_check = now + self.intervals.checks
            if now >= next_waste and judging:
                periodic.append("waste")
                next_waste = now + self.intervals.waste
            if now >= next_flush or len(batch) >= BATCH:
                periodic.append("flush")
                next_flush = now + self.intervals.flush
            if now >= next_retention:
                periodic.append("retention")
                next_retention = now + self.retention.check_interval_seconds
            if now >= next_requests or self.requested.is_set():
                self.requested.clear()
                periodic.append("requests")
                next_requests = now + self.intervals.requests
            # The heartbeat on its interval, and in every round of a follower that stores something (a
            # request pass at least once a second): the round that makes it the leader beats at once,
            # rather than up to an interval after taking over. A follower's round stores nothing.
            if now >= next_heartbeat or (not self.leading and (batch or periodic)):
                periodic.append("heartbeat")
                next_heartbeat = now + self.intervals.heartbeat
            if batch or periodic:
                try:
                    self.apply(batch, periodic)
                except Exception:  # a bug must not stop the only writer: count it, and trust memory less
                    self.stats.skipped += 1
                    self._book_stale = True
                    log.exception("watchdog worker: a batch of %d events failed", len(batch))
                if "flush" in periodic and self.recorder.backlog:
                    next_flush = now + 1.0  # rollups left for the next flush: soon, not in a full interval
            for _ in taken:
                self.work.task_done()
            if len(batch) < len(taken) or (synced and self.work.empty()):
                self.observed_sync.set()

    def _put_nowait(self, item: Item) -> bool:
        try:
            self.work.put_nowait(item)
            return True
        except queue.Full:
            return False  # the writer's own thread must not wait for itself: again in the next round

    def _take_batch(self, timeout: float) -> list[Item]:
        try:
            batch = [self.work.get(timeout=timeout)]
        except queue.Empty:
            return []
        while len(batch) < BATCH:
            try:
                batch.append(self.work.get_nowait())
            except queue.Empty:
                break
        return batch

    def apply(self, batch: list[Item], periodic: list[str]) -> None:
        """Observe a batch (once), then store what it calls for in one transaction — on the leader only.
        A lost connection is waited out and the same writes retried; any other database error (a bad
        row, a bug) must not block everything behind it, so the writes are then stored one by one and
        what still fails is logged, counted and skipped."""
        writes: list[Write] = []
        for what, event_type, obj in batch:
            self.stats.events[what] += 1
            writes += self.observer.observe(what, event_type, obj)
        if self._store_retrying(writes, periodic):
            return
        log.error("database write failed (%s); storing the batch item by item", self.stats.last_db_error)
        if self._take_over_pending:  # each of the takeover's writes on its own too: one bad row must not block all
            writes = self.observer.takeover_writes() + writes
            self._took_over()
        items: list[tuple[list[Write], list[str]]] = [([write], []) for write in writes]
        items += [([], [task]) for task in periodic]
        for one, tasks in items:
            if not self._store_retrying(one, tasks):
                self.stats.skipped += 1
                log.error("skipped a %s the database refused: %s", one[0].kind if one else tasks[0],
                          self.stats.last_db_error)

    def _store_retrying(self, writes: list[Write], periodic: list[str]) -> bool:
        """One transaction, retried while the database is unreachable. False when the database refused
        it for another reason (rolled back); True when stored, or when there is nothing to store here
        (a follower) or the watchdog is stopping."""
        backoff = Backoff(*self.db_retry_backoff)
        while not self.stop.is_set():
            try:
                if not self._check_leadership():
                    self.observer.keep_unstored(writes)  # a follower: the next leader may need them
                    return True
                self._refresh_book()
                takeover = self._take_over_pending
                self.tasks.enqueued = False
                self._transaction((self.observer.takeover_writes() if takeover else []) + writes, periodic)
                self.tasks.committed(writes)
                if takeover:
                    self._took_over()
                self.stats.batches += 1
                if self.tasks.enqueued:
                    self.tasks.notifier.wake()
                if "reconcile" in periodic:
                    self.reconciled = True
                return True
            except (OperationalError, InterfaceError) as exc:
                self._rolled_back(exc)
                delay = backoff.next_delay()
                log.error("database unavailable (%s); retrying in %.1fs", self.stats.last_db_error, delay)
                self.stop.wait(delay)
            except SQLAlchemyError as exc:
                self._rolled_back(exc)
                return False
        return True

    def _took_over(self) -> None:
        """The takeover's writes are stored (or handed to the item-by-item path): reconcile next, as
        after a restart."""
        self._take_over_pending = self.reconciled = False
        self.observer.unstored.clear()

    def _check_leadership(self) -> bool:
        """True when this replica leads and has loaded what the previous leader stored (it raises a
        database error when that load fails: the caller waits and tries again)."""
        leading = self.leader.is_leader()
        if leading and not self.leading:
            with Session(self.engine) as session:
                self.alerts.load(session)
                self.histograms.reload(session)
            self.recorder.reset_integration()  # the interval since its last sample was the other leader's
            self.leading = self._take_over_pending = True
            self.stats.takeovers += 1
            log.info("leading: writing usage, the ledger and alerts (takeover %d)", self.stats.takeovers)
        elif not leading and self.leading:
            self.leading = False
            log.info("no longer the leader: observing only")
        return leading

    def _transaction(self, writes: list[Write], periodic: list[str]) -> None:
        with Session(self.engine) as session, session.begin():
            now = datetime.fromtimestamp(self.clock(), UTC)
            for write in writes:
                self.tasks.store(write, session, now)
            for task in periodic:
                self.tasks.periodic(task, session, now)

    def _refresh_book(self) -> None:
        """After a rollback the book is ahead of the database (its transitions never happened): read it
        again before writing. Raises the database's error while it is still down."""
        if self._book_stale:
            with Session(self.engine) as session:
                self.alerts.load(session)
            self._book_stale = False

    def _rolled_back(self, exc: SQLAlchemyError) -> None:
        self.tasks.rolled_back()
        self.stats.db_errors += 1
        self.stats.last_db_error = describe_error(exc)
        self._book_stale = True  # reloaded before the next attempt (the database may still be down now)
