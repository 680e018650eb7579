"""Request recommendations per workload x task x container, in the manner of the VPA recommender.

Histograms (watchdog.histogram) are kept in memory by `HistogramBook`, fed by the usage collectors,
and flushed to `workload_histograms` by the writer; `compute_recommendations` reads that table.

The math (`recommend`), with p = percentile of the decaying histogram and m = 1 + safety_margin:
- CPU: every usage sample goes into the CPU histogram with weight 1 (VPA weights by the container's
  request, to compare containers of different sizes inside one aggregate; our histograms are per
  container already, and the usage sample carries no request). target = p(cpu_percentile) x m.
- Memory: only the *peak* of each `memory_interval_hours` interval (aligned to the epoch, so daily
  intervals are UTC days) is a sample, placed at the interval's end. While an interval is open, a
  higher sample replaces its peak (the old one is subtracted). target = p(memory_percentile) x m.
  Memory is not compressible: one high peak a day matters, the average does not.
- OOM kill: a memory sample of `max(peak x oom_bump_ratio, peak + oom_min_bump_bytes)` enters the
  current interval; also, for one memory interval after the kill the memory target is at least
  that bump (`oom_bumped`), however much calmer history outweighs it.
- History, in days: `min(last - first sample, samples / 1440)` (VPA: a sample a minute is "full"
  sampling, so sparse sampling counts for less). confidence = min(1, days / 7): a week of history
  is full confidence.
- Bounds (VPA's formulas, on the history in days d, at least one hour):
  lower = p50 x m x (1 + 0.001/d)^-2, upper = p95 x m x (1 + 1/d) — the upper bound is 2x after
  one day and 1.14x after a week; lower <= target <= upper always.
- Minimums (`min_cpu_cores`, `min_memory_bytes`) apply to all three. CPU is rounded up to a
  millicore, memory up to a byte.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import yaml
from sqlalchemy import Text, and_, delete, or_, select, type_coerce
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.config import Recommendations
from volcano_monitor.watchdog.db.models import WorkloadHistogram
from volcano_monitor.watchdog.histogram import DecayingHistogram, cpu_histogram, memory_histogram

log = logging.getLogger(__name__)

SAMPLES_PER_DAY = 1440.0  # one sample a minute counts as full sampling (as in VPA)
FULL_CONFIDENCE_DAYS = 7.0
MIN_BOUND_DAYS = 1.0 / 24  # bounds widen as for at least one hour of history
LOWER_PERCENTILE = 0.5
UPPER_PERCENTILE = 0.95
MAX_NAME = 253  # the key columns' length
MAX_TIMESTAMP = 253402300799.0  # 9999-12-31: later timestamps cannot be stored
Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class Recommendation:
    namespace: str
    workload: str
    task: str
    container: str
    cpu_target_cores: float
    cpu_lower_cores: float
    cpu_upper_cores: float
    memory_target_bytes: float
    memory_lower_bytes: float
    memory_upper_bytes: float
    confidence: float
    samples: int
    first_sample_at: datetime | None
    last_sample_at: datetime | None
    oom_bumped: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON/YAML-safe: base units (cores, bytes), ISO 8601 times."""
        out = asdict(self)
        for name in ("first_sample_at", "last_sample_at"):
            out[name] = out[name].isoformat() if out[name] else None
        return out


@dataclass(frozen=True)
class Estimate:
    """What `recommend` computes for one container."""

    cpu_target_cores: float
    cpu_lower_cores: float
    cpu_upper_cores: float
    memory_target_bytes: float
    memory_lower_bytes: float
    memory_upper_bytes: float
    confidence: float
    oom_bumped: bool


def history_days(samples: int, first_ts: float | None, last_ts: float | None,
                 samples_per_day: float = SAMPLES_PER_DAY) -> float:
    if first_ts is None or last_ts is None or samples <= 0:
        return 0.0
    return max(0.0, min((last_ts - first_ts) / 86400.0, samples / samples_per_day))


