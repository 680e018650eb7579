"""Expected starts on the running watchdog: the estimator (`findings.estimates`) over the watchdog's own
state, every `interval` seconds on a thread of its own, for `/metrics`, `/api/v1/jobs/{uid}/why` and the
job page.

Why a thread and not the writer: a round over 10,000 waiting jobs takes most of a second, which the writer
(every event of the cluster goes through it) should not wait for; the round only reads (the index under its
lock, the ledger in a read transaction) and every replica serves `/why`, leader or not. Run durations are read
from the ledger at most every `durations_ttl` seconds (finished runs of the last `DURATION_DAYS` days, the
newest `DURATION_ROWS`): they change slowly and the query is the expensive part. Between rounds the last
result is served: an estimate is at most `interval` seconds old.

Inputs, from the index: each queue; each job holding room (its bound pods' requests, started at its Job's
start or its first pod's); each waiting PodGroup (not yet holding pods) with its order key, its gang's
`minResources`, its Job's largest pod and `min_available_above_pods`. The nodes' allocatable comes from the
Node informer when the watchdog runs one (the node detectors or prices by node pool), else the estimate
uses root's `spec.deserved` (Volcano v1.12 writes the cluster's allocatable there) and skips node fit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.exposition import Family
from volcano_monitor.core.model import Queue, res_dict
from volcano_monitor.core.pending import MIN_AVAILABLE_ABOVE_PODS, group_waiting
from volcano_monitor.core.queueorder import sort_key
from volcano_monitor.watchdog.findings.estimates import (
    START_LATENCY_SECONDS,
    Amounts,
    Durations,
    Estimate,
    Running,
    Waiting,
    estimate,
)
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.state.nodes import NodeTable
from volcano_monitor.watchdog.state.workload import workload_name

log = logging.getLogger(__name__)

DURATION_DAYS = 30
DURATION_ROWS = 100_000
HOLDING_PHASES = frozenset({"Running", "Pending"})  # a pod bound to a node (Pending: starting) holds its room

LABELS = ("namespace", "job_name", "queue")
EXPECTED_START = Family("volcano_watchdog_job_expected_start_timestamp_seconds",
                        "Expected start of a waiting job, unix time in seconds: the queues played forward from the "
                        "last estimate, runs ending at their workload's median length from the ledger (docs/"
                        "watchdog.md#expected-start). Absent for a job that can never start as the cluster stands.",
                        LABELS)
EXPECTED_START_LOW = Family("volcano_watchdog_job_expected_start_low_timestamp_seconds",
                            "Early bound of the expected start, unix time in seconds: runs ending at the first "
                            "quartile of their lengths.", LABELS)
EXPECTED_START_HIGH = Family("volcano_watchdog_job_expected_start_high_timestamp_seconds",
                             "Late bound of the expected start, unix time in seconds: runs ending at the third "
                             "quartile of their lengths.", LABELS)
FAMILIES = (EXPECTED_START, EXPECTED_START_LOW, EXPECTED_START_HIGH)

Key = tuple[str, str]  # (namespace, job name)


def load_durations(session: Session, now: float) -> Durations:
    """Lengths of the ledger's finished runs (newest first, bounded), for `Durations`."""
    since = datetime.fromtimestamp(now, UTC) - timedelta(days=DURATION_DAYS)
    rows = session.execute(
        select(JobRun.namespace, JobRun.workload, JobRun.queue, JobRun.started_at, JobRun.finished_at)
        .where(JobRun.finished_at.is_not(None), JobRun.started_at.is_not(None), JobRun.finished_at >= since)
        .order_by(JobRun.finished_at.desc()).limit(DURATION_ROWS)).all()
    return Durations.from_runs((ns, workload, queue, (finished - started).total_seconds())
                               for ns, workload, queue, started, finished in rows
                               if started is not None and finished is not None)


