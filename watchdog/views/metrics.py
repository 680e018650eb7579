"""`volcano_watchdog_*` on the watchdog's /metrics: alerts, recommendations, job efficiency, waste per
queue, collector health, readiness. Text format 0.0.4, written with the exporter's `Family`, which
escapes label values and refuses the `job`/`instance` labels Prometheus owns.

Everything from the database is aggregated in SQL (a GROUP BY for alerts and waste) or streamed and
capped (efficiency: the newest runs of the last day, up to `EFFICIENCY_MAX_JOBS` names), so a scrape
costs little however long the history. When the database cannot be read, the health families are still served and
`volcano_watchdog_database_up` says 0.

There is no counter of resolved alerts: retention deletes old resolved rows, so a count of them would
go down, which a counter must never do. The cost counters can be counters because retention moves the
cost of the ledger rows it removes into `cost_retired` in the same transaction (watchdog.state.prices):
they sum the whole ledger by queue at every scrape (one GROUP BY over job_runs).
"""

from __future__ import annotations

import io
import logging
import platform
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Generic, TypeVar

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import InstrumentedAttribute, Session

from volcano_monitor.core.exposition import COUNTER, Family
from volcano_monitor.core.gpushare import PROBLEM_KINDS, share_problems
from volcano_monitor.core.version import version
from volcano_monitor.watchdog.actions.capability.metrics import CAPABILITY_TARGET, CAPABILITY_UPDATES
from volcano_monitor.watchdog.actions.gpu_idle.metrics import (
    DCGM_LABEL_STYLE,
    GPU_IDLE_ABORTS,
    JOB_GPU_IDLE,
    JOB_GPU_STATE,
)
from volcano_monitor.watchdog.actions.notify.outbox import outbox_counts
from volcano_monitor.watchdog.actions.oomscale.api import OOM_RESUBMISSIONS
from volcano_monitor.watchdog.findings.detectors.stranded import NODE_STRANDED_GPUS
from volcano_monitor.watchdog.findings.expected import FAMILIES as EXPECTED_START
from volcano_monitor.watchdog.findings.recommendations import book as recommend
from volcano_monitor.watchdog.findings.recommendations.backfill import (
    BACKFILL_ERRORS,
    BACKFILL_SAMPLES,
    BACKFILL_WORKLOADS,
)
from volcano_monitor.watchdog.findings.topology import FAMILIES as HYPERNODE_TOPOLOGY
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.ledger import ended_at
from volcano_monitor.watchdog.state.prices import CostTotals, queue_cost_totals

if TYPE_CHECKING:
    from volcano_monitor.watchdog.findings.recommendations.book import Recommendation
    from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
    from volcano_monitor.watchdog.views.health import Health

log = logging.getLogger(__name__)
T = TypeVar("T")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
EFFICIENCY_WINDOW = timedelta(hours=24)
EMPTY_TTL_SECONDS = 15.0
UNRESOLVED = ("pending", "firing")
WORKLOAD = ("namespace", "workload", "task", "container")
C = ("collector",)

ALERTS = Family("volcano_watchdog_alerts", "Unresolved alerts (pending or firing) by kind, severity and state.",
                ("kind", "severity", "state"))
REC_CPU = Family("volcano_watchdog_recommendation_cpu_cores",
                 "Recommended CPU request in cores (bound: target, lower, upper).", (*WORKLOAD, "bound"))
REC_MEMORY = Family("volcano_watchdog_recommendation_memory_bytes",
                    "Recommended memory request in bytes (bound: target, lower, upper).", (*WORKLOAD, "bound"))
REC_CONFIDENCE = Family("volcano_watchdog_recommendation_confidence",
                        "Confidence of the recommendation, 0..1, growing with the length of the history.", WORKLOAD)
EFFICIENCY_MAX_JOBS = 5000  # series of volcano_watchdog_job_efficiency_ratio, by job name (the help says so)
JOB_EFFICIENCY = Family("volcano_watchdog_job_efficiency_ratio",
                        "Used / requested resource-seconds of job runs finished in the last 24 h (the latest run "
                        "per job name, for the 5,000 names that finished last; absent when nothing of the resource "
                        "was requested).",
                        ("namespace", "job_name", "queue", "resource"))
