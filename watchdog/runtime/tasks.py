"""What the writer does inside its transactions: store what observing an event called for (ledger rows,
alert signals), run the periodic passes (detectors, flushes, reconciliation, requests made through
the API, small retention), and turn alert transitions into outbox entries in the same transaction.

Also the retention thread for the big tables, which runs its own short transactions (never inside the
writer's batch), and the capability controller's one-time notices. Everything here runs on the leader.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, delete, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.capability.store import CapabilityChange
from volcano_monitor.watchdog.actions.notify.describe import alert_item
from volcano_monitor.watchdog.actions.notify.message import AlertItem, rfc3339
from volcano_monitor.watchdog.actions.notify.outbox import NOTICE_LABEL, Outbox, forget_delivered
from volcano_monitor.watchdog.actions.notify.sender import Notifier
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.detectors.budget import BudgetDetector
from volcano_monitor.watchdog.findings.detectors.failure import FailureDetector
from volcano_monitor.watchdog.findings.detectors.fleet import ClusterStaleDetector
from volcano_monitor.watchdog.findings.detectors.gang import GangDetector
from volcano_monitor.watchdog.findings.detectors.gpuidle import GpuIdleDetector
from volcano_monitor.watchdog.findings.detectors.hot import NodeHotDetector
from volcano_monitor.watchdog.findings.detectors.queue import QueueDetector
from volcano_monitor.watchdog.findings.detectors.stranded import GpuStrandedDetector
from volcano_monitor.watchdog.findings.detectors.waste import WasteDetector
from volcano_monitor.watchdog.findings.recommendations.backfill import BackfillBatch, Backfiller
from volcano_monitor.watchdog.findings.recommendations.backfill_queries import Workload as BackfillWorkload
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook, Recommendation
from volcano_monitor.watchdog.runtime.observe import BACKFILL, LEDGER_JOB, LEDGER_PODGROUP, LEDGER_QUEUE, SIGNALS, Write
from volcano_monitor.watchdog.runtime.retention import run_retention
from volcano_monitor.watchdog.state.alerts import FIRING, RESOLVED, AlertBook, Transition
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.engine import describe_error
from volcano_monitor.watchdog.state.db.models import Alert, AlertRequest
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.fleet import beat
from volcano_monitor.watchdog.state.ledger import Ledger, deleted_rows
from volcano_monitor.watchdog.state.nodes import NodeTable
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.signals import Signal, fingerprint

log = logging.getLogger(__name__)


@dataclass
class WorkerStats:
    events: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    db_errors: int = 0
    skipped: int = 0  # events or periodic passes the database refused (logged)
    transitions: int = 0
    last_db_error: str = ""
    takeovers: int = 0  # times this replica became the leader and took over the writes


# Every kind of alert the watchdog raises. The demo must show each within five minutes, but for those of
# FLEET_KINDS, which need a second cluster in the database (one cluster alone never raises them).
FLEET_KINDS = ClusterStaleDetector.KINDS
ALERT_KINDS = (FailureDetector.KINDS | GangDetector.KINDS | QueueDetector.KINDS | WasteDetector.KINDS
               | GpuIdleDetector.KINDS | GpuStrandedDetector.KINDS | NodeHotDetector.KINDS | BudgetDetector.KINDS
               | FLEET_KINDS)


@dataclass
class DetectorSet:
    failures: FailureDetector
    gangs: GangDetector
    queues: QueueDetector
    waste: WasteDetector
    gpu_idle: GpuIdleDetector
    stranded: GpuStrandedDetector | None  # None when off
    hot: NodeHotDetector | None
    nodes: NodeTable  # what the node detectors read
    nodes_known: Callable[[], bool]  # the Node informer and every pod list are in (see periodic)
    budget: BudgetDetector | None = None  # None without costs.budgets
    fleet: ClusterStaleDetector | None = None  # the other clusters' heartbeats; None: only beat


class Tasks:
    def __init__(self, settings: Settings, engine: Engine, clock: Callable[[], float], index: ClusterIndex,
                 detectors: DetectorSet, alerts: AlertBook, recorder: UsageRecorder, histograms: HistogramBook,
                 outbox: Outbox, notifier: Notifier, stats: WorkerStats) -> None:
        self.settings, self.engine, self.clock, self.index = settings, engine, clock, index
        self.detectors, self.alerts, self.recorder, self.histograms = detectors, alerts, recorder, histograms
        self.outbox, self.notifier, self.stats = outbox, notifier, stats
        self.ledger = Ledger()
        self.identity = socket.gethostname()  # who wrote the heartbeat (the Lease holder's identity; see app)
        self.backfiller: Backfiller | None = None  # usage history from Prometheus, when enabled
        self.enqueued = False  # the current transaction queued a notification: wake the sender after commit
        self.transitions: list[Transition] = []  # recent ones, for tests and debugging

    def store(self, write: Write, session: Session, now: datetime) -> None:
        if write.kind == LEDGER_JOB:
            self.ledger.on_job(write.event_type, write.obj, session, now, self.index.queue_path(write.obj.queue))
        elif write.kind == LEDGER_PODGROUP:
            self.ledger.on_podgroup(write.event_type, write.obj, session, now,
                                    self.index.queue_path(write.obj.queue))
        elif write.kind == LEDGER_QUEUE:
            self.ledger.retag_queues(session, self.index.queue_paths_under(write.obj))
        elif write.kind == SIGNALS:
            self.record(self.alerts.apply(write.obj, session, now), session, now)
        elif write.kind == BACKFILL and self.backfiller is not None and isinstance(write.obj, BackfillBatch):
            self.backfiller.store(write.obj, session, now)

    def committed(self, writes: list[Write]) -> None:
        """The transaction holding `writes` is in: what it merged is the histograms' for good."""
        if self.backfiller is not None:
            self.backfiller.committed(w.obj for w in writes if w.kind == BACKFILL)

    def rolled_back(self) -> None:
        """The transaction was rolled back: undo what it changed in memory, so a retry does it once."""
        self.histograms.flush_failed()  # what flush() handed over was rolled back
        if self.backfiller is not None:
            self.backfiller.rolled_back()  # a merge in that transaction: the book as before it

    def periodic(self, task: str, session: Session, now: datetime) -> None:
        ts, found = now.timestamp(), self.detectors
        if task == "checks":
            self._round(GangDetector.KINDS, found.gangs.check(ts), session, now)
            self._round(QueueDetector.KINDS, found.queues.check(ts), session, now)
            # GPU idle: the tracker's memory and the open alerts (one indexed query), like the checks above.
            tracker = found.gpu_idle.tracker
            tracker.forget(self.index.live_run_uids(), ts - tracker.max_gap_seconds - 600)
            self._round(GpuIdleDetector.KINDS, found.gpu_idle.check(session, now), session, now)
            # Not before the nodes and every pod are known: an empty view would resolve open alerts.
            known = found.nodes_known()
            if found.stranded is not None and known:
                self._round(GpuStrandedDetector.KINDS, found.stranded.check(session, now), session, now)
            if found.hot is not None and known and (
                    found.nodes.usage_at is not None or self.settings.detectors.node_hot.source == "pods"):
                self._round(NodeHotDetector.KINDS, found.hot.check(ts), session, now)
        elif task == "waste":
            self._round(WasteDetector.KINDS, found.waste.check(session, now), session, now)
            if found.budget is not None:  # from the ledger, like waste, at its pace
                self._round(BudgetDetector.KINDS, found.budget.check(session, now), session, now)
        elif task == "heartbeat":  # this cluster is alive; then judge the others' (the fleet watches itself)
            beat(session, cluster_of(self.engine), self.identity, now)
            if found.fleet is not None:
                self._round(ClusterStaleDetector.KINDS, found.fleet.check(session, now), session, now)
        elif task == "reconcile":  # after the first full sync: what was deleted while we were down
            self.record(self.alerts.resolve_missing(FailureDetector.KINDS, found.failures.active(), session, now),
                        session, now)
            self.ledger.mark_gone(session, self.index.live_run_uids(), now)
        elif task == "flush":
            self.recorder.flush(session, now)
            self.histograms.flush(session, now)
        elif task == "requests":
            self._carry_out_requests(session, now)
        elif task == "retention":  # what the writer holds in memory; the big tables: see retention_loop
            removed = {"notifications": forget_delivered(session, now, self.settings.notifications.retention_days)}
            removed["alert_requests"] = deleted_rows(session, delete(AlertRequest).where(
                AlertRequest.done_at < now - timedelta(days=1)))
            removed["workload_histograms"] = self.histograms.forget_idle(
                session, now - timedelta(days=self.settings.retention.histograms_days))
            if any(removed.values()):
                log.info("retention removed %s", removed)

    def _carry_out_requests(self, session: Session, now: datetime) -> None:
        """Requests stored by the API (on any replica), oldest first, through the alert book: the one
        "resolved" message goes out in the same transaction as the change."""
        pending = session.scalars(select(AlertRequest).where(AlertRequest.done_at.is_(None))
                                  .order_by(AlertRequest.id).limit(100)).all()
        for request in pending:
            outcome, transitions = self.alerts.resolve_by_hand(request.alert_id, session, now)
            self.record(transitions, session, now)
            request.done_at, request.outcome = now, outcome
            log.info("alert %d resolved by hand: %s", request.alert_id, outcome)

    def _round(self, kinds: frozenset[str], signals: list[Signal], session: Session, now: datetime) -> None:
        self.record(self.alerts.apply_round(kinds, signals, session, now), session, now)

    def record(self, transitions: list[Transition], session: Session, now: datetime) -> None:
        """Log alert transitions and queue the messages they call for, in the transaction that made them."""
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
                                  recommender=self.recommendations, workload_of=self.workload_of)
                self.enqueued = self.outbox.enqueue(session, item, now) > 0 or self.enqueued

    def recommendations(self, namespace: str, workload: str, task: str, container: str) -> list[Recommendation]:
        now = datetime.fromtimestamp(self.clock(), UTC)
        return [r for r in self.histograms.for_workload(namespace, workload, now)
                if (not task or r.task == task) and (not container or r.container == container)]

    def workload_of(self, namespace: str, pod: str) -> tuple[str, str]:
        info = self.index.pod_info(namespace, pod)
        return (info.workload, info.task) if info is not None else ("", "")

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


