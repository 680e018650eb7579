"""What a report says, computed from the job ledger (`job_runs`) and the alerts.

Which runs a period holds: the runs that ended in it (finished, or deleted unfinished: `ended_at`),
and the runs still going at its end that started or were created before it (their hours so far). So
a finished run is counted in exactly one period, the one it ended in, with all its hours: the ledger
keeps one integral per run (accumulated by the usage recorder from the rollups), not per day.

Hours: the ledger's core-, byte- and GPU-seconds over 3600 (memory in GiB, 2^30 bytes). GPU-hours are
physical GPU-hours (cards): a pod holding a quarter of a shared card (HAMi, Volcano vGPU) adds a quarter of
an hour per hour (watchdog.state.rollups, core.gpushare), four of them one GPU-hour. Waste is
requested minus used, never below zero per run. Failures: runs whose last phase is Failed, Aborted
or Terminated (the failure detector's phases), and alerts that fired in the period, by kind.
Percentiles interpolate linearly between the closest ranks (numpy's default), over the runs that
have the times: wait = start - creation, run = end - start.

Cost: each run's cost on the three bases (requested, used, idle: watchdog.state.prices.run_cost), summed
like the hours, in the configured currency.

Clusters (docs/fleet.md): by cluster, each cluster's runs and alerts are a group: the report reads every
cluster in the database (or those `clusters` names). The other groupings read this watchdog's own cluster
(the CLI, the digests) unless `clusters` says which (the API: every cluster unless `?cluster=` narrows it);
across clusters a queue, namespace or workload of the same name is one group, its runs summed (a team's
namespace across the fleet). By queue, a parent queue's row includes its children's runs
(the ledger keeps each run's queue path, root first): its numbers are its own runs' and every
descendant's, so the rows of a tree add up to more than the total, which counts each run once. By
workload: `namespace/workload`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.detectors.failure import FAILED_PHASES
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.ledger import ended_at
from volcano_monitor.watchdog.state.prices import BASES, RunCost, run_cost
from volcano_monitor.watchdog.views.clusters import OWN, Clusters, Own, across

GroupBy = Literal["queue", "namespace", "workload", "cluster"]
GROUPINGS: tuple[GroupBy, ...] = ("queue", "namespace", "workload", "cluster")
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
class Cost:
    """A group's cost on the three bases, in the report's currency."""

    requested: float = 0.0
    used: float = 0.0
    idle: float = 0.0


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
    cost: Cost = field(default_factory=Cost)
    alerts: dict[str, int] = field(default_factory=dict)  # kind -> alerts fired in the period
    wait_seconds: dict[int, float | None] = field(default_factory=dict)  # percentile -> seconds
    run_seconds: dict[int, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Waster:
    """One run and the hours it requested but did not use (`cluster`: the run's, for a fleet's report)."""

    cluster: str
    namespace: str
    name: str
    queue: str
    cpu_core_hours: float
    memory_gib_hours: float
    gpu_hours: float


@dataclass(frozen=True)
class Charge:
    """One run's cost in the period, for the FOCUS export (render.to_focus)."""

    cluster: str
    uid: str
    kind: str
    namespace: str
    name: str
    queue: str
    workload: str
    cost: RunCost


@dataclass
class Report:
    since: datetime
    until: datetime
    by: GroupBy
    groups: list[Group]
    total: Group
    top_wasters: list[Waster]
    currency: str = "USD"
    charges: list[Charge] = field(default_factory=list)  # every run of the period, in ledger order