def oom_bump(peak_bytes: float, settings: Recommendations) -> float:
    return max(peak_bytes * settings.oom_bump_ratio, peak_bytes + settings.oom_min_bump_bytes)


def recommend(h_cpu: DecayingHistogram, h_mem: DecayingHistogram, settings: Recommendations, *, samples: int,
              first_ts: float | None, last_ts: float | None, now_ts: float, last_oom_ts: float | None = None,
              last_oom_memory_bytes: float = 0.0, samples_per_day: float = SAMPLES_PER_DAY) -> Estimate:
    """The pure math (module docstring). Timestamps are seconds since the epoch."""
    days = history_days(samples, first_ts, last_ts, samples_per_day)
    bound_days = max(days, MIN_BOUND_DAYS)
    margin = 1.0 + settings.safety_margin
    up = 1.0 + 1.0 / bound_days
    down = (1.0 + 0.001 / bound_days) ** -2

    def bounds(hist: DecayingHistogram, percentile: float) -> tuple[float, float, float]:
        p50, pt, p95 = hist.percentiles((LOWER_PERCENTILE, percentile, UPPER_PERCENTILE))
        target = pt * margin
        return min(p50 * margin * down, target), target, max(p95 * margin * up, target)

    cpu_lower, cpu_target, cpu_upper = bounds(h_cpu, settings.cpu_percentile)
    mem_lower, mem_target, mem_upper = bounds(h_mem, settings.memory_percentile)
    oom_bumped = (last_oom_ts is not None and last_oom_memory_bytes > 0
                  and now_ts - last_oom_ts <= settings.memory_interval_hours * 3600)
    if oom_bumped:
        mem_target = max(mem_target, oom_bump(last_oom_memory_bytes, settings))
        mem_upper = max(mem_upper, mem_target)

    def cores(x: float) -> float:
        return math.ceil(round(max(x, settings.min_cpu_cores) * 1000, 6)) / 1000

    def byte(x: float) -> float:
        return float(math.ceil(max(x, settings.min_memory_bytes)))

    return Estimate(cores(cpu_target), cores(cpu_lower), cores(cpu_upper), byte(mem_target), byte(mem_lower),
                    byte(mem_upper), min(1.0, days / FULL_CONFIDENCE_DAYS), oom_bumped)