def snapshot(index: ClusterIndex, now: float) -> tuple[dict[str, Queue], list[Running], list[Waiting]]:
    """The estimator's inputs from the index (its lock held briefly): queues, running and waiting jobs."""
    with index.lock:
        queues = dict(index.queues)
        holding: dict[Key, dict[str, float]] = {}
        first_start: dict[Key, float] = {}
        queue_of: dict[Key, str] = {}
        for pod in index.pods.values():
            if not pod.node_name or pod.phase not in HOLDING_PHASES or not pod.podgroup:
                continue
            key = (pod.namespace, pod.podgroup)
            held = holding.setdefault(key, {})
            for name, amount in pod.requests:
                held[name] = held.get(name, 0.0) + amount
            if pod.start_time is not None:
                first_start[key] = min(first_start.get(key, pod.start_time), pod.start_time)
            if pod.queue:
                queue_of[key] = pod.queue
        running: list[Running] = []
        waiting: list[Waiting] = []
        for key, group in index.group_views.items():
            job = index.jobs.get(index.job_uids.get((group.namespace, group.owner_name), "")) \
                if group.owner_kind == "Job" else None
            name = group.owner_name or group.name
            workload = index.job_workloads.get((group.namespace, name)) or workload_name(name)
            if key in holding:
                started = job.start_time if job is not None and job.start_time is not None else \
                    first_start.get(key, group.creation_timestamp or now)
                running.append(Running(group.namespace, name, group.queue or queue_of.get(key, ""), workload,
                                       started, holding[key]))
                continue
            if not group_waiting(group):
                continue
            largest: Amounts = {}
            never = ""
            if job is not None:
                pods = sum(task.replicas for task in job.tasks)
                never = MIN_AVAILABLE_ABOVE_PODS if job.min_available > pods else ""
                biggest = max(job.tasks, key=lambda t: sum(res_dict(t.requests).values()), default=None)
                largest = res_dict(biggest.requests) if biggest is not None else {}
            waiting.append(Waiting(group.uid, group.namespace, name, group.queue, workload,
                                   sort_key(group, index.priorities.value(group.priority_class)),
                                   res_dict(group.min_resources), largest, group.phase == "Inqueue", never))
    return queues, running, waiting


class ExpectedStarts:
    """The latest estimate per waiting job, refreshed by `run` (its own thread) or `refresh` (tests)."""

    def __init__(self, index: ClusterIndex, engine: Engine | None, nodes: NodeTable | None = None,
                 clock: Callable[[], float] = time.time, interval: float = 30.0, durations_ttl: float = 300.0,
                 ready: Callable[[], bool] = lambda: True) -> None:
        """`ready`: the index holds every informer's first list (before, a queue not seen yet would make its
        jobs `queue_missing`)."""
        self.index, self.engine, self.nodes, self.clock, self.ready = index, engine, nodes, clock, ready
        self.interval, self.durations_ttl = interval, durations_ttl
        self.durations = Durations()
        self.durations_at: float | None = None
        self.lock = threading.Lock()
        self.estimates: dict[Key, tuple[str, Estimate]] = {}  # (namespace, job) -> (queue, estimate)
        self.computed_at: float | None = None
        self.round_seconds = 0.0
        self.stop = threading.Event()

    def refresh(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        if self.engine is not None and (self.durations_at is None or now - self.durations_at >= self.durations_ttl):
            try:
                with Session(self.engine) as session:
                    self.durations = load_durations(session, now)
                self.durations_at = now
            except SQLAlchemyError as exc:  # keep the last durations; the next round tries again
                log.warning("expected starts: run durations unreadable (%s)", type(exc).__name__)
        began = time.perf_counter()
        queues, running, waiting = snapshot(self.index, now)
        nodes = [res_dict(n.allocatable) for n in self.nodes.nodes() if n.ready and not n.unschedulable] \
            if self.nodes is not None else []
        found = estimate(now, queues, nodes, running, waiting, self.durations, start_latency=START_LATENCY_SECONDS)
        result = {(w.namespace, w.name): (w.queue, found[w.uid]) for w in waiting}
        with self.lock:
            self.estimates, self.computed_at = result, now
            self.round_seconds = time.perf_counter() - began

    def get(self, namespace: str, job_name: str) -> Estimate | None:
        with self.lock:
            found = self.estimates.get((namespace, job_name))
        return found[1] if found is not None else None

    def run(self) -> None:
        """The thread's loop: a round, then wait `interval` (a failed round is logged, not fatal)."""
        while not self.stop.is_set():
            if not self.ready():
                self.stop.wait(1.0)
                continue
            try:
                self.refresh()
            except Exception:  # the estimate is advisory: the watchdog goes on without it
                log.exception("expected starts: round failed")
            self.stop.wait(self.interval)

    def render_metrics(self) -> str:
        with self.lock:
            items = sorted(self.estimates.items())
        lines: tuple[list[str], list[str], list[str]] = ([], [], [])
        for (namespace, job_name), (queue, est) in items:
            if est.start is None:
                continue
            labels = (namespace, job_name, queue)
            for out, family, value in zip(lines, FAMILIES, (est.start, est.low, est.high), strict=True):
                if value is not None:
                    out.append(family.line(labels, value))
        return "".join(family.header + "".join(out) for family, out in zip(FAMILIES, lines, strict=True))