def percentile(values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


_COLUMNS = (JobRun.cluster, JobRun.uid, JobRun.kind, JobRun.namespace, JobRun.name, JobRun.queue, JobRun.phase,
            JobRun.created_at, JobRun.started_at,
            JobRun.finished_at, JobRun.deleted_at, JobRun.cpu_core_seconds_requested, JobRun.cpu_core_seconds_used,
            JobRun.memory_byte_seconds_requested, JobRun.memory_byte_seconds_used, JobRun.gpu_seconds_requested,
            JobRun.gpu_seconds_used, JobRun.workload, JobRun.queue_path, JobRun.requested_cpu_cores,
            JobRun.requested_memory_bytes, JobRun.requested_gpus, JobRun.cost_cpu_used, JobRun.cost_cpu_requested,
            JobRun.cost_memory_used, JobRun.cost_memory_requested, JobRun.cost_gpu_used, JobRun.cost_gpu_requested)


def _runs(session: Session, since: datetime, until: datetime, namespaces: Set[str] | None = None,
          clusters: Clusters | Own = OWN) -> Sequence[Any]:
    """The period's runs, only the columns the report reads (whole ORM objects, messages included,
    took 4 times as long); `namespaces`: only theirs (None: all); `clusters`: as `compute_report`'s."""
    only = [JobRun.namespace.in_(namespaces)] if namespaces is not None else []
    return session.execute(across(select(*_COLUMNS).where(in_period(since, until), *only).order_by(JobRun.id),
                                  clusters)).all()


def in_period(since: datetime, until: datetime) -> Any:
    """The runs a period holds (this module's docstring), as a WHERE clause on job_runs."""
    end = ended_at()
    started = func.coalesce(JobRun.started_at, JobRun.created_at)
    return or_(and_(end >= since, end < until), and_(end.is_(None), started < until))


def group_keys(run: Any, by: GroupBy) -> list[str]:
    """The groups a run counts in: its cluster, its namespace, its `namespace/workload`, or its queue and every
    ancestor of it (a row older than queue paths: its queue alone)."""
    if by == "cluster":
        return [run.cluster]
    if by == "namespace":
        return [run.namespace]
    if by == "workload":
        return [f"{run.namespace}/{run.workload}"]
    path = [name for name in (run.queue_path or "").split("/") if name]
    if not path or path[-1] != run.queue:
        return [run.queue]
    return list(dict.fromkeys(reversed(path)))  # the queue first; a name twice in a path counts once


def compute_report(session: Session, since: datetime, until: datetime, by: GroupBy, top: int = 10,
                   costs: Costs | None = None, namespaces: Set[str] | None = None,
                   clusters: Clusters | Own = OWN) -> Report:
    """The report of [since, until) grouped by queue, namespace, workload (a run without a queue: "") or
    cluster; costs at `costs`' prices (None: no prices, every cost 0); `namespaces`: only their runs and alerts
    (a reader's scope, auth.mode kubernetes; None: all); `clusters`: the clusters read (None: every one; OWN:
    the session's own, or by cluster every one)."""
    costs = costs or Costs()
    if by == "cluster" and clusters is OWN:
        clusters = None
    groups: dict[str, Group] = {}
    total = Group(name="(all)")
    waits: dict[str | None, list[float]] = defaultdict(list)
    durations: dict[str | None, list[float]] = defaultdict(list)
    wasters: list[Waster] = []
    charges: list[Charge] = []
    ancestors: dict[str, list[str]] = {}  # by queue: a queue and its ancestors, from its runs' paths
    for run in _runs(session, since, until, namespaces, clusters):
        keys = group_keys(run, by)
        key = keys[0]
        ancestors.setdefault(key, keys)
        end = run.finished_at or run.deleted_at
        priced = run_cost(run, costs)
        bases = {basis: priced.total(basis) for basis in BASES}
        charges.append(Charge(run.cluster, run.uid, run.kind, run.namespace, run.name, run.queue, run.workload, priced))
        for target in (*(groups.setdefault(k, Group(name=k)) for k in keys), total):
            for basis, amount in bases.items():
                setattr(target.cost, basis, getattr(target.cost, basis) + amount)
            target.runs += 1
            target.failed += run.phase in FAILED_PHASES
            target.succeeded += run.phase == "Completed"
            target.running += end is None
            target.cpu.add(run.cpu_core_seconds_requested / HOUR, run.cpu_core_seconds_used / HOUR)
            target.memory.add(run.memory_byte_seconds_requested / HOUR / GIB, run.memory_byte_seconds_used / HOUR / GIB)
            target.gpu.add(run.gpu_seconds_requested / HOUR, run.gpu_seconds_used / HOUR)
        if run.started_at is not None and run.created_at is not None:
            for name in (*keys, None):  # None: the total
                waits[name].append(max(0.0, (run.started_at - run.created_at).total_seconds()))
        if run.started_at is not None and end is not None:
            for name in (*keys, None):  # None: the total
                durations[name].append(max(0.0, (end - run.started_at).total_seconds()))
        wasters.append(Waster(run.cluster, run.namespace, run.name, run.queue,
                              max(0.0, run.cpu_core_seconds_requested - run.cpu_core_seconds_used) / HOUR,
                              max(0.0, run.memory_byte_seconds_requested - run.memory_byte_seconds_used) / HOUR / GIB,
                              max(0.0, run.gpu_seconds_requested - run.gpu_seconds_used) / HOUR))
    # Alerts name a queue and a namespace, not a workload: by workload only the total counts them. A
    # child queue's alerts count in its ancestors too, as far as the period's runs tell its path.
    column = {"queue": Alert.queue, "cluster": Alert.cluster}.get(by, Alert.namespace)
    fired = session.execute(across(select(column, Alert.kind, func.count()).where(
        Alert.fired_at >= since, Alert.fired_at < until,
        *([Alert.namespace.in_(namespaces)] if namespaces is not None else [])).group_by(column, Alert.kind),
        clusters)).all()
    totals: Counter[str] = Counter()
    for key, kind, count in fired:
        totals[str(kind)] += int(count)
        if by == "workload":
            continue
        for name in ancestors.get(str(key), [str(key)]):
            group = groups.setdefault(name, Group(name=name))
            group.alerts[str(kind)] = group.alerts.get(str(kind), 0) + int(count)
    total.alerts = dict(sorted(totals.items()))
    for name, target in [*groups.items(), (None, total)]:
        target.alerts = dict(sorted(target.alerts.items()))
        target.wait_seconds = {p: percentile(waits[name], p) for p in PERCENTILES}
        target.run_seconds = {p: percentile(durations[name], p) for p in PERCENTILES}
    ranked = sorted((w for w in wasters if w.gpu_hours > 0 or w.cpu_core_hours > 0 or w.memory_gib_hours > 0),
                    key=lambda w: (-w.gpu_hours, -w.cpu_core_hours, -w.memory_gib_hours, w.namespace, w.name))
    return Report(since=since, until=until, by=by, groups=[groups[k] for k in sorted(groups)], total=total,
                  top_wasters=ranked[:top], currency=costs.currency, charges=charges)


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
