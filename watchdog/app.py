"""The running watchdog: informers and collectors feed one worker thread, which owns every database
write (SQLite allows one writer) and every detector's state.

Informer handlers and collector threads only enqueue. The worker observes each event once (memory:
detectors, the cluster index; see `watchdog.observe`) and writes what it calls for inside one
transaction; when the database is unreachable it rolls back, reloads the alert state, waits and
retries the same writes, so nothing is lost or decided twice — the informers meanwhile keep their
caches, and the queue absorbs a burst (up to `QUEUE_LIMIT`, after which informers wait).

Several replicas, one truth: only the leader (a Lease; `leader_election`) collects usage, writes the
ledger, rollups and alerts, and carries out requests made through the API. Followers keep their
informers and detectors warm and write nothing. A replica that becomes leader loads the alert book
and histograms from the database, stores the latest state of every live run and the event-driven
alerts that hold now, and reconciles what went away — the same path as a restart.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from sqlalchemy import Engine, delete, select
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from exporter.kube.informer import Backoff, Informer
from exporter.kube.resources import EVENTS, JOBS, PODGROUPS, PODS, QUEUES, ResourceKind
from exporter.model import Pod, parse_job, parse_pod, parse_podgroup, parse_queue
from exporter.podview import is_volcano_pod
from watchdog.alerts import FIRING, RESOLVED, AlertBook, Transition
from watchdog.capability.store import CapabilityChange
from watchdog.cluster import ClusterIndex
from watchdog.config import Settings
from watchdog.db.engine import describe_error, migrate
from watchdog.db.models import Alert, AlertRequest
from watchdog.detectors.base import Signal, fingerprint
from watchdog.detectors.failure import FailureDetector
from watchdog.detectors.gang import GangDetector
from watchdog.detectors.queue import QueueDetector
from watchdog.detectors.waste import WasteDetector
from watchdog.events import SchedulerNotes, about_podgroup
from watchdog.leader import AlwaysLeader
from watchdog.ledger import Ledger, deleted_rows
from watchdog.notify.describe import alert_item
from watchdog.notify.message import AlertItem, rfc3339
from watchdog.notify.outbox import NOTICE_LABEL, Outbox, forget_delivered
from watchdog.notify.sender import Leader, Notifier
from watchdog.observe import LEDGER_JOB, LEDGER_PODGROUP, SIGNALS, Observer, Write
from watchdog.recommend import HistogramBook, Recommendation
from watchdog.retention import run_retention
from watchdog.usage.backfill import BackfillBatch, Backfiller, live_workloads
from watchdog.usage.metrics_api import MetricsApiCollector
from watchdog.usage.prometheus import PrometheusCollector
from watchdog.usage.recorder import UsageRecorder

log = logging.getLogger(__name__)

QUEUE_LIMIT = 200_000
BACKFILL = "backfill"  # a Write: history read from Prometheus, merged into the histograms (watchdog.usage.backfill)
UsageSource = MetricsApiCollector | PrometheusCollector
BATCH = 2_000


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class CollectorStats:
    enabled: bool
    last_success: float | None = None
    errors: int = 0
    samples: int = 0


@dataclass
class Intervals:
    """Seconds between the worker's periodic passes."""

    checks: float = 15.0  # gang and queue detectors
    waste: float = 60.0  # idle / over-requested (reads usage from the database)
    flush: float = 15.0  # usage rollups, ledger accumulators, histograms
    requests: float = 1.0  # requests made through the API (on another replica too): resolve an alert
    rollup_bucket: int = 300  # seconds of usage one rollup row summarises


@dataclass
class WorkerStats:
    events: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    db_errors: int = 0
    skipped: int = 0  # events or periodic passes the database refused (logged)
    transitions: int = 0
    last_db_error: str = ""
    takeovers: int = 0  # times this replica became the leader and took over the writes


