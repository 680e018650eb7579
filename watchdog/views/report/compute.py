"""What a report says, computed from the job ledger (`job_runs`) and the alerts.

Which runs a period holds: the runs that ended in it (finished, or deleted unfinished: `ended_at`),
and the runs still going at its end that started or were created before it (their hours so far). So
a finished run is counted in exactly one period, the one it ended in, with all its hours: the ledger
keeps one integral per run (accumulated by the usage recorder from the rollups), not per day.

Hours: the ledger's core-, byte- and GPU-seconds over 3600 (memory in GiB, 2^30 bytes). Waste is
requested minus used, never below zero per run. Failures: runs whose last phase is Failed, Aborted
or Terminated (the failure detector's phases), and alerts that fired in the period, by kind.
Percentiles interpolate linearly between the closest ranks (numpy's default), over the runs that
have the times: wait = start - creation, run = end - start.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.detectors.failure import FAILED_PHASES
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.ledger import ended_at

GroupBy = Literal["queue", "namespace"]
GROUPINGS: tuple[GroupBy, ...] = ("queue", "namespace")
HOUR = 3600.0
GIB = float(2**30)
PERCENTILES = (50, 90, 99)


@dataclass
class Hours:
    """Requested and used hours of one resource (core-, GiB- or GPU-hours)."""

    requested: float = 0.0
    used: float = 0.0
    wasted: float = 0.0

    def add(self, requested: float, used: float) -> None:
        self.requested += requested
        self.used += used
        self.wasted += max(0.0, requested - used)

    @property
    def used_ratio(self) -> float | None:
        return self.used / self.requested if self.requested > 0 else None


@dataclass
class Group:
    """One queue's or namespace's numbers over the period."""

    name: str
    runs: int = 0
    succeeded: int = 0
    failed: int = 0
    running: int = 0
    cpu: Hours = field(default_factory=Hours)
    memory: Hours = field(default_factory=Hours)
    gpu: Hours = field(default_factory=Hours)
    alerts: dict[str, int] = field(default_factory=dict)  # kind -> alerts fired in the period
    wait_seconds: dict[int, float | None] = field(default_factory=dict)  # percentile -> seconds
    run_seconds: dict[int, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Waster:
    """One run and the hours it requested but did not use."""

    namespace: str
    name: str
    queue: str
    cpu_core_hours: float
    memory_gib_hours: float
    gpu_hours: float


@dataclass
class Report:
    since: datetime
    until: datetime
    by: GroupBy
    groups: list[Group]
    total: Group
    top_wasters: list[Waster]


def percentile(values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


_COLUMNS = (JobRun.namespace, JobRun.name, JobRun.queue, JobRun.phase, JobRun.created_at, JobRun.started_at,
            JobRun.finished_at, JobRun.deleted_at, JobRun.cpu_core_seconds_requested, JobRun.cpu_core_seconds_used,
            JobRun.memory_byte_seconds_requested, JobRun.memory_byte_seconds_used, JobRun.gpu_seconds_requested,
            JobRun.gpu_seconds_used)


def _runs(session: Session, since: datetime, until: datetime) -> Sequence[Any]:
    """The period's runs, only the columns the report reads (whole ORM objects, messages included,
    took 4 times as long)."""
    end = ended_at()
    started = func.coalesce(JobRun.started_at, JobRun.created_at)
    return session.execute(select(*_COLUMNS).where(or_(
        and_(end >= since, end < until),
        and_(end.is_(None), started < until),
    )).order_by(JobRun.id)).all()


def compute_report(session: Session, since: datetime, until: datetime, by: GroupBy, top: int = 10) -> Report:
    """The report of [since, until) grouped by queue or namespace (a run without a queue: "")."""
    groups: dict[str, Group] = {}
    total = Group(name="(all)")
    waits: dict[str | None, list[float]] = defaultdict(list)
    durations: dict[str | None, list[float]] = defaultdict(list)
    wasters: list[Waster] = []
    for run in _runs(session, since, until):
        key = run.queue if by == "queue" else run.namespace
        group = groups.setdefault(key, Group(name=key))
        end = run.finished_at or run.deleted_at
        for target in (group, total):
            target.runs += 1
            target.failed += run.phase in FAILED_PHASES
            target.succeeded += run.phase == "Completed"
            target.running += end is None
            target.cpu.add(run.cpu_core_seconds_requested / HOUR, run.cpu_core_seconds_used / HOUR)
            target.memory.add(run.memory_byte_seconds_requested / HOUR / GIB, run.memory_byte_seconds_used / HOUR / GIB)
            target.gpu.add(run.gpu_seconds_requested / HOUR, run.gpu_seconds_used / HOUR)
        if run.started_at is not None and run.created_at is not None:
            for name in (key, None):  # None: the total
                waits[name].append(max(0.0, (run.started_at - run.created_at).total_seconds()))
        if run.started_at is not None and end is not None:
            for name in (key, None):  # None: the total
                durations[name].append(max(0.0, (end - run.started_at).total_seconds()))
        wasters.append(Waster(run.namespace, run.name, run.queue,
                              max(0.0, run.cpu_core_seconds_requested - run.cpu_core_seconds_used) / HOUR,
                              max(0.0, run.memory_byte_seconds_requested - run.memory_byte_seconds_used) / HOUR / GIB,
                              max(0.0, run.gpu_seconds_requested - run.gpu_seconds_used) / HOUR))
    column = Alert.queue if by == "queue" else Alert.namespace
    fired = session.execute(select(column, Alert.kind, func.count()).where(
        Alert.fired_at >= since, Alert.fired_at < until).group_by(column, Alert.kind)).all()
    totals: Counter[str] = Counter()
    for key, kind, count in fired:
        group = groups.setdefault(str(key), Group(name=str(key)))
        group.alerts[str(kind)] = int(count)
        totals[str(kind)] += int(count)
    total.alerts = dict(sorted(totals.items()))
    for name, target in [*groups.items(), (None, total)]:
        target.alerts = dict(sorted(target.alerts.items()))
        target.wait_seconds = {p: percentile(waits[name], p) for p in PERCENTILES}
        target.run_seconds = {p: percentile(durations[name], p) for p in PERCENTILES}
    ranked = sorted((w for w in wasters if w.gpu_hours > 0 or w.cpu_core_hours > 0 or w.memory_gib_hours > 0),
                    key=lambda w: (-w.gpu_hours, -w.cpu_core_hours, -w.memory_gib_hours, w.namespace, w.name))
    return Report(since=since, until=until, by=by, groups=[groups[k] for k in sorted(groups)], total=total,
                  top_wasters=ranked[:top])


def parse_moment(text: str, now: datetime) -> datetime:
    """`7d` / `36h` / seconds: that long before `now`; else an ISO 8601 time (UTC when it names no zone).
    ValueError otherwise, also for a moment outside datetime's years 1..9999 (`99999999999d`, or
    `0001-01-01T00:00+01:00` in UTC), which raised OverflowError: a 500 from /api/v1/reports."""
    from volcano_monitor.core.flags import parse_duration

    out_of_range = f"{text!r} is outside the years 1..9999"
    try:
        return now - timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    except OverflowError:
        raise ValueError(out_of_range) from None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a duration (7d, 36h) or an ISO 8601 time: {text!r}") from None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(out_of_range) from None
