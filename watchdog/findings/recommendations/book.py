"""Request recommendations per workload x task x container, in the manner of the VPA recommender.

Histograms (watchdog.state.histogram) are kept in memory by `HistogramBook`, fed by the usage collectors,
and flushed to `workload_histograms` by the writer with the container's spec as last seen (requests,
limits, queue, caps); `compute_recommendations` reads that table. The modules behind it:
- watchdog.findings.recommendations.formulas: targets and bounds from the histograms (the VPA's formulas);
- watchdog.findings.recommendations.policy: what makes them a recommendation one can paste: min/max_allowed, the queue's
  capability and the largest node's allocatable as caps, limits that keep the container's own
  limit/request ratio, and no patch below `min_confidence`;
- watchdog.findings.recommendations.output: table, csv, json and yaml (patches) for people and programs.
"""

from __future__ import annotations

import copy
import logging
import math
from collections import Counter
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import and_, delete, or_, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.recommendations.formulas import (
    SAMPLES_PER_DAY,
    Estimate,
    history_days,
    oom_bump,
    recommend,
)
from volcano_monitor.watchdog.findings.recommendations.output import format_cpu, format_memory, render
from volcano_monitor.watchdog.findings.recommendations.policy import ContainerSpec, Recommendation
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.findings.recommendations.store import (
    COLUMNS,
    Entry,
    compute_recommendations,
    entry_from_row,
    recommendation_of,
    spec_from_row,
    to_datetime,
    upsert,
)
from volcano_monitor.watchdog.state.db.models import WorkloadHistogram
from volcano_monitor.watchdog.state.histogram import cpu_histogram, memory_histogram

__all__ = ["SAMPLES_PER_DAY", "ContainerSpec", "Estimate", "HistogramBook", "Recommendation", "compute_recommendations",
           "format_cpu", "format_memory", "history_days", "oom_bump", "recommend", "render"]

log = logging.getLogger(__name__)

MAX_NAME = 253  # the key columns' length
MAX_TIMESTAMP = 253402300799.0  # 9999-12-31: later timestamps cannot be stored
Key = tuple[str, str, str, str]


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
        self._entries: dict[Key, Entry] = {}
        # The container as last seen (`note_spec`), as its stored JSON: a few hundred bytes per key.
        self._specs: dict[Key, bytes] = {}
        self._dirty: set[Key] = set()
        self._last_flushed: list[Key] = []
        self.skipped: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._entries)

    def dirty_count(self) -> int:
        return len(self._dirty)

    def _entry(self, key: Key, ts: float | None) -> Entry | None:
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
            entry = self._entries[key] = Entry(cpu_histogram(self._half_life), memory_histogram(self._half_life))
        return entry

    def _add_peak(self, key: Key, entry: Entry, value: float, ts: float, oom: bool = False) -> None:
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

    def note_spec(self, namespace: str, workload: str, task: str, container: str, spec: ContainerSpec) -> None:
        """The container's current requests, limits, queue and caps, as a pod of it shows them (every pod
        event: cheap when nothing changed). Written with the histograms at the next flush."""
        key = (namespace, workload, task, container)
        if not all(isinstance(part, str) and len(part) <= MAX_NAME for part in key) or not (namespace and workload):
            return
        data = orjson.dumps(spec.to_json(), option=orjson.OPT_SORT_KEYS)
        if self._specs.get(key) != data:
            self._specs[key] = data
            if key in self._entries:
                self._dirty.add(key)

    def has_spec(self, key: Key) -> bool:
        return key in self._specs

    def spec(self, key: Key) -> ContainerSpec | None:
        data = self._specs.get(key)
        return ContainerSpec.from_json(orjson.loads(data)) if data is not None else None

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
        key = (namespace, workload, task, container)
        return recommendation_of(key, entry, entry.estimate(self.settings, now.timestamp(), samples_per_day),
                               self.settings, self.spec(key))

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
        for row in session.execute(select(*COLUMNS)):
            key: Key = (row.namespace, row.workload, row.task, row.container)
            if key not in self._dirty:
                self._entries[key] = entry_from_row(row, self._half_life, self.skipped)
                spec = spec_from_row(row, self.skipped)
                if spec is not None and key not in self._specs:
                    self._specs[key] = orjson.dumps(spec.to_json(), option=orjson.OPT_SORT_KEYS)

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
                         "first_sample_at": to_datetime(entry.first), "last_sample_at": to_datetime(entry.last),
                         "last_oom_at": to_datetime(entry.last_oom), "last_oom_memory_bytes": entry.last_oom_memory,
                         "spec": orjson.loads(spec) if (spec := self._specs.get(key)) is not None else None,
                         "updated_at": now})
        upsert(session, rows)
        self._dirty.clear()
        self._last_flushed = keys
        return len(rows)

    def forget_idle(self, session: Session, cutoff: datetime) -> int:
        """Retention: drop workloads with no sample since `cutoff` (a job renamed or retired long ago),
        from memory and from the table, and the specs of containers that never had a sample (pods seen,
        never measured: the observer notes them again when a pod of theirs appears or changes phase). A
        workload with unflushed changes is kept. Returns rows deleted."""
        cut = cutoff.timestamp()
        stale = [key for key, entry in self._entries.items()
                 if key not in self._dirty and (entry.last is None or entry.last < cut)
                 and (entry.last_oom is None or entry.last_oom < cut)]
        for key in stale:
            del self._entries[key]
        for key in [key for key in self._specs if key not in self._entries]:
            del self._specs[key]
        table = WorkloadHistogram
        idle = and_(or_(table.last_sample_at.is_(None), table.last_sample_at < cutoff),
                    or_(table.last_oom_at.is_(None), table.last_oom_at < cutoff), table.updated_at < cutoff)
        result = session.execute(delete(table).where(idle))
        return max(getattr(result, "rowcount", 0) or 0, 0)

    def flush_failed(self) -> None:
        """The transaction holding the last flush was rolled back: write those keys again next time."""
        self._dirty.update(self._last_flushed)
        self._last_flushed = []
