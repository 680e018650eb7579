"""The running watchdog: the parts and their threads, put together.

- `watchdog.sources.feeds`: informers and usage collectors; they only enqueue;
- `watchdog.runtime.writer`: the one writer thread, which observes each item once and owns every database write
  (SQLite allows one writer) and every detector's state; leader only (a Lease; `leader_election`);
- `watchdog.runtime.tasks`: what the writer stores and its periodic passes; the retention thread;
- the notifier (`watchdog.actions.notify.sender`), which sends what the writer put in the outbox.

Several replicas, one truth: only the leader collects usage, writes the ledger, rollups and alerts,
and carries out requests made through the API. Followers keep their informers and detectors warm and
write nothing; a replica that becomes leader takes over as after a restart (`watchdog.runtime.writer`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.core.model import Pod
from volcano_monitor.watchdog.actions.capability.store import CapabilityChange
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.actions.notify.sender import Leader, Notifier
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
from volcano_monitor.watchdog.findings.expected import ExpectedStarts
from volcano_monitor.watchdog.findings.recommendations.backfill import Backfiller, live_workloads
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook
from volcano_monitor.watchdog.findings.topology import TopologyView
from volcano_monitor.watchdog.runtime.observe import BACKFILL, Observer
from volcano_monitor.watchdog.runtime.tasks import DetectorSet, Tasks, WorkerStats, backfill_loop, retention_loop
from volcano_monitor.watchdog.runtime.writer import Intervals, Item, Writer
from volcano_monitor.watchdog.sources import feeds
from volcano_monitor.watchdog.sources.node_metrics import NodeMetricsCollector
from volcano_monitor.watchdog.state.alerts import AlertBook, Transition
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.engine import describe_error, migrate
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.events import SchedulerNotes
from volcano_monitor.watchdog.state.gpu_idle import GpuIdleTracker
from volcano_monitor.watchdog.state.hypernodes import HyperNodeTable
from volcano_monitor.watchdog.state.ledger import Ledger
from volcano_monitor.watchdog.state.nodes import NodeTable
from volcano_monitor.watchdog.state.prices import PriceBook
from volcano_monitor.watchdog.state.rollups import UsageRecorder

__all__ = ["Intervals", "Watchdog"]

log = logging.getLogger(__name__)

DRAIN_SECONDS = 10.0  # at stop, how long the writer may take to store what the feeds delivered


class Watchdog:
    def __init__(self, settings: Settings, engine: Engine, api: client.ApiClient | None,
                 intervals: Intervals | None = None, clock: Callable[[], float] = time.time,
                 informer_backoff: tuple[float, float] = (0.5, 30.0), leader: Leader | None = None) -> None:
        self.settings, self.engine, self.clock = settings, engine, clock
        self.intervals = intervals or Intervals(checks=settings.detectors.check_interval_seconds,
                                                waste=settings.detectors.waste_interval_seconds,
                                                flush=settings.sources.flush_interval_seconds,
                                                rollup_bucket=settings.sources.rollup_seconds,
                                                heartbeat=settings.cluster.heartbeat_interval_seconds)
        self.index = ClusterIndex()
        self.histograms = HistogramBook(settings.recommendations)
        sources = settings.sources
        expected = min((src.interval_seconds for src in (sources.metrics_api, sources.prometheus) if src.enabled),
                       default=30.0)
        self.recorder = UsageRecorder(self.histograms, bucket_seconds=self.intervals.rollup_bucket,
                                      expected_interval_seconds=expected)
        found = settings.detectors
        self.notes = SchedulerNotes()  # the scheduler's latest Event per PodGroup: GangUnschedulable's reason
        # A finished run is judged once its last usage flush is surely in.
        # GPU idle seconds per job, from the Prometheus collector's DCGM rounds (a gap of 3 rounds adds nothing).
        self.gpu_idle = GpuIdleTracker(settings.gpu_idle, 3 * settings.sources.prometheus.interval_seconds)
        # Node detectors: Node objects and node usage go straight into a locked table (watchdog.state.nodes).
        self.nodes = NodeTable()
        # Expected starts of waiting jobs (a round every 30 s on a thread the CLI starts; every replica serves
        # /why): GangUnschedulable and QueueStarved say in their messages when the job should start.
        self.expected = ExpectedStarts(self.index, engine, self.nodes, clock=clock, ready=self.index_synced)
        queues = QueueDetector(found, expected=self.expected.get)
        # Cost: each pod priced by its node's labels (node pools, GPU models), applied as usage is integrated.
        self.recorder.prices = PriceBook(settings.costs, self.nodes.labels)
        self.stranded = GpuStrandedDetector(found.gpu_stranded, self.nodes, self.index) \
            if found.gpu_stranded.enabled else None
        self.hot = NodeHotDetector(found.node_hot, self.nodes, self.index) if found.node_hot.enabled else None
        self.node_metrics = NodeMetricsCollector(api) if self.hot is not None and api is not None \
            and found.node_hot.source == "node_metrics" else None
        self._node_informer: Informer[Any] | None = None
        # HyperNode fragmentation (/metrics, /why, GangUnschedulable): HyperNodes into their own locked table.
        self.hypernodes = HyperNodeTable()
        self.topology = TopologyView(self.nodes, self.hypernodes, self.index, found.gpu_stranded, clock=clock,
                                     leading=lambda: self.leader.is_leader())
        self.detectors = DetectorSet(failures=FailureDetector(found), queues=queues,
                                     gangs=GangDetector(found, self.notes, blocked=queues.blocked,
                                                        expected=self.expected.get,
                                                        topology=self.topology.verdict),
                                     waste=WasteDetector(found, settle_seconds=4 * self.intervals.flush,
                                                          live=self.index.live_run_uids,
                                                          synced=self.index_synced),
                                     gpu_idle=GpuIdleDetector(settings.gpu_idle, self.gpu_idle,
                                                              self.index.live_run_uids,
                                                              synced=self.index_synced),
                                     stranded=self.stranded, hot=self.hot, nodes=self.nodes,
                                     nodes_known=self._nodes_known,
                                     budget=BudgetDetector(settings.costs) if settings.costs.budgets else None,
                                     # the other clusters sharing the database (none: it raises nothing)
                                     fleet=ClusterStaleDetector(cluster_of(engine),
                                                                settings.cluster.stale_after_seconds))
        self.alerts = AlertBook()
        self.observer = Observer(self.index, self.detectors.failures, self.detectors.gangs, queues, self.notes,
                                 self.recorder, self.histograms, clock,
                                 unstored_seconds=2 * settings.leader_election.lease_duration_seconds + 30,
                                 node_allocatable=self.nodes.largest_allocatable)
        self.observer.sample_consumers.append(self._gpu_samples)
        if self.hot is not None:  # which pods use a hot node (NodeHot)
            self.observer.sample_consumers.append(lambda _, samples: self.nodes.add_samples(samples))
            self.observer.pod_gone.append(self.nodes.forget_pod)
        self.leader: Leader = leader or AlwaysLeader().start()
        self.stats = WorkerStats()
        # Notifications: the writer puts alert changes into the outbox in the same transaction as the
        # change itself; the notifier thread (on the leader) makes and sends the messages.
        self.outbox = Outbox(settings.notifications, settings.grafana_url)
        self.notifier = Notifier(self.outbox, engine, settings.notifications.delivery, leader, clock)
        self.tasks = Tasks(settings, engine, clock, self.index, self.detectors, self.alerts, self.recorder,
                           self.histograms, self.outbox, self.notifier, self.stats)
        self.tasks.identity = str(getattr(self.leader, "identity", None) or self.tasks.identity)  # the heartbeat's
        self.writer = Writer(engine, self.observer, self.tasks, self.alerts, self.histograms, self.recorder,
                             self.leader, self.intervals, settings.retention, clock, self.stats,
                             feeds_synced=lambda: feeds.essential_synced(self.informers),
                             fed_by_hand=lambda: not self.informers)
        self._threads: list[threading.Thread] = []  # the feeds' and loops' threads, stopped by _feeds_stop
        self._feeds_stop = threading.Event()
        self._writer_thread: threading.Thread | None = None
        self.informers: list[Informer[Any]] = []
        if api is not None:
            self.informers = feeds.informers(api, settings, self.notes, self.writer.enqueue, informer_backoff)
            # Nodes feed the node detectors, prices by node and the HyperNode fragmentation view (whose
            # HyperNode informer is optional: idle before Volcano v1.12).
            self._node_informer = feeds.node_informer(api, self.nodes.on_node, informer_backoff)
            self.informers.append(self._node_informer)
            self.informers.append(feeds.hypernode_informer(api, self.hypernodes.on_hypernode, informer_backoff))
        self.collectors, self._sources = feeds.usage_sources(settings, api, self.index.pod_info)
        prom = settings.sources.prometheus
        self.backfiller = Backfiller(prom, settings.recommendations, engine, self.histograms, clock=clock) \
            if prom.backfill.enabled else None
        self.tasks.backfiller = self.backfiller

    @property
    def ledger(self) -> Ledger:
        return self.tasks.ledger

    @property
    def transitions(self) -> list[Transition]:
        return self.tasks.transitions

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> Watchdog:
        migrate(self.engine)
        stop = self._feeds_stop
        self._writer_thread = threading.Thread(target=self.writer.run, name="watchdog-worker", daemon=True)
        self._writer_thread.start()
        self._spawn("watchdog-retention", functools.partial(
            retention_loop, self.engine, self.settings, self.leader.is_leader, stop, self.clock))
        self.notifier.start()
        for name, interval, source in self._sources:
            self._spawn(f"collector-{name}", functools.partial(
                feeds.poll_usage, name, interval, source, self.collectors[name], leading=self.leader.is_leader,
                enqueue=self.writer.enqueue, stop=stop, clock=self.clock))
        if self.node_metrics is not None:
            self._spawn("collector-node-metrics", functools.partial(
                feeds.poll_node_metrics, self.node_metrics, self.nodes,
                self.settings.detectors.node_hot.interval_seconds, leading=self.leader.is_leader, stop=stop,
                clock=self.clock))
        if self.backfiller is not None:
            self._spawn("watchdog-backfill", functools.partial(
                backfill_loop, self.backfiller, self.settings.sources.prometheus.backfill.interval_seconds,
                lambda: self.writer.leading and self.leader.is_leader() and (self.index_synced() or not self.informers),
                lambda: live_workloads(self.index), functools.partial(self.writer.enqueue, BACKFILL, ""), stop))
        for informer in self.informers:
            informer.start()
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop the feeds first, then let the writer store what they delivered (an event observed but
        dropped at shutdown could be lost for good: a relist shows states, not the transitions that
        raised JobRetrying or PodOOMKilled), then stop the writer and flush what it holds."""
        self._feeds_stop.set()
        for informer in self.informers:
            informer.stop()
        for thread in self._threads:
            thread.join(10)
        if not self.writer.drain(DRAIN_SECONDS):
            log.warning("stopping with %d queued events not stored (the database is slow or down)",
                        self.writer.work.unfinished_tasks)
        self.writer.stop.set()
        if self._writer_thread is not None:
            self._writer_thread.join(10)
        self.notifier.stop()
        if self.backfiller is not None:
            self.backfiller.close()
        if not self.writer.leading:
            return  # a follower holds nothing to store
        try:  # what the writer holds in memory (the open usage bucket, histogram changes)
            with Session(self.engine) as session, session.begin():
                now = datetime.fromtimestamp(self.clock(), UTC)
                self.recorder.flush(session, now, final=True)
                self.histograms.flush(session, now)
        except SQLAlchemyError as exc:
            self.histograms.flush_failed()
            log.error("final flush failed: %s", describe_error(exc))

    def ready(self) -> bool:
        return self.writer.started.is_set() and feeds.essential_synced(self.informers)

    def idle(self) -> bool:
        """Nothing queued (tests wait for this before looking at the database)."""
        return self.writer.work.unfinished_tasks == 0

    def index_synced(self) -> bool:
        """The writer has observed every informer's first list: the index knows all queues, so a job's queue
        missing from it is really missing (`/api/v1/jobs/{uid}/why`). `ready` is earlier: synced informers
        may still have their lists queued for the writer."""
        return self.writer.observed_sync.is_set()

    def request_made(self) -> None:
        """The API stored a request (resolve an alert): carry it out now rather than at the next interval."""
        self.writer.requested.set()

    def apply(self, batch: list[Item], periodic: list[str]) -> None:
        """Observe and store a batch on the caller's thread, as the writer does (replay tests drive this)."""
        self.writer.apply(batch, periodic)

    def enqueue(self, what: str, event_type: str, obj: Any) -> None:
        self.writer.enqueue(what, event_type, obj)

    def pod_view(self, raw: Any) -> tuple[Pod, str]:
        return feeds.pod_view(self.settings.recommendations.workload_label, raw)

    def announce_capability(self, change: CapabilityChange) -> None:
        self.tasks.announce_capability(change)

    def _nodes_known(self) -> bool:
        """The Node informer and every other informer's first list are in: the node detectors may judge."""
        return self._node_informer is not None and self._node_informer.synced.is_set() and self.index_synced()

    def _gpu_samples(self, source: str, samples: Any) -> None:
        if source == "prometheus":  # the source with DCGM data
            self.gpu_idle.observe(samples, self.index.pod_info)

    def usage_source(self, name: str) -> feeds.UsageSource | None:
        """The running collector of that name (the API shows what it detected, e.g. the DCGM label style)."""
        return next((source for found, _, source in self._sources if found == name), None)