WASTED_CORE = Family("volcano_watchdog_queue_wasted_core_seconds",
                     "Requested minus used CPU core-seconds of the queue's runs finished in the last 24 h "
                     "(runs that used more than they requested count 0).", ("queue",))
WASTED_MEMORY = Family("volcano_watchdog_queue_wasted_memory_byte_seconds",
                       "Requested minus used memory byte-seconds of the queue's runs finished in the last 24 h.",
                       ("queue",))
WASTED_GPU = Family("volcano_watchdog_queue_wasted_gpu_seconds",
                    "Requested minus used GPU-seconds (utilisation-weighted) of the queue's runs finished in the "
                    "last 24 h.", ("queue",))
QUEUE_COST = Family("volcano_watchdog_queue_cost_total",
                    "Cost of the queue's runs, every run the ledger holds or held, in `currency` at the configured "
                    "prices (docs/cost.md), by basis: requested (what the runs held), used, idle (requested - used, "
                    "per resource, never below 0). Grows as the runs run; a parent queue's children are their own "
                    "series (sum them in PromQL).", ("queue", "basis", "currency"), COUNTER)
COLLECTOR_ENABLED = Family("volcano_watchdog_collector_enabled", "1 when the usage collector is configured on.", C)
COLLECTOR_UP = Family("volcano_watchdog_collector_up",
                      "1 when the enabled collector has succeeded (within 3 intervals, when its interval is known).",
                      C)
COLLECTOR_LAST_SUCCESS = Family("volcano_watchdog_collector_last_success_timestamp_seconds",
                                "Unix time of the collector's last successful round.", C)
COLLECTOR_ERRORS = Family("volcano_watchdog_collector_errors_total", "Failed collection rounds or responses.", C,
                          COUNTER)
COLLECTOR_SAMPLES = Family("volcano_watchdog_collector_samples_total", "Usage samples collected.", C, COUNTER)
GPU_SHARE_PROBLEMS = Family(
    "volcano_watchdog_gpu_share_problems_total",
    "Bad input met while computing physical GPUs of shared-GPU requests and nodes (docs/gpu-sharing.md), by kind: "
    + ", ".join(PROBLEM_KINDS) + ". A fallback was used (logged once per kind).", ("problem",), COUNTER)
DATABASE_UP = Family("volcano_watchdog_database_up", "1 when this scrape could read the database.", ())
READY = Family("volcano_watchdog_ready", "1 when the watchdog is ready (caches synced, database migrated).", ())
BUILD_INFO = Family("volcano_watchdog_build_info", "Version of the watchdog (1).", ("version", "python_version"))
LEADER = Family("volcano_watchdog_leader",
                "1 when this replica holds the leader Lease (sends messages, patches queues); 1 when leader "
                "election is off.", ())
NOTIFICATIONS = Family("volcano_watchdog_notifications_total",
                       "Delivery attempts by receiver and outcome: sent, failed (will be retried), dead (gave up: "
                       "dead letter), uncertain (a crash between send and mark: not re-sent).",
                       ("receiver", "outcome"), COUNTER)
OUTBOX_PENDING = Family("volcano_watchdog_notification_outbox_pending",
                        "Messages waiting in the outbox (not yet delivered, not dead) by receiver.", ("receiver",))
OUTBOX_OLDEST = Family("volcano_watchdog_notification_outbox_oldest_age_seconds",
                       "Age of the oldest message waiting in the outbox, by receiver.", ("receiver",))
DEAD_LETTERS = Family("volcano_watchdog_notification_dead_letters",
                      "Messages that could not be delivered after every retry (kept, listed by the API).",
                      ("receiver",))


FAMILIES = (ALERTS, REC_CPU, REC_MEMORY, REC_CONFIDENCE, JOB_EFFICIENCY, WASTED_CORE, WASTED_MEMORY, WASTED_GPU,
            QUEUE_COST,
            COLLECTOR_ENABLED, COLLECTOR_UP, COLLECTOR_LAST_SUCCESS, COLLECTOR_ERRORS, COLLECTOR_SAMPLES,
            DATABASE_UP, GPU_SHARE_PROBLEMS, READY, BUILD_INFO, LEADER, NOTIFICATIONS, OUTBOX_PENDING, OUTBOX_OLDEST,
            DEAD_LETTERS,
            CAPABILITY_TARGET, CAPABILITY_UPDATES, OOM_RESUBMISSIONS, JOB_GPU_IDLE, JOB_GPU_STATE, GPU_IDLE_ABORTS,
            DCGM_LABEL_STYLE, NODE_STRANDED_GPUS, *HYPERNODE_TOPOLOGY, *EXPECTED_START,
            BACKFILL_WORKLOADS, BACKFILL_SAMPLES, BACKFILL_ERRORS)