@dataclass
class _Entry:
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


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _dt(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


def _json(value: Any) -> Any:
    """Stored JSON, whether the driver parsed it already (psycopg) or hands back text (SQLite)."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


_COLUMNS = (WorkloadHistogram.namespace, WorkloadHistogram.workload, WorkloadHistogram.task,
            WorkloadHistogram.container, type_coerce(WorkloadHistogram.cpu, Text).label("cpu"),
            type_coerce(WorkloadHistogram.memory, Text).label("memory"), WorkloadHistogram.samples,
            WorkloadHistogram.first_sample_at, WorkloadHistogram.last_sample_at, WorkloadHistogram.last_oom_at,
            WorkloadHistogram.last_oom_memory_bytes)


def _entry_from_row(row: Any, half_life: float, skipped: Counter[str]) -> _Entry:
    """A stored row back in memory; a malformed histogram becomes an empty one (counted, logged)."""
    key = f"{row.namespace}/{row.workload}/{row.task}/{row.container}"
    entry = _Entry(cpu_histogram(half_life), memory_histogram(half_life), samples=int(row.samples or 0),
                   first=_ts(row.first_sample_at), last=_ts(row.last_sample_at), last_oom=_ts(row.last_oom_at),
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


def _number(value: Any, high: float = math.inf) -> float | None:
    """value as a float if 0 <= value < high; None for NaN, infinities, negatives, huge ints, non-numbers."""
    if isinstance(value, str | bytes):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0.0 <= number < high else None


class HistogramBook:
    """In-memory histograms per (namespace, workload, task, container), loaded from / flushed to
    workload_histograms. Holds no engine: `load` and `flush` get the caller's Session (the writer
    thread owns the transaction). Bad samples are skipped and counted in `skipped`."""

    def __init__(self, settings: Recommendations) -> None:
        self.settings = settings
        self._half_life = settings.half_life_hours * 3600.0
        self._interval = settings.memory_interval_hours * 3600.0
        self._entries: dict[Key, _Entry] = {}
        self._dirty: set[Key] = set()
        self._last_flushed: list[Key] = []
        self.skipped: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._entries)

    def dirty_count(self) -> int:
        return len(self._dirty)

    def _entry(self, key: Key, ts: float | None) -> _Entry | None:
        if ts is None:
            self.skipped["bad_timestamp"] += 1
            return None
        try:
            entry = self._entries.get(key)
        except TypeError:  # an unhashable part
            entry = None
        if entry is None:
            if not all(isinstance(part, str) and len(part) <= MAX_NAME for part in key) or not (key[0] and key[1]):
                self.skipped["bad_key"] += 1
                log.debug("skipping a sample with an unusable key %r", key)
                return None
            entry = self._entries[key] = _Entry(cpu_histogram(self._half_life), memory_histogram(self._half_life))
        return entry

    def _add_peak(self, key: Key, entry: _Entry, value: float, ts: float, oom: bool = False) -> None:
        end = (math.floor(ts / self._interval) + 1) * self._interval
        if entry.window_end is None or entry.peak is None or end > entry.window_end:  # a new interval
            entry.window_end, entry.peak = end, value
            entry.memory.add(value, 1.0, end)
        elif end < entry.window_end and not oom:  # an interval already closed: its peak is settled
            self.skipped["memory_out_of_order"] += 1
            return
        elif value > entry.peak:  # a higher peak for the open interval (an OOM always lands in it, as in VPA)
            entry.memory.add(entry.peak, -1.0, entry.window_end)
            entry.memory.add(value, 1.0, entry.window_end)
            entry.peak = value
        else:
            return
        self._dirty.add(key)

    def add_usage(self, namespace: str, workload: str, task: str, container: str, ts: float, cpu_cores: float,
                  memory_bytes: float, *, count: int = 1) -> None:
        """One usage sample. `count` > 1 says it stands for that many samples at the same value (a
        coarse back-fill step): CPU gets that weight, the sample count grows by it."""
        key = (namespace, workload, task, container)
        at = _number(ts, MAX_TIMESTAMP)
        entry = self._entry(key, at)
        if entry is None or at is None:
            return
        cpu, memory = _number(cpu_cores), _number(memory_bytes)
        if cpu is None:
            self.skipped["bad_cpu"] += 1
        if memory is None:
            self.skipped["bad_memory"] += 1
        if (cpu is None and memory is None) or count < 1:
            return
        ts = at
        if cpu is not None:
            entry.cpu.add(cpu, float(count), ts)
        if memory is not None:
            self._add_peak(key, entry, memory, ts)
        entry.samples += count
        entry.first = ts if entry.first is None else min(entry.first, ts)
        entry.last = ts if entry.last is None else max(entry.last, ts)
        self._dirty.add(key)

    def add_usage_series(self, namespace: str, workload: str, task: str, container: str,
                         rows: list[tuple[float, float, float]], *, count: int = 1) -> int:
        """`add_usage` for many (ts, cores, bytes) samples of one container in time order (a back-fill's
        points): the same histogram operations, with the per-sample checks done in one pass. Samples with a
        bad timestamp or value are skipped (counted); returns how many were added."""
        inf = math.inf
        good = [row for row in rows if 0.0 <= row[0] < MAX_TIMESTAMP and 0.0 <= row[1] < inf and 0.0 <= row[2] < inf]
        if len(good) < len(rows):
            self.skipped["bad_backfill_sample"] += len(rows) - len(good)
        key = (namespace, workload, task, container)
        entry = self._entry(key, good[0][0]) if good and count >= 1 else None
        if entry is None:
            return 0
        add_cpu, add_peak, weight = entry.cpu.add, self._add_peak, float(count)
        for ts, cores, memory in good:
            add_cpu(cores, weight, ts)
            add_peak(key, entry, memory, ts)
        entry.samples += count * len(good)
        first, last = min(row[0] for row in good), max(row[0] for row in good)
        entry.first = first if entry.first is None else min(entry.first, first)
        entry.last = last if entry.last is None else max(entry.last, last)
        self._dirty.add(key)
        return len(good)

    def add_oom(self, namespace: str, workload: str, task: str, container: str, ts: float,
                memory_bytes: float) -> None:
        """An OOM kill with the memory at the kill (or the request/limit when that is all we know)."""
        key = (namespace, workload, task, container)
        at = _number(ts, MAX_TIMESTAMP)
        entry = self._entry(key, at)
        if entry is None or at is None:
            return
        peak = _number(memory_bytes)
        if not peak:
            self.skipped["bad_oom_memory"] += 1
            return
        self._add_peak(key, entry, oom_bump(peak, self.settings), at, oom=True)
        if entry.last_oom is None or at >= entry.last_oom:
            entry.last_oom, entry.last_oom_memory = at, peak
        self._dirty.add(key)

    def recommendation(self, namespace: str, workload: str, task: str, container: str, now: datetime,
                       samples_per_day: float = SAMPLES_PER_DAY) -> Recommendation | None:
        """The current recommendation from memory (unflushed samples included); None if unknown."""
        entry = self._entries.get((namespace, workload, task, container))
        if entry is None or (entry.cpu.is_empty() and entry.memory.is_empty()):
            return None
        return _recommendation((namespace, workload, task, container), entry,
                               entry.estimate(self.settings, now.timestamp(), samples_per_day))

    def for_workload(self, namespace: str, workload: str, now: datetime) -> list[Recommendation]:
        """Every task x container recommendation of one workload (for messages about it)."""
        keys = sorted(k for k in self._entries if k[0] == namespace and k[1] == workload)
        found = (self.recommendation(*key, now) for key in keys[:20])
        return [rec for rec in found if rec is not None]

    def first_sample_ts(self, key: Key) -> float | None:
        """When the container's first usage sample was taken (None: no sample yet). Read from another
        thread by the back-fill, which only wants history from before it."""
        entry = self._entries.get(key)
        return entry.first if entry is not None else None

    def key_list(self) -> list[Key]:
        return list(self._entries)

    def snapshot(self, keys: list[Key]) -> dict[Key, Any]:
        """Copies of these keys' entries (None: absent), for `restore` after a rolled-back merge."""
        return {key: copy.deepcopy(self._entries.get(key)) for key in keys}

    def restore(self, snapshot: dict[Key, Any]) -> None:
        """Put the entries of a `snapshot` back (they stay marked for the next flush)."""
        for key, entry in snapshot.items():
            if entry is None:
                self._entries.pop(key, None)
            else:
                self._entries[key] = entry
            self._dirty.add(key)

    def merge_older(self, older: HistogramBook, workloads: set[tuple[str, str]] | None = None) -> list[Key]:
        """Put `older`'s history (built with the same settings from samples taken before each key's
        first sample here: a back-fill) under what this book holds; returns the keys changed. The
        memory interval both may share (the back-fill's last, this book's first) keeps one peak:
        the higher of the two when this book still has it open, else this book's. Only the keys of
        `workloads` ((namespace, workload) pairs) when given; `older` is left as it was (copied)."""
        changed = []
        for key, stored in older._entries.items():
            if (stored.cpu.is_empty() and stored.memory.is_empty()) or \
                    (workloads is not None and key[:2] not in workloads):
                continue
            old = copy.deepcopy(stored)
            new = self._entries.get(key)
            if new is None:
                self._entries[key] = old
            else:
                if old.window_end is not None and old.peak is not None and new.first is not None and \
                        old.window_end == (math.floor(new.first / self._interval) + 1) * self._interval:
                    if new.window_end == old.window_end and new.peak is not None:  # both peaks are known
                        if old.peak <= new.peak:
                            old.memory.add(old.peak, -1.0, old.window_end)
                        else:
                            new.memory.add(new.peak, -1.0, new.window_end)
                            new.peak = old.peak
                    else:  # this book's first interval is closed and its peak not kept: it stands alone
                        old.memory.add(old.peak, -1.0, old.window_end)
                new.cpu.merge(old.cpu)
                new.memory.merge(old.memory)
                new.samples += old.samples
                new.first = old.first if new.first is None or old.first is None else min(new.first, old.first)
                new.last = old.last if new.last is None else new.last if old.last is None else max(new.last, old.last)
                if new.window_end is None:
                    new.window_end, new.peak = old.window_end, old.peak
            self._dirty.add(key)
            changed.append(key)
        return changed

    def load(self, session: Session) -> None:
        """Read every stored row. Keys changed in memory since the last flush keep their newer state."""
        for row in session.execute(select(*_COLUMNS)):
            key: Key = (row.namespace, row.workload, row.task, row.container)
            if key not in self._dirty:
                self._entries[key] = _entry_from_row(row, self._half_life, self.skipped)

    def reload(self, session: Session) -> None:
        """Forget memory and read the table: a replica that just became leader trusts what the previous
        leader stored over anything it noted as a follower."""
        self._entries.clear()
        self._dirty.clear()
        self._last_flushed = []
        self.load(session)

    def flush(self, session: Session, now: datetime) -> int:
        """Upsert the keys changed since the last flush; returns rows written. If the caller's
        transaction then fails to commit, `flush_failed()` marks those keys for the next flush."""
        keys = sorted(self._dirty)
        if not keys:
            return 0
        rows = []
        for key in keys:
            entry = self._entries[key]
            memory = entry.memory.to_dict()
            if entry.window_end is not None:
                memory.update(window_end=entry.window_end, peak=entry.peak)
            rows.append({"namespace": key[0], "workload": key[1], "task": key[2], "container": key[3],
                         "cpu": entry.cpu.to_dict(), "memory": memory, "samples": entry.samples,
                         "first_sample_at": _dt(entry.first), "last_sample_at": _dt(entry.last),
                         "last_oom_at": _dt(entry.last_oom), "last_oom_memory_bytes": entry.last_oom_memory,
                         "updated_at": now})
        _upsert(session, rows)
        self._dirty.clear()
        self._last_flushed = keys
        return len(rows)

    def forget_idle(self, session: Session, cutoff: datetime) -> int:
        """Retention: drop workloads with no sample since `cutoff` (a job renamed or retired long ago),
        from memory and from the table. A workload with unflushed changes is kept. Returns rows deleted."""
        cut = cutoff.timestamp()
        stale = [key for key, entry in self._entries.items()
                 if key not in self._dirty and (entry.last is None or entry.last < cut)
                 and (entry.last_oom is None or entry.last_oom < cut)]
        for key in stale:
            del self._entries[key]
        table = WorkloadHistogram
        idle = and_(or_(table.last_sample_at.is_(None), table.last_sample_at < cutoff),
                    or_(table.last_oom_at.is_(None), table.last_oom_at < cutoff), table.updated_at < cutoff)
        result = session.execute(delete(table).where(idle))
        return max(getattr(result, "rowcount", 0) or 0, 0)

    def flush_failed(self) -> None:
        """The transaction holding the last flush was rolled back: write those keys again next time."""
        self._dirty.update(self._last_flushed)
        self._last_flushed = []


