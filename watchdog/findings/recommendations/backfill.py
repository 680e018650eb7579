"""Usage history from Prometheus for recommendations (`sources.prometheus.backfill`): on the first day
of an install (or of a new workload) the histograms are empty and every recommendation has confidence
0, while Prometheus usually holds weeks of cAdvisor history. The back-fill reads it once per workload.

How, per batch of `batch_workloads` workloads (found among the live pods, watchdog.state.cluster):
- Memory: each `recommendations.memory_interval_hours` interval's peak per container, one range
  query `max_over_time(container_memory_working_set_bytes[interval])` evaluated at the intervals' ends
  (and one instant query for the interval still open at the end of the range).
- CPU: `rate(container_cpu_usage_seconds_total[rate_window])` at every `step_seconds`, in range
  queries of at most `chunk_hours` each. One point stands for step/60 one-a-minute samples (CPU weight
  and sample count, `HistogramBook.add_usage(count=...)`), the interval's peak goes with it.
- Both select the batch's pods by one pod-name regex (watchdog.findings.recommendations.backfill_queries), never one
  query per pod; label values are escaped.
The points go, per container and in time order, through what `HistogramBook.add_usage` does for the
live path (`add_usage_series`: the same histogram operations, checked in one pass), into a book of
the batch's own (built on the back-fill thread); only history older than each container's first live
sample is read. The worker then merges that book under the live one
(`HistogramBook.merge_older`), flushes the histograms and records the workloads in
`workload_backfills`, all in one transaction.

Why it cannot count twice: the thread runs on the leader only and skips recorded workloads; the worker
checks the records again inside the transaction (a second replica, a restart, a retry), and the
unique key fails a racing writer. A transaction that rolls back puts the live book back as it was
before the merge (`rolled_back`), so the retry merges once.

Not back-filled: workloads named by `recommendations.workload_label` (their pods' names do not say
which workload they belong to), and GPU utilisation (the histograms hold CPU and memory only).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from volcano_monitor.core.exposition import COUNTER, Family
from volcano_monitor.watchdog.findings.recommendations.backfill_queries import (
    Attributor,
    Workload,
    batch_selector,
    cpu_range_query,
    memory_peak_query,
)
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook, history_days
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.sources.prometheus import QueryError
from volcano_monitor.watchdog.sources.settings import PrometheusSource
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.models import WorkloadBackfill, WorkloadHistogram

log = logging.getLogger(__name__)

BACKFILL_WORKLOADS = Family("volcano_watchdog_backfill_workloads_total",
                            "Workloads whose recommendation history this replica back-filled from Prometheus "
                            "(sources.prometheus.backfill; recorded, never twice).", (), COUNTER)
BACKFILL_SAMPLES = Family("volcano_watchdog_backfill_samples_total",
                          "Usage samples (one-a-minute equivalents) the back-fill added to the histograms.", (),
                          COUNTER)
BACKFILL_ERRORS = Family("volcano_watchdog_backfill_query_errors_total",
                         "Back-fill queries Prometheus did not answer usefully, by cause (connection, http_<code>, "
                         "query, decode); the next pass tries those workloads again.", ("cause",), COUNTER)


MEMORY_POINTS_PER_QUERY = 1000
Key = tuple[str, str, str, str]  # namespace, workload, task, container
Series = tuple[str, str, str]  # namespace, pod, container


@dataclass
class BackfillBatch:
    """What one batch read from Prometheus, handed from the back-fill thread to the worker."""

    workloads: list[Workload]
    book: HistogramBook
    range_start: float
    range_end: float
    samples: Counter[tuple[str, str]] = field(default_factory=Counter)  # per (namespace, workload)
    containers: Counter[tuple[str, str]] = field(default_factory=Counter)
    stored: threading.Event = field(default_factory=threading.Event)
    merged: int = 0  # workloads the worker merged (0: all were back-filled already)


def _matrix(data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or data.get("resultType") not in ("matrix", "vector") or \
            not isinstance(data.get("result"), list):
        raise QueryError("decode", "expected a matrix or vector result")
    result: list[dict[str, Any]] = data["result"]
    return result


def _points(series: dict[str, Any]) -> tuple[Series, list[tuple[float, float]]] | None:
    """(namespace, pod, container) and the finite, non-negative points of one series."""
    labels = series.get("metric")
    raw = series.get("values") if "values" in series else [series.get("value")]
    if not isinstance(labels, dict) or not isinstance(raw, list):
        return None
    key = (labels.get("namespace"), labels.get("pod"), labels.get("container"))
    if not all(isinstance(part, str) and part for part in key):
        return None
    points = []
    for point in raw:
        try:
            ts, value = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(value) and value >= 0:
            points.append((ts, value))
    return (key[0], key[1], key[2]), points  # type: ignore[return-value]


def live_workloads(index: ClusterIndex) -> list[Workload]:
    """The workloads of the live pods with the tasks they run. Left out: pods whose workload a label names
    (their names do not say it) and pods without a task (their names have no task part to match)."""
    with index.lock:
        names = [key for key in index.pods if key not in index.pod_workloads]
    tasks: dict[tuple[str, str], set[str]] = {}
    for namespace, pod in names:
        info = index.pod_info(namespace, pod)
        if info is not None and info.workload and info.task:
            tasks.setdefault((namespace, info.workload), set()).add(info.task)
    return [Workload(ns, name, tuple(sorted(found))) for (ns, name), found in sorted(tasks.items())]


class Backfiller:
    """Reads history from Prometheus (on its own thread) and merges it (on the worker, `store`)."""

    def __init__(self, source: PrometheusSource, recommendations: Recommendations, engine: Engine,
                 book: HistogramBook, *, client: httpx.Client | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = source.backfill
        self.source = source
        self.recommendations = recommendations
        self.engine = engine
        self.book = book  # the live book: merged into by the worker only; read here for first samples
        self.clock = clock
        headers = {"Accept": "application/json"}
        if source.bearer_token is not None:
            headers["Authorization"] = f"Bearer {source.bearer_token.get_secret_value()}"
        self.headers = headers
        self.base = source.url.rstrip("/") + "/api/v1/"
        self.client = client if client is not None else httpx.Client(timeout=source.timeout_seconds)
        self.interval = recommendations.memory_interval_hours * 3600.0
        self._undo: list[dict[Key, Any]] = []  # live entries before the merges not committed yet
        # Counters for self-metrics and tests.
        self.queries = 0
        self.errors: Counter[str] = Counter()
        self.workloads_done = 0
        self.passes = 0
        self.samples_added = 0

    def close(self) -> None:
        self.client.close()

    # ---- Prometheus -------------------------------------------------------------------------------

    def _query(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        self.queries += 1
        try:
            response = self.client.post(self.base + path, data=params, headers=self.headers,
                                        timeout=self.source.timeout_seconds)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise QueryError("connection", f"cannot reach Prometheus at {self.base}: {exc!r}") from exc
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", "") if isinstance(body, dict) else "not a JSON object"
            raise QueryError(f"http_{response.status_code}" if response.status_code >= 300 else "query",
                             f"Prometheus answered {response.status_code}: {str(error)[:300]}")
        return _matrix(body.get("data"))

    def _range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return self._query("query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                           "step": f"{step:.3f}"})

    def _memory_peaks(self, selector: str, start: float, end: float) -> dict[tuple[Series, float], float]:
        """Peak working set per container and memory interval (index k: [k I, (k+1) I)) over (start, end]."""
        interval = self.interval
        first, last = math.floor(start / interval), math.floor(end / interval)
        full = [(k + 1) * interval for k in range(first, last + 1) if (k + 1) * interval <= end]
        peaks: dict[tuple[Series, float], float] = {}

        def keep(result: list[dict[str, Any]]) -> None:
            for series in result:
                found = _points(series)
                if found is None:
                    continue
                for ts, value in found[1]:
                    slot = (found[0], ts // interval)
                    if value > peaks.get(slot, -1.0):
                        peaks[slot] = value

        query = memory_peak_query(selector, interval)
        for i in range(0, len(full), MEMORY_POINTS_PER_QUERY):
            ends = full[i:i + MEMORY_POINTS_PER_QUERY]
            # Evaluated a millisecond before each interval's end: a sample exactly at the end is the next one's.
            keep(self._range(query, ends[0] - 0.001, ends[-1] - 0.001, interval))
        open_start = last * interval  # the interval still open at the end of the range (`end` is in it)
        keep(self._query("query", {"query": memory_peak_query(selector, max(end - open_start, 0.001)),
                                   "time": f"{end:.3f}"}))
        return peaks

    def fetch(self, workloads: Sequence[Workload], now: float) -> BackfillBatch:
        """Read the batch's history from Prometheus into a book of its own (raises QueryError)."""
        settings = self.settings
        step = float(settings.step_seconds)
        end = math.floor(now / step) * step
        start = end - settings.days * 86400.0
        batch = BackfillBatch(list(workloads), HistogramBook(self.recommendations), start, end)
        attribute = Attributor(workloads)
        selector = batch_selector(workloads)
        peaks = self._memory_peaks(selector, start, end)
        count = max(1, round(step / 60.0))
        per_chunk = max(1, int(settings.chunk_hours * 3600.0 // step))
        cpu = cpu_range_query(selector, self.source.rate_window)
        first_live: dict[Key, float] = {}
        keys_seen: set[Key] = set()
        t = start + step
        while t <= end:
            chunk_end = min(end, t + (per_chunk - 1) * step)
            points: dict[Key, list[tuple[float, float, float]]] = {}
            for series in self._range(cpu, t, chunk_end, step):
                found = _points(series)
                owner = attribute(found[0][0], found[0][1]) if found is not None else None
                if found is None or owner is None:
                    continue
                (namespace, _pod, container), values = found
                key = (namespace, owner[0], owner[1], container)
                if key not in first_live:
                    live = self.book.first_sample_ts(key)
                    first_live[key] = math.inf if live is None else live
                cut, where, interval = first_live[key], found[0], self.interval
                into = points.setdefault(key, [])
                for ts, cores in values:
                    memory = peaks.get((where, ts // interval))
                    if memory is not None and ts < cut:
                        into.append((ts, cores, memory))
            for key, rows in points.items():  # in time order per container, as the live path feeds them
                rows.sort()
                added = batch.book.add_usage_series(*key, rows, count=count)
                if added:
                    batch.samples[key[:2]] += count * added
                    keys_seen.add(key)
            t = chunk_end + step
        for key in keys_seen:
            batch.containers[key[:2]] += 1
        return batch

    # ---- which workloads ----------------------------------------------------------------------------

    def candidates(self, live: Iterable[Workload], session: Session) -> list[Workload]:
        """The live workloads not back-filled yet whose every container has less stored history than
        `min_history_days` (none at all when that is 0)."""
        wanted = {(w.namespace, w.name): w for w in live}
        if not wanted:
            return []
        namespaces = sorted({ns for ns, _ in wanted})
        done = {(ns, name) for ns, name in session.execute(
            select(WorkloadBackfill.namespace, WorkloadBackfill.workload)
            .where(WorkloadBackfill.namespace.in_(namespaces)))}
        longest: dict[tuple[str, str], float] = {}
        table = WorkloadHistogram
        for row in session.execute(select(table.namespace, table.workload, table.samples, table.first_sample_at,
                                          table.last_sample_at).where(table.namespace.in_(namespaces))):
            key = (row.namespace, row.workload)
            if key in wanted:
                days = history_days(int(row.samples or 0), row.first_sample_at and row.first_sample_at.timestamp(),
                                    row.last_sample_at and row.last_sample_at.timestamp())
                longest[key] = max(longest.get(key, 0.0), days)
        minimum = self.settings.min_history_days
        return [w for key, w in sorted(wanted.items()) if key not in done
                and (key not in longest if minimum <= 0 else longest.get(key, 0.0) < minimum)]

    # ---- on the worker, in its transaction ----------------------------------------------------------

    def store(self, batch: BackfillBatch, session: Session, now: datetime) -> int:
        """Merge the batch's history into the live book, flush the histograms and record the workloads,
        in the caller's transaction; workloads recorded already are skipped. Returns workloads merged."""
        names = {(w.namespace, w.name) for w in batch.workloads}
        done = {(ns, name) for ns, name in session.execute(
            select(WorkloadBackfill.namespace, WorkloadBackfill.workload)
            .where(WorkloadBackfill.namespace.in_(sorted({ns for ns, _ in names})))) if (ns, name) in names}
        todo = names - done
        if not todo:
            return 0
        self._undo.append(self.book.snapshot([key for key in batch.book.key_list() if key[:2] in todo]))
        self.book.merge_older(batch.book, todo)
        self.book.flush(session, now)
        start, end = datetime.fromtimestamp(batch.range_start, UTC), datetime.fromtimestamp(batch.range_end, UTC)
        session.add_all(WorkloadBackfill(namespace=ns, workload=name, range_start=start, range_end=end,
                                         containers=batch.containers[(ns, name)], samples=batch.samples[(ns, name)],
                                         created_at=now) for ns, name in sorted(todo))
        session.flush()  # a racing replica's row fails here, inside the transaction
        batch.merged = len(todo)
        log.info("back-filled %d workloads from Prometheus (%d samples)", len(todo),
                 sum(batch.samples[key] for key in todo))
        return len(todo)

    def committed(self, batches: Iterable[BackfillBatch]) -> None:
        """The worker's transaction holding `store` committed."""
        self._undo.clear()
        for batch in batches:
            self.workloads_done += batch.merged
            self.samples_added += sum(batch.samples.values()) if batch.merged else 0
            batch.stored.set()

    def rolled_back(self) -> None:
        """The transaction holding `store` rolled back: the live book goes back to before the merge."""
        for before in reversed(self._undo):
            self.book.restore(before)
        self._undo.clear()

    def render_metrics(self) -> str:
        """The back-fill's families for the watchdog's /metrics (counters of this replica)."""
        errors = [BACKFILL_ERRORS.line((cause,), n) for cause, n in sorted(self.errors.items())]
        return (BACKFILL_WORKLOADS.header + BACKFILL_WORKLOADS.line((), self.workloads_done)
                + BACKFILL_SAMPLES.header + BACKFILL_SAMPLES.line((), self.samples_added)
                + BACKFILL_ERRORS.header + "".join(errors))

    # ---- the thread ---------------------------------------------------------------------------------

    def run_once(self, live: Iterable[Workload], hand_over: Callable[[BackfillBatch], None],
                 stop: threading.Event, wait_seconds: float = 120.0) -> int:
        """One pass: the candidates, batch by batch, each handed to the worker and waited for (so one
        batch's samples are in memory at a time). Returns batches handed over."""
        with Session(self.engine) as session:
            todo = self.candidates(live, session)
        handed = 0
        size = self.settings.batch_workloads
        for i in range(0, len(todo), size):
            if stop.is_set():
                break
            try:
                batch = self.fetch(todo[i:i + size], self.clock())
            except QueryError as exc:
                self.errors[exc.cause] += 1
                log.warning("back-fill from Prometheus failed (%s); the next pass tries again", exc)
                if exc.cause == "connection":
                    break
                continue
            hand_over(batch)
            handed += 1
            if not batch.stored.wait(wait_seconds):
                log.warning("back-fill batch not stored within %gs; the next pass looks again", wait_seconds)
        self.passes += 1
        return handed