def _gpu_share_problems() -> list[str]:
    """Every kind, 0 until met, so a rate() over the counter starts from the watchdog's start."""
    met = share_problems()
    return [GPU_SHARE_PROBLEMS.line((kind,), met.get(kind, 0)) for kind in PROBLEM_KINDS]


def _section(family: Family, lines: list[str]) -> str:
    return family.header + "".join(lines)


def _alerts(session: Session) -> str:
    rows = session.execute(select(Alert.kind, Alert.severity, Alert.state, func.count())
                           .where(Alert.state.in_(UNRESOLVED)).group_by(Alert.kind, Alert.severity, Alert.state)
                           .order_by(Alert.kind, Alert.severity, Alert.state))
    return _section(ALERTS, [ALERTS.line((kind, severity, state), count) for kind, severity, state, count in rows])


def _efficiency(session: Session, now: datetime) -> str:
    """One series per namespace/job name, the latest run speaking, for the `EFFICIENCY_MAX_JOBS` names that
    finished last: at 300k pods a day the 24 h window holds ~40k names, and a scrape (and the memory it
    takes to build) must not grow with that.

    The runs stream newest first and each line goes straight into one buffer; only the names already
    reported are held. Holding every row's rendered lines until a final sort by name was ~3 MB of small
    objects on every scrape, and such peaks on the scrape's thread, while the writer keeps allocating
    long-lived state, were what grew the watchdog's heap most in bench/soak.py. Prometheus does not need
    the series of a family in any order."""
    r = JobRun
    rows = session.execute(
        select(r.namespace, r.name, r.queue, r.cpu_core_seconds_used, r.cpu_core_seconds_requested,
               r.memory_byte_seconds_used, r.memory_byte_seconds_requested, r.gpu_seconds_used,
               r.gpu_seconds_requested)
        .where(ended_at() >= now - EFFICIENCY_WINDOW, ended_at() <= now).order_by(ended_at().desc(), r.id.desc())
        .execution_options(yield_per=500))
    reported: set[str] = set()  # "namespace/name": a namespace has no "/"
    out = io.StringIO()
    out.write(JOB_EFFICIENCY.header)
    for namespace, name, queue, cpu, cpu_req, mem, mem_req, gpu, gpu_req in rows:
        key = f"{namespace}/{name}"
        if key in reported:
            continue  # an earlier run of a name already reported
        reported.add(key)
        for resource, used, requested in (("cpu", cpu, cpu_req), ("memory", mem, mem_req), ("gpu", gpu, gpu_req)):
            if requested > 0:
                out.write(JOB_EFFICIENCY.line((namespace, name, queue, resource), used / requested))
        if len(reported) >= EFFICIENCY_MAX_JOBS:
            break
    return out.getvalue()


def _waste(session: Session, now: datetime) -> str:
    r = JobRun

    def wasted(requested: InstrumentedAttribute[float], used: InstrumentedAttribute[float]) -> ColumnElement[float]:
        return func.sum(case((requested > used, requested - used), else_=0.0))

    rows = session.execute(
        select(r.queue, wasted(r.cpu_core_seconds_requested, r.cpu_core_seconds_used),
               wasted(r.memory_byte_seconds_requested, r.memory_byte_seconds_used),
               wasted(r.gpu_seconds_requested, r.gpu_seconds_used))
        .where(ended_at() >= now - EFFICIENCY_WINDOW, ended_at() <= now).group_by(r.queue).order_by(r.queue))
    core, memory, gpu = [], [], []
    for queue, cpu_waste, memory_waste, gpu_waste in rows:
        core.append(WASTED_CORE.line((queue,), float(cpu_waste or 0)))
        memory.append(WASTED_MEMORY.line((queue,), float(memory_waste or 0)))
        gpu.append(WASTED_GPU.line((queue,), float(gpu_waste or 0)))
    return _section(WASTED_CORE, core) + _section(WASTED_MEMORY, memory) + _section(WASTED_GPU, gpu)