_KEY = ("namespace", "workload", "task", "container")


def _upsert(session: Session, rows: list[dict[str, Any]]) -> None:
    """One INSERT .. ON CONFLICT DO UPDATE for all rows (SQLite and PostgreSQL speak the same)."""
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
    else:
        raise ValueError(f"workload histograms need SQLite or PostgreSQL, not {dialect}")
    stmt = insert(WorkloadHistogram)
    stmt = stmt.on_conflict_do_update(index_elements=list(_KEY), set_={
        name: stmt.excluded[name] for name in rows[0] if name not in _KEY})
    session.execute(stmt, rows)


def _recommendation(key: Key, entry: _Entry, est: Estimate) -> Recommendation:
    return Recommendation(*key, est.cpu_target_cores, est.cpu_lower_cores, est.cpu_upper_cores,
                          est.memory_target_bytes, est.memory_lower_bytes, est.memory_upper_bytes,
                          est.confidence, entry.samples, _dt(entry.first), _dt(entry.last), est.oom_bumped)


def compute_recommendations(session: Session, settings: Recommendations, now: datetime, namespace: str | None = None,
                            *, samples_per_day: float = SAMPLES_PER_DAY,
                            workload: str | None = None) -> list[Recommendation]:
    """Recommendations for every stored workload x task x container (of one namespace, of one workload:
    the UI's job page reads one), sorted by key. Rows whose histograms are both empty (or unreadable)
    are left out."""
    query = select(*_COLUMNS).order_by(*_COLUMNS[:4])
    if namespace is not None:
        query = query.where(WorkloadHistogram.namespace == namespace)
    if workload is not None:
        query = query.where(WorkloadHistogram.workload == workload)
    half_life = settings.half_life_hours * 3600.0
    now_ts = now.timestamp()
    skipped: Counter[str] = Counter()
    out = []
    for row in session.execute(query):
        entry = _entry_from_row(row, half_life, skipped)
        if entry.cpu.is_empty() and entry.memory.is_empty():
            continue
        key = (row.namespace, row.workload, row.task, row.container)
        out.append(_recommendation(key, entry, entry.estimate(settings, now_ts, samples_per_day)))
    return out