class Watchdog:
    def __init__(self, settings: Settings, engine: Engine, api: client.ApiClient | None,
                 intervals: Intervals | None = None, clock: Callable[[], float] = time.time,
                 informer_backoff: tuple[float, float] = (0.5, 30.0), leader: Leader | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self.clock = clock
        self.intervals = intervals or Intervals(rollup_bucket=settings.sources.rollup_seconds)
        detectors = settings.detectors
        self.index = ClusterIndex()
        self.histograms = HistogramBook(settings.recommendations)
        sources = settings.sources
        expected = min((src.interval_seconds for src in (sources.metrics_api, sources.prometheus) if src.enabled),
                       default=30.0)
        self.recorder = UsageRecorder(self.histograms, bucket_seconds=self.intervals.rollup_bucket,
                                      expected_interval_seconds=expected)
        self.ledger = Ledger()
        self.failures = FailureDetector(detectors)
        self.notes = SchedulerNotes()  # the scheduler's latest Event per PodGroup: GangUnschedulable's reason
        self.queues = QueueDetector(detectors)
        self.gangs = GangDetector(detectors, self.notes, blocked=self.queues.blocked)
        # A finished run is judged once its last usage flush is surely in.
        self.waste = WasteDetector(detectors, settle_seconds=4 * self.intervals.flush)
        self._reconciled = False  # failure alerts of objects deleted while we were down are resolved once
        self._observed_sync = threading.Event()  # the index holds every informer's first list (see index_synced)
        self.alerts = AlertBook()
        self.observer = Observer(self.index, self.failures, self.gangs, self.queues, self.notes, self.recorder,
                                 self.histograms, clock,
                                 unstored_seconds=2 * settings.leader_election.lease_duration_seconds + 30)
        self.leader: Leader = leader or AlwaysLeader().start()
        self._leading = False  # this replica has taken over the writes (see _check_leadership)
        self._take_over_pending = False  # ... and has yet to store what it observed as a follower
        self._book_stale = False  # the alert book is ahead of the database (a rolled-back transaction)
        self.db_retry_backoff = (0.5, 30.0)  # seconds: first wait and cap while the database is unreachable
        self._requested = threading.Event()  # the API queued a request: look before the next interval
        self.stats = WorkerStats()
        self.transitions: list[Transition] = []  # recent ones, for tests and debugging
        # Notifications: the worker writes alert changes into the outbox in the same transaction as
        # the change itself; the notifier thread (on the leader) makes and sends the messages.
        self.outbox = Outbox(settings.notifications, settings.grafana_url)
        self.notifier = Notifier(self.outbox, engine, settings.notifications.delivery, leader, clock)
        self._enqueued = False
        self._work: queue.Queue[tuple[str, str, Any]] = queue.Queue(maxsize=QUEUE_LIMIT)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = threading.Event()
        self.informers: list[Informer[Any]] = []
        self.collectors: dict[str, CollectorStats] = {}
        self._sources: list[tuple[str, float, UsageSource]] = []
        if api is not None:
            self._add_informers(api, informer_backoff)
        source = settings.sources.metrics_api
        self.collectors["metrics_api"] = CollectorStats(source.enabled and api is not None)
        if source.enabled and api is not None:
            metrics_api = MetricsApiCollector(api, settings.namespaces)
            self._sources.append(("metrics_api", source.interval_seconds, metrics_api))
        prom = settings.sources.prometheus
        self.collectors["prometheus"] = CollectorStats(prom.enabled)
        if prom.enabled:
            prometheus = PrometheusCollector(prom, settings.namespaces)
            self._sources.append(("prometheus", prom.interval_seconds, prometheus))
        self.backfiller = Backfiller(prom, settings.recommendations, engine, self.histograms, clock=clock) \
            if prom.backfill.enabled else None

    # ---- wiring -----------------------------------------------------------------------------------------

    def _add_informers(self, api: client.ApiClient, backoff: tuple[float, float]) -> None:
        def add(kind: ResourceKind, transform: Callable[[Any], Any], predicate: Callable[[Any], bool] | None) -> None:
            scopes: list[str | None] = list(self.settings.namespaces) if self.settings.namespaces and \
                kind.namespaced else [None]
            for namespace in scopes:
                informer: Informer[Any] = Informer(api, kind, namespace=namespace, transform=transform,
                                                   predicate=predicate, backoff=Backoff(*backoff))
                informer.add_handler(functools.partial(self.enqueue, kind.plural))
                self.informers.append(informer)

        add(JOBS, parse_job, None)
        add(PODGROUPS, parse_podgroup, None)
        add(PODS, self._pod_view, is_volcano_pod)
        add(QUEUES, parse_queue, None)
        add(EVENTS, self.notes.parse, about_podgroup)  # Events about PodGroups only, dropped before parsing

    def _pod_view(self, raw: Any) -> tuple[Pod, str]:
        """The Pod view, plus the value of the configured workload label (views keep no labels)."""
        label = self.settings.recommendations.workload_label
        value = ""
        if label:
            labels = (raw.get("metadata") or {}).get("labels") if isinstance(raw, dict) else None
            found = labels.get(label) if isinstance(labels, dict) else None
            value = found if isinstance(found, str) else ""
        return parse_pod(raw), value

    def enqueue(self, what: str, event_type: str, obj: Any) -> None:
        """Called on informer and collector threads: hand over to the worker (blocks when it is far behind)."""
        while not self._stop.is_set():
            try:
                self._work.put((what, event_type, obj), timeout=1)
                return
            except queue.Full:
                log.warning("watchdog worker is %d items behind; waiting", QUEUE_LIMIT)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> Watchdog:
        migrate(self.engine)
        self._spawn("watchdog-worker", self._worker)
        self._spawn("watchdog-retention", self._retention)
        self.notifier.start()
        for name, interval, source in self._sources:
            self._spawn(f"collector-{name}", functools.partial(self._collector, name, interval, source))
        if self.backfiller is not None:
            self._spawn("watchdog-backfill", self._backfill)
        for informer in self.informers:
            informer.start()
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for informer in self.informers:
            informer.stop()
        for thread in self._threads:
            thread.join(10)
        self.notifier.stop()
        if self.backfiller is not None:
            self.backfiller.close()
        if not self._leading:
            return  # a follower holds nothing to store
        try:  # what the worker holds in memory (the open usage bucket, histogram changes)
            with Session(self.engine) as session, session.begin():
                now = datetime.fromtimestamp(self.clock(), UTC)
                self.recorder.flush(session, now, final=True)
                self.histograms.flush(session, now)
        except SQLAlchemyError as exc:
            self.histograms.flush_failed()
            log.error("final flush failed: %s", describe_error(exc))

    def ready(self) -> bool:
        return self._started.is_set() and self._all_synced()

    def idle(self) -> bool:
        """Nothing queued (tests wait for this before looking at the database)."""
        return self._work.unfinished_tasks == 0

    # ---- collectors ---------------------------------------------------------------------------------------

    def _collector(self, name: str, interval: float, source: UsageSource) -> None:
        """Poll one usage source. Its own counters say how it is doing (a failed request is counted
        there and yields no samples); an exception escaping it is a bug, counted here."""
        stats = self.collectors[name]
        crashes = 0
        while not self._stop.is_set():
            started = time.monotonic()
            if not self.leader.is_leader():  # usage is the leader's alone: two collectors would add it twice
                self._stop.wait(interval)
                continue
            try:
                samples = (source.collect(self.clock()) if isinstance(source, PrometheusCollector)
                           else source.collect())
            except Exception:  # a collector bug must not stop collection
                crashes += 1
                log.exception("usage collector %s failed", name)
                samples = []
            stats.errors = sum(source.errors.values()) + crashes
            stats.last_success = source.last_success
            if samples:
                stats.samples += len(samples)
                self.enqueue("samples", name, samples)
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def _backfill(self) -> None:
        """Back-fill usage history from Prometheus (leader only): a pass once the worker leads and has
        seen the informers' first lists, then every `interval_seconds` for workloads that appeared since."""
        assert self.backfiller is not None
        interval = self.settings.sources.prometheus.backfill.interval_seconds
        while not self._stop.is_set():
            if not (self._leading and self.leader.is_leader() and (self.index_synced() or not self.informers)):
                self._stop.wait(1.0)
                continue
            try:
                self.backfiller.run_once(live_workloads(self.index), functools.partial(self.enqueue, BACKFILL, ""),
                                         self._stop)
            except SQLAlchemyError as exc:
                log.error("back-fill pass failed (%s); trying again in %gs", describe_error(exc), interval)
            except Exception:  # a bug must not end the back-fill for the life of the process
                log.exception("back-fill pass failed; trying again in %gs", interval)
            self._stop.wait(interval)

    # ---- worker -------------------------------------------------------------------------------------------

    def _worker(self) -> None:
        self._started.set()
        now = self.clock()
        next_check, next_waste, next_flush = now, now + self.intervals.waste, now + self.intervals.flush
        next_retention = next_requests = now
        while not self._stop.is_set():
            synced = self._all_synced()  # checked before taking the batch: the initial events are queued by then
            batch = self._take_batch(timeout=0.2)
            now = self.clock()
            periodic: list[str] = []
            if synced and not self._reconciled and self._work.empty():
                periodic.append("reconcile")
            if now >= next_check:
                periodic.append("checks")
                next_check = now + self.intervals.checks
            if now >= next_waste:
                periodic.append("waste")
                next_waste = now + self.intervals.waste
            if now >= next_flush or len(batch) >= BATCH:
                periodic.append("flush")
                next_flush = now + self.intervals.flush
            if now >= next_retention:
                periodic.append("retention")
                next_retention = now + self.settings.retention.check_interval_seconds
            if now >= next_requests or self._requested.is_set():
                self._requested.clear()
                periodic.append("requests")
                next_requests = now + self.intervals.requests
            if batch or periodic:
                try:
                    self._apply_with_retry(batch, periodic)
                except Exception:  # a bug must not stop the only writer: count it, and trust memory less
                    self.stats.skipped += 1
                    self._book_stale = True
                    log.exception("watchdog worker: a batch of %d events failed", len(batch))
                if "flush" in periodic and self.recorder.backlog:
                    next_flush = now + 1.0  # rollups left for the next flush: soon, not in a full interval
            for _ in batch:
                self._work.task_done()
            if synced and self._work.empty():
                self._observed_sync.set()

    def index_synced(self) -> bool:
        """The worker has observed every informer's first list: the index knows all queues, so a job's queue
        missing from it is really missing (`/api/v1/jobs/{uid}/why`). `ready` is earlier: synced informers
        may still have their lists queued for the worker."""
        return self._observed_sync.is_set()

    def request_made(self) -> None:
        """The API stored a request (resolve an alert): carry it out now rather than at the next interval."""
        self._requested.set()

    def _all_synced(self) -> bool:
        """Every informer but the Events one has synced. Events only refine GangUnschedulable's reason:
        a cluster whose RBAC does not grant them yet must not keep the watchdog unready."""
        essential = [i for i in self.informers if i.kind is not EVENTS]
        return bool(essential) and all(i.synced.is_set() for i in essential)

    def _take_batch(self, timeout: float) -> list[tuple[str, str, Any]]:
        try:
            batch = [self._work.get(timeout=timeout)]
        except queue.Empty:
            return []
        while len(batch) < BATCH:
            try:
                batch.append(self._work.get_nowait())
            except queue.Empty:
                break
        return batch

    def _apply_with_retry(self, batch: list[tuple[str, str, Any]], periodic: list[str]) -> None:
        """Observe a batch (once), then store what it calls for in one transaction — on the leader only.
        A lost connection is waited out and the same writes retried; any other database error (a bad
        row, a bug) must not block everything behind it, so the writes are then stored one by one and
        what still fails is logged, counted and skipped."""
        writes: list[Write] = []
        for what, event_type, obj in batch:
            self.stats.events[what] += 1
            writes += [Write(BACKFILL, event_type, obj)] if what == BACKFILL else \
                self.observer.observe(what, event_type, obj)
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
        while not self._stop.is_set():
            try:
                if not self._check_leadership():
                    self.observer.keep_unstored(writes)  # a follower: the next leader may need them
                    return True
                self._refresh_book()
                takeover = self._take_over_pending
                self._enqueued = False
                self._transaction((self.observer.takeover_writes() if takeover else []) + writes, periodic)
                if self.backfiller is not None:
                    self.backfiller.committed(w.obj for w in writes if w.kind == BACKFILL)
                if takeover:
                    self._took_over()
                self.stats.batches += 1
                if self._enqueued:
                    self.notifier.wake()
                if "reconcile" in periodic:
                    self._reconciled = True
                return True
            except (OperationalError, InterfaceError) as exc:
                self._rolled_back(exc)
                delay = backoff.next_delay()
                log.error("database unavailable (%s); retrying in %.1fs", self.stats.last_db_error, delay)
                self._stop.wait(delay)
            except SQLAlchemyError as exc:
                self._rolled_back(exc)
                return False
        return True

    def _took_over(self) -> None:
        """The takeover's writes are stored (or handed to the item-by-item path): reconcile next, as
        after a restart."""
        self._take_over_pending = self._reconciled = False
        self.observer.unstored.clear()

    def _check_leadership(self) -> bool:
        """True when this replica leads and has loaded what the previous leader stored (it raises a
        database error when that load fails: the caller waits and tries again)."""
        leading = self.leader.is_leader()
        if leading and not self._leading:
            with Session(self.engine) as session:
                self.alerts.load(session)
                self.histograms.reload(session)
            self.recorder.reset_integration()  # the interval since its last sample was the other leader's
            self._leading = self._take_over_pending = True
            self.stats.takeovers += 1
            log.info("leading: writing usage, the ledger and alerts (takeover %d)", self.stats.takeovers)
        elif not leading and self._leading:
            self._leading = False
            log.info("no longer the leader: observing only")
        return leading

    def _transaction(self, writes: list[Write], periodic: list[str]) -> None:
        with Session(self.engine) as session, session.begin():
            now = datetime.fromtimestamp(self.clock(), UTC)
            for write in writes:
                self._store(write, session, now)
            for task in periodic:
                self._periodic(task, session, now)

    def _store(self, write: Write, session: Session, now: datetime) -> None:
        if write.kind == LEDGER_JOB:
            self.ledger.on_job(write.event_type, write.obj, session, now)
        elif write.kind == LEDGER_PODGROUP:
            self.ledger.on_podgroup(write.event_type, write.obj, session, now)
        elif write.kind == SIGNALS:
            self._record(self.alerts.apply(write.obj, session, now), session, now)
        elif write.kind == BACKFILL and self.backfiller is not None and isinstance(write.obj, BackfillBatch):
            self.backfiller.store(write.obj, session, now)

    def _refresh_book(self) -> None:
        """After a rollback the book is ahead of the database (its transitions never happened): read it
        again before writing. Raises the database's error while it is still down."""
        if self._book_stale:
            with Session(self.engine) as session:
                self.alerts.load(session)
            self._book_stale = False

    def _rolled_back(self, exc: SQLAlchemyError) -> None:
        self.histograms.flush_failed()  # what flush() handed over was rolled back
        if self.backfiller is not None:
            self.backfiller.rolled_back()  # a merge in that transaction: the book as before it
        self.stats.db_errors += 1
        self.stats.last_db_error = describe_error(exc)
        self._book_stale = True  # reloaded before the next attempt (the database may still be down now)

    def _periodic(self, task: str, session: Session, now: datetime) -> None:
        ts = now.timestamp()
        if task == "checks":
            self._round(GangDetector.KINDS, self.gangs.check(ts), session, now)
            self._round(QueueDetector.KINDS, self.queues.check(ts), session, now)
        elif task == "waste":
            self._round(WasteDetector.KINDS, self.waste.check(session, now), session, now)
        elif task == "reconcile":  # after the first full sync: what was deleted while we were down
            self._record(self.alerts.resolve_missing(FailureDetector.KINDS, self.failures.active(), session, now),
                         session, now)
            self.ledger.mark_gone(session, self.index.live_run_uids(), now)
        elif task == "flush":
            self.recorder.flush(session, now)
            self.histograms.flush(session, now)
        elif task == "requests":
            self._carry_out_requests(session, now)
        elif task == "retention":  # what the writer holds in memory; the big tables: see _retention
            removed = {"notifications": forget_delivered(session, now, self.settings.notifications.retention_days)}
            removed["alert_requests"] = deleted_rows(session, delete(AlertRequest).where(
                AlertRequest.done_at < now - timedelta(days=1)))
            removed["workload_histograms"] = self.histograms.forget_idle(
                session, now - timedelta(days=self.settings.retention.histograms_days))
            if any(removed.values()):
                log.info("retention removed %s", removed)

    def _retention(self) -> None:
        """Retention of the big time-ordered tables (rollups, hourly rollups, ledger, resolved alerts),
        downsampling included, in short transactions of its own on this thread — never inside the
        writer's batch, so the writer waits for one chunk at most. Leader only, like every write."""
        interval = self.settings.retention.check_interval_seconds
        while not self._stop.is_set():
            if not self.leader.is_leader():
                self._stop.wait(min(interval, 5.0))
                continue
            try:
                removed = run_retention(self.engine, self.settings, datetime.fromtimestamp(self.clock(), UTC),
                                        self._stop)
                if any(removed.values()):
                    log.info("retention: %s", removed)
                delay = interval
            except SQLAlchemyError as exc:
                log.error("retention pass failed (%s); trying again in 5 minutes", describe_error(exc))
                delay = min(interval, 300.0)
            except Exception:  # a bug must not end retention for the life of the process
                log.exception("retention pass failed; trying again in 5 minutes")
                delay = min(interval, 300.0)
            self._stop.wait(delay)

    def _carry_out_requests(self, session: Session, now: datetime) -> None:
        """Requests stored by the API (on any replica), oldest first, through the alert book: the one
        "resolved" message goes out in the same transaction as the change."""
        pending = session.scalars(select(AlertRequest).where(AlertRequest.done_at.is_(None))
                                  .order_by(AlertRequest.id).limit(100)).all()
        for request in pending:
            outcome, transitions = self.alerts.resolve_by_hand(request.alert_id, session, now)
            self._record(transitions, session, now)
            request.done_at, request.outcome = now, outcome
            log.info("alert %d resolved by hand: %s", request.alert_id, outcome)

    def announce_capability(self, change: CapabilityChange) -> None:
        """A queue's capability changed (or, in dry-run, would): a one-time notice through the routes.
        Called on the capability controller's thread, in a transaction of its own."""
        if not self.outbox.enabled:
            return
        changes = ", ".join(f"{resource} {_amount(change.before.get(resource))} -> {_amount(after)}"
                            for resource, after in sorted(change.after.items()))
        verb = "changed" if change.outcome == "applied" else "would change (dry-run)"
        item = AlertItem(kind="QueueCapabilityChanged", severity="info", status=FIRING,
                         summary=f"Queue {change.queue} capability {verb}: {changes}", queue=change.queue,
                         subject=change.queue, reasons=tuple(f"{k}: {v}" for k, v in sorted(change.why.items())),
                         started_at=rfc3339(change.at),
                         fingerprint=fingerprint("QueueCapabilityChanged", change.queue, change.at.isoformat()),
                         labels={NOTICE_LABEL: "true", "policy": change.policy, "mode": change.mode})
        try:
            with Session(self.engine) as session, session.begin():
                self.outbox.enqueue(session, item, change.at)
        except SQLAlchemyError as exc:
            log.error("capability notice for queue %s not queued: %s", change.queue, describe_error(exc))
            return
        self.notifier.wake()

    def _round(self, kinds: frozenset[str], signals: list[Signal], session: Session, now: datetime) -> None:
        self._record(self.alerts.apply_round(kinds, signals, session, now), session, now)

    def _record(self, transitions: list[Transition], session: Session, now: datetime) -> None:
        if not transitions:
            return
        self.stats.transitions += len(transitions)
        self.transitions = (self.transitions + transitions)[-1000:]
        for t in transitions:
            log.info("alert %s %s: %s -> %s", t.kind, t.fingerprint, t.old_state, t.new_state)
            told = FIRING if t.new_state == FIRING else RESOLVED if t.old_state == FIRING else None
            if told is None or not self.outbox.enabled:
                continue  # pending, or resolved before it fired: nobody was told
            row = session.get(Alert, t.alert_id, populate_existing=True)
            if row is not None:
                item = alert_item(row, told, api_url=self.settings.notifications.api_url,
                                  recommender=self._recommendations, workload_of=self._workload_of)
                self._enqueued = self.outbox.enqueue(session, item, now) > 0 or self._enqueued

    def _recommendations(self, namespace: str, workload: str, task: str, container: str) -> list[Recommendation]:
        now = datetime.fromtimestamp(self.clock(), UTC)
        return [r for r in self.histograms.for_workload(namespace, workload, now)
                if (not task or r.task == task) and (not container or r.container == container)]

    def _workload_of(self, namespace: str, pod: str) -> tuple[str, str]:
        info = self.index.pod_info(namespace, pod)
        return (info.workload, info.task) if info is not None else ("", "")


def _amount(value: float | None) -> str:
    return "unset" if value is None else f"{value:.4g}"
