"""The stored side of recommendations: rows of `workload_histograms` (histograms, counts, the container's
spec) to and from memory, and `compute_recommendations`, which the API, the web UI, /metrics and
`volcano-watchdog recommend` read. The in-memory book that writes them is watchdog.findings.recommendations.book."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import Text, func, select, type_coerce
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.recommendations.formulas import SAMPLES_PER_DAY, Estimate, recommend
from volcano_monitor.watchdog.findings.recommendations.policy import ContainerSpec, Recommendation, finish
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.state.db.models import WorkloadHistogram
from volcano_monitor.watchdog.state.histogram import DecayingHistogram, cpu_histogram, memory_histogram

log = logging.getLogger(__name__)
Key = tuple[str, str, str, str]


@dataclass
class Entry:
    cpu: DecayingHistogram
    memory: DecayingHistogram
    samples: int = 0
    first: float | None = None
    last: float | None = None
    window_end: float | None = None  # end of the open memory interval; its peak is in `memory` at this ts
    peak: float | None = None
    last_oom: float | None = None
    last_oom_memory: float = 0.0

    def estimate(self, settings: Recommendations, now_ts: float, samples_per_day: float) -> Estimate:
        return recommend(self.cpu, self.memory, settings, samples=self.samples, first_ts=self.first,
                         last_ts=self.last, now_ts=now_ts, last_oom_ts=self.last_oom,
                         last_oom_memory_bytes=self.last_oom_memory, samples_per_day=samples_per_day)


def to_ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def to_datetime(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


def _json(value: Any) -> Any:
    """Stored JSON, whether the driver parsed it already (psycopg) or hands back text (SQLite)."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


COLUMNS = (WorkloadHistogram.namespace, WorkloadHistogram.workload, WorkloadHistogram.task,
            WorkloadHistogram.container, type_coerce(WorkloadHistogram.cpu, Text).label("cpu"),
            type_coerce(WorkloadHistogram.memory, Text).label("memory"), WorkloadHistogram.samples,
            WorkloadHistogram.first_sample_at, WorkloadHistogram.last_sample_at, WorkloadHistogram.last_oom_at,
            WorkloadHistogram.last_oom_memory_bytes, type_coerce(WorkloadHistogram.spec, Text).label("spec"))


def spec_from_row(row: Any, skipped: Counter[str]) -> ContainerSpec | None:
    """The stored container spec; None when there is none yet or it is malformed (counted, logged)."""
    if row.spec is None:
        return None
    try:
        data = _json(row.spec)
    except orjson.JSONDecodeError:
        data = "malformed"
    spec = ContainerSpec.from_json(data) if data is not None else None
    if spec is None and data is not None:
        skipped["bad_stored_spec"] += 1
        log.warning("workload histogram %s/%s/%s/%s: ignoring a malformed container spec", row.namespace,
                    row.workload, row.task, row.container)
    return spec


def entry_from_row(row: Any, half_life: float, skipped: Counter[str]) -> Entry:
    """A stored row back in memory; a malformed histogram becomes an empty one (counted, logged)."""
    key = f"{row.namespace}/{row.workload}/{row.task}/{row.container}"
    entry = Entry(cpu_histogram(half_life), memory_histogram(half_life), samples=int(row.samples or 0),
                   first=to_ts(row.first_sample_at), last=to_ts(row.last_sample_at), last_oom=to_ts(row.last_oom_at),
                   last_oom_memory=float(row.last_oom_memory_bytes or 0.0))
    for name in ("cpu", "memory"):
        empty = getattr(entry, name)
        try:
            data = _json(getattr(row, name))
            setattr(entry, name, DecayingHistogram.decode(data, empty.first_bucket, empty.ratio, empty.max_value,
                                                         half_life))
        except (ValueError, TypeError, orjson.JSONDecodeError) as exc:
            skipped["bad_stored_histogram"] += 1
            log.warning("workload histogram %s: discarding malformed %s histogram: %s", key, name, exc)
            continue
        if name == "memory":
            window_end, peak = data.get("window_end"), data.get("peak")
            if isinstance(window_end, int | float) and isinstance(peak, int | float) and not entry.memory.is_empty():
                entry.window_end, entry.peak = float(window_end), float(peak)
    return entry


_KEY = ("cluster", "namespace", "workload", "task", "container")


def upsert(session: Session, rows: list[dict[str, Any]]) -> None:
    """One INSERT .. ON CONFLICT DO UPDATE for all rows (SQLite and PostgreSQL speak the same)."""
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
    else:
        raise ValueError(f"workload histograms need SQLite or PostgreSQL, not {dialect}")
    stmt = insert(WorkloadHistogram)
    # A row written without a spec (a book that has not seen the container's pods) keeps the stored one.
    stmt = stmt.on_conflict_do_update(index_elements=list(_KEY), set_={
        name: func.coalesce(stmt.excluded.spec, WorkloadHistogram.spec) if name == "spec" else stmt.excluded[name]
        for name in rows[0] if name not in _KEY})
    session.execute(stmt, rows)


def recommendation_of(key: Key, entry: Entry, est: Estimate, settings: Recommendations,
                    spec: ContainerSpec | None) -> Recommendation:
    return finish(key, est, settings, spec, samples=entry.samples, first=to_datetime(entry.first),
                  last=to_datetime(entry.last))


def compute_recommendations(session: Session, settings: Recommendations, now: datetime, namespace: str | None = None,
                            *, samples_per_day: float = SAMPLES_PER_DAY,
                            workload: str | None = None) -> list[Recommendation]:
    """Recommendations for every stored workload x task x container (of one namespace, of one workload:
    the UI's job page reads one), sorted by key. Rows whose histograms are both empty (or unreadable)
    are left out."""
    query = select(*COLUMNS).order_by(*COLUMNS[:4])
    if namespace is not None:
        query = query.where(WorkloadHistogram.namespace == namespace)
    if workload is not None:
        query = query.where(WorkloadHistogram.workload == workload)
    half_life = settings.half_life_hours * 3600.0
    now_ts = now.timestamp()
    skipped: Counter[str] = Counter()
    out = []
    for row in session.execute(query):
        entry = entry_from_row(row, half_life, skipped)
        if entry.cpu.is_empty() and entry.memory.is_empty():
            continue
        key = (row.namespace, row.workload, row.task, row.container)
        out.append(recommendation_of(key, entry, entry.estimate(settings, now_ts, samples_per_day), settings,
                                   spec_from_row(row, skipped)))
    return out