# -- output -----------------------------------------------------------------------------------------
def format_cpu(cores: float) -> str:
    return f"{math.ceil(round(cores * 1000, 6))}m"


def format_memory(value: float) -> str:
    mib = value / 2**20
    if mib < 1024:
        return f"{math.ceil(round(mib, 6))}Mi"
    return f"{math.ceil(round(mib / 1024 * 100, 6)) / 100:g}Gi"


def render(recommendations: list[Recommendation], output: str) -> str:
    """"table" for people (CPU in millicores, memory in Mi/Gi, rounded up); "json" / "yaml" for
    programs (a list of objects in base units: cores, bytes, ISO 8601 times)."""
    if output == "json":
        return json.dumps([r.to_dict() for r in recommendations], indent=2, ensure_ascii=False) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump([r.to_dict() for r in recommendations], sort_keys=False, allow_unicode=True))
    if output != "table":
        raise ValueError(f"unknown output format {output!r}: use table, json or yaml")
    if not recommendations:
        return "no recommendations yet: no usage history stored\n"
    header = ("NAMESPACE", "WORKLOAD", "TASK", "CONTAINER", "CPU", "CPU RANGE", "MEMORY", "MEMORY RANGE",
              "CONFIDENCE", "SAMPLES", "NOTE")
    lines = [header] + [(
        r.namespace, r.workload, r.task or "-", r.container, format_cpu(r.cpu_target_cores),
        f"{format_cpu(r.cpu_lower_cores)}-{format_cpu(r.cpu_upper_cores)}", format_memory(r.memory_target_bytes),
        f"{format_memory(r.memory_lower_bytes)}-{format_memory(r.memory_upper_bytes)}", f"{r.confidence:.2f}",
        str(r.samples), "OOM bump" if r.oom_bumped else "") for r in recommendations]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() + "\n"
                   for line in lines)