def _costs(session: Session, costs: Costs, totals: CostTotals | None) -> str:
    if totals is None:
        totals = queue_cost_totals(session, costs)
    lines = [QUEUE_COST.line((queue, basis, costs.currency), amount)
             for queue, amounts in sorted(totals.items())
             for basis, amount in zip(("requested", "used", "idle"), amounts, strict=True)]
    return _section(QUEUE_COST, lines)


def _recommendations(recommendations: list[Recommendation]) -> str:
    cpu, memory, confidence = {}, {}, {}
    for r in recommendations:  # keyed, so a repeated key cannot become a duplicate series
        key = (r.namespace, r.workload, r.task, r.container)
        cpu[key] = "".join(REC_CPU.line((*key, bound), value) for bound, value in (
            ("target", r.cpu_target_cores), ("lower", r.cpu_lower_cores), ("upper", r.cpu_upper_cores)))
        memory[key] = "".join(REC_MEMORY.line((*key, bound), value) for bound, value in (
            ("target", r.memory_target_bytes), ("lower", r.memory_lower_bytes), ("upper", r.memory_upper_bytes)))
        confidence[key] = REC_CONFIDENCE.line(key, r.confidence)
    keys = sorted(cpu)
    return (_section(REC_CPU, [cpu[k] for k in keys]) + _section(REC_MEMORY, [memory[k] for k in keys])
            + _section(REC_CONFIDENCE, [confidence[k] for k in keys]))


def _collectors(health: Health, now: datetime) -> str:
    enabled, up, last, errors, samples = [], [], [], [], []
    try:
        collectors = health.collectors()
    except Exception as exc:  # the app's callback; a scrape must still answer
        log.warning("collector health unavailable (%s): %s", type(exc).__name__, exc)
        collectors = {}
    now_ts = now.timestamp()
    for name, c in sorted(collectors.items()):
        enabled.append(COLLECTOR_ENABLED.line((name,), int(c.enabled)))
        fresh = c.last_success is not None and (
            c.interval_seconds is None or now_ts - c.last_success <= 3 * c.interval_seconds)
        up.append(COLLECTOR_UP.line((name,), int(c.enabled and fresh)))
        if c.last_success is not None:
            last.append(COLLECTOR_LAST_SUCCESS.line((name,), c.last_success))
        errors.append(COLLECTOR_ERRORS.line((name,), c.errors))
        samples.append(COLLECTOR_SAMPLES.line((name,), c.samples))
    return (_section(COLLECTOR_ENABLED, enabled) + _section(COLLECTOR_UP, up)
            + _section(COLLECTOR_LAST_SUCCESS, last) + _section(COLLECTOR_ERRORS, errors)
            + _section(COLLECTOR_SAMPLES, samples))


def _callback(function: Callable[[], T], what: str, default: T) -> T:
    try:
        return function()
    except Exception as exc:  # the app's callback; a scrape must still answer
        log.warning("%s unavailable (%s): %s", what, type(exc).__name__, exc)
        return default


def _notifications(session: Session, health: Health, now: datetime, database_up: bool) -> str:
    outcomes: dict[tuple[str, str], int] = _callback(health.notifications, "notification counters", {})
    counts: dict[tuple[str, str], tuple[int, datetime | None]] = {}
    if database_up:
        try:
            counts = outbox_counts(session)
        except SQLAlchemyError as exc:
            session.rollback()
            log.warning("/metrics: outbox unreadable (%s)", type(exc).__name__)
    receivers = sorted({receiver for receiver, _ in outcomes} | {receiver for receiver, _ in counts})
    sent = [NOTIFICATIONS.line(key, outcomes[key]) for key in sorted(outcomes)]
    pending, oldest, dead = [], [], []
    for receiver in receivers:
        waiting = [counts[(receiver, state)] for state in ("pending", "sending") if (receiver, state) in counts]
        pending.append(OUTBOX_PENDING.line((receiver,), sum(n for n, _ in waiting)))
        times = [t for _, t in waiting if t is not None]
        oldest.append(OUTBOX_OLDEST.line((receiver,), max(0.0, (now - min(times)).total_seconds()) if times else 0))
        dead.append(DEAD_LETTERS.line((receiver,), counts.get((receiver, "dead"), (0, None))[0]))
    if not database_up:
        pending, oldest, dead = [], [], []
    return (_section(NOTIFICATIONS, sent) + _section(OUTBOX_PENDING, pending) + _section(OUTBOX_OLDEST, oldest)
            + _section(DEAD_LETTERS, dead))