def retention_loop(engine: Engine, settings: Settings, leading: Callable[[], bool], stop: threading.Event,
                   clock: Callable[[], float]) -> None:
    """Retention of the big time-ordered tables (rollups, hourly rollups, ledger, resolved alerts),
    downsampling included, in short transactions of its own on this thread — never inside the
    writer's batch, so the writer waits for one chunk at most. Leader only, like every write."""
    interval = settings.retention.check_interval_seconds
    while not stop.is_set():
        if not leading():
            stop.wait(min(interval, 5.0))
            continue
        try:
            removed = run_retention(engine, settings, datetime.fromtimestamp(clock(), UTC), stop)
            if any(removed.values()):
                log.info("retention: %s", removed)
            delay = interval
        except SQLAlchemyError as exc:
            log.error("retention pass failed (%s); trying again in 5 minutes", describe_error(exc))
            delay = min(interval, 300.0)
        except Exception:  # a bug must not end retention for the life of the process
            log.exception("retention pass failed; trying again in 5 minutes")
            delay = min(interval, 300.0)
        stop.wait(delay)


def _amount(value: float | None) -> str:
    return "unset" if value is None else f"{value:.4g}"


def backfill_loop(backfiller: Backfiller, interval: float, may_run: Callable[[], bool],
                  live: Callable[[], list[BackfillWorkload]], hand_over: Callable[[BackfillBatch], None],
                  stop: threading.Event) -> None:
    """Back-fill usage history from Prometheus (leader only): a pass once the writer leads and has seen
    the informers' first lists (`may_run`), then every `interval` for workloads that appeared since. The
    batches go to the writer, which merges and records them in one transaction."""
    while not stop.is_set():
        if not may_run():
            stop.wait(1.0)
            continue
        try:
            backfiller.run_once(live(), hand_over, stop)
        except SQLAlchemyError as exc:
            log.error("back-fill pass failed (%s); trying again in %gs", describe_error(exc), interval)
        except Exception:  # a bug must not end the back-fill for the life of the process
            log.exception("back-fill pass failed; trying again in %gs", interval)
        stop.wait(interval)