class TtlCache(Generic[T]):
    """What /metrics reads from the whole history (recommendations, the cost totals), recomputed at most every
    `ttl_seconds`, one computation at a time: they cost seconds on a big history (the cost totals group every
    ledger row: 1.1 s at 200,000 runs on SQLite) and scrapes come every few. A failed computation keeps the last
    good value; an empty one (a fresh install) is looked at again soon rather than after the whole TTL."""

    def __init__(self, compute: Callable[[Session, datetime], T], ttl_seconds: float, what: str) -> None:
        self.compute = compute
        self.ttl = ttl_seconds
        self.what = what
        self.lock = threading.Lock()
        self.value: T | None = None
        self.computed_at: datetime | None = None

    def get(self, session: Session, now: datetime) -> T | None:
        with self.lock:
            at = self.computed_at
            ttl = self.ttl if self.value else min(self.ttl, EMPTY_TTL_SECONDS)
            if at is None or now < at or (now - at).total_seconds() >= ttl:
                try:
                    self.value = self.compute(session, now)
                except Exception as exc:  # a scrape keeps the last good value rather than failing
                    session.rollback()
                    log.warning("%s for /metrics failed (%s): %s", self.what, type(exc).__name__, exc)
                else:
                    self.computed_at = now
            return self.value


def recommendation_cache(settings: Recommendations, ttl_seconds: float) -> TtlCache[list[Recommendation]]:
    return TtlCache(lambda session, now: recommend.compute_recommendations(session, settings, now), ttl_seconds,
                    "recommendations")


def cost_totals_cache(costs: Costs, ttl_seconds: float) -> TtlCache[CostTotals]:
    return TtlCache(lambda session, _now: queue_cost_totals(session, costs), ttl_seconds, "cost totals")


def render_metrics(session: Session, health: Health, now: datetime,
                   recommendations: list[Recommendation] | None = None, costs: Costs | None = None,
                   cost_totals: CostTotals | None = None) -> bytes:
    """The whole /metrics body. `recommendations` None leaves their families out (not computed yet); `costs`:
    the prices of the cost counters (None: no prices); `cost_totals`: their values if already computed
    (`cost_totals_cache`), else they are computed here."""
    started = time.perf_counter()
    parts: list[str] = []
    try:
        parts += [_alerts(session), _efficiency(session, now), _waste(session, now),
                  _costs(session, costs or Costs(), cost_totals)]
        database_up = 1
    except SQLAlchemyError as exc:
        session.rollback()
        log.warning("/metrics: database unreadable (%s): %s", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        parts, database_up = [], 0
    if recommendations is not None:
        parts.append(_recommendations(recommendations))
    parts.append(_collectors(health, now))
    parts.append(_notifications(session, health, now, database_up == 1))
    parts.append(_callback(health.extra_metrics, "extra metrics", ""))
    try:
        ready = bool(health.ready())
    except Exception as exc:
        log.warning("readiness check failed (%s): %s", type(exc).__name__, exc)
        ready = False
    leader = _callback(health.leader, "leadership", False)
    parts += [_section(LEADER, [LEADER.line((), int(bool(leader)))]),
              _section(DATABASE_UP, [DATABASE_UP.line((), database_up)]),
              _section(GPU_SHARE_PROBLEMS, _gpu_share_problems()),
              _section(READY, [READY.line((), int(ready))]),
              _section(BUILD_INFO, [BUILD_INFO.line((version(), platform.python_version()), 1)])]
    log.debug("/metrics rendered in %.1f ms", (time.perf_counter() - started) * 1000)
    return "".join(parts).encode()
