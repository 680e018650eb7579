"""What a run costs: the price of a pod's resources on its node, and a ledger row's cost on three bases.

Where the price is applied, and why there: when the usage recorder integrates a pod's resource-seconds
(watchdog.state.rollups), it multiplies each interval by the price of the node the pod runs on and adds
the product to the run's cost columns (`cost_<resource>_<used|requested>` of `job_runs`), in the same
UPDATE, in the same transaction, as the resource-seconds themselves. So a pod on a pricier node costs
more, a run whose pods spread over two pools pays each pool's price for its own pods, and the cost is
exactly as durable as the usage: a flush that rolls back restores both deltas, one that commits stores
both. Several replicas, one truth: only the leader integrates, and a new leader starts from what is
stored (`reset_integration`), so one replica or three, or a kill -9 between flushes, give the same
stored columns as the usage they came from. Reading them (`run_cost`) is a pure function of the stored
row and the configured prices, which every replica has.

GPUs are physical GPUs (core.gpushare): the GPU price is per card-hour, and a pod holding a quarter of a
shared card (HAMi, Volcano vGPU) pays a quarter of it, because its integrated GPU-seconds are a quarter.
A pod whose GPUs have no `*/gpu` name (Volcano's `volcano.sh/vgpu-number`) pays `nvidia.com/gpu`'s price
(`watchdog.state.cluster.gpu_resource`); `gpu_models` by the node's `nvidia.com/gpu.product` still win.

The three bases, per resource then summed: requested = what the run held (requested resource-seconds
x price), used = what it used (measured resource-seconds x price), idle = requested - used, never
below 0 per resource (a resource used beyond its request does not pay for another one left idle).

A run no usage sample saw (a 10-second job between two polls, or one that ran while collection was
down) has no integrated seconds; its requested basis comes from the ledger's own start, end and
requests at the base prices (the ledger does not know its node), its used basis is 0. Prices are
per hour in the settings (`costs:`), per second here.

The same definition in SQL (`cost_sums`), for the /metrics counters, which sum the whole ledger by
queue; retention moves the cost of the rows it removes into `cost_retired` in the transaction that
removes them (`delete_runs`), so ledger + retired never goes down.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, case, delete, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.cost_settings import GPU_PRODUCT_LABEL, Costs
from volcano_monitor.watchdog.state.db.models import CostRetired, JobRun
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.samples import PodInfo

HOUR = 3600.0
GIB = float(2**30)
DEFAULT_GPU = "nvidia.com/gpu"
RESOURCES = ("cpu", "memory", "gpu")
BASES = ("requested", "used", "idle")


@dataclass(frozen=True, slots=True)
class Price:
    """Per second: a core, a byte of memory, a GPU."""

    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0


FREE = Price()


def is_priced(costs: Costs) -> bool:
    """Whether `costs:` sets any price: without one every cost is 0, and the API and UI show none rather
    than zeros that look like free runs."""
    return bool(costs.prices or costs.gpu_models or costs.node_pools)


def _gpu_price(prices: Mapping[str, float], resource: str) -> float:
    """Per GPU-hour of `resource`; a GPU of a resource not priced (or a pod whose GPU resource is unknown)
    pays nvidia.com/gpu's price, else the first GPU price given."""
    if resource in prices:
        return prices[resource]
    if DEFAULT_GPU in prices:
        return prices[DEFAULT_GPU]
    return next((p for name, p in prices.items() if name.endswith("/gpu")), 0.0)


def price_of(costs: Costs, labels: Mapping[str, str] | None, gpu_resource: str = "") -> Price:
    """The per-second price on a node with these labels (None: node unknown, base prices): the base
    prices, replaced by the first node pool whose selector matches, then a GPU model's price."""
    prices: Mapping[str, float] = costs.prices
    labels = labels or {}
    for pool in costs.node_pools:
        if all(labels.get(key) == value for key, value in pool.node_selector.items()):
            prices = {**costs.prices, **pool.prices}
            break
    gpu = _gpu_price(prices, gpu_resource)
    model = labels.get(GPU_PRODUCT_LABEL)
    if model is not None and model in costs.gpu_models:
        gpu = costs.gpu_models[model]
    return Price(cpu=prices.get("cpu", 0.0) / HOUR, memory=prices.get("memory", 0.0) / HOUR / GIB, gpu=gpu / HOUR)


class PriceBook:
    """Prices of pods by their node, for the usage recorder. `labels` says a node's labels (None while the
    node is unknown: base prices)."""

    def __init__(self, costs: Costs, labels: Callable[[str], Mapping[str, str] | None] = lambda _: None) -> None:
        self.costs = costs
        self.labels = labels
        self.base = price_of(costs, None)

    def __call__(self, pod: PodInfo) -> Price:
        if not is_priced(self.costs):
            return FREE
        return price_of(self.costs, self.labels(pod.node) if pod.node else None, pod.gpu_resource)


@dataclass(frozen=True, slots=True)
class RunCost:
    """One run's cost per resource and basis (currency units)."""

    requested: Mapping[str, float]
    used: Mapping[str, float]
    held: Mapping[str, float]  # requested resource-seconds (core-, byte-, GPU-seconds) the requested cost is for

    @property
    def idle(self) -> dict[str, float]:
        return {r: max(0.0, self.requested[r] - self.used[r]) for r in RESOURCES}

    def total(self, basis: str) -> float:
        values = self.idle if basis == "idle" else self.requested if basis == "requested" else self.used
        return sum(values.values())


def held_seconds(started: datetime | None, ended: datetime | None) -> float:
    """How long a run held its requests by the ledger's own times (0 while it runs or never started)."""
    if started is None or ended is None:
        return 0.0
    return max(0.0, (ended - started).total_seconds())


def run_cost(run: Any, costs: Costs) -> RunCost:
    """A ledger row's cost (any object with job_runs' columns). Integrated cost where usage samples saw
    the run; for a run none saw, requested = its requests x (end - start) at the base prices."""
    used = {"cpu": run.cost_cpu_used, "memory": run.cost_memory_used, "gpu": run.cost_gpu_used}
    requested = {"cpu": run.cost_cpu_requested, "memory": run.cost_memory_requested, "gpu": run.cost_gpu_requested}
    held = {"cpu": run.cpu_core_seconds_requested, "memory": run.memory_byte_seconds_requested,
            "gpu": run.gpu_seconds_requested}
    sampled = (run.cpu_core_seconds_requested or run.memory_byte_seconds_requested or run.gpu_seconds_requested
               or run.cpu_core_seconds_used or run.memory_byte_seconds_used or run.gpu_seconds_used)
    if not sampled:
        seconds = held_seconds(run.started_at, run.finished_at or run.deleted_at)
        held = {"cpu": run.requested_cpu_cores * seconds, "memory": run.requested_memory_bytes * seconds,
                "gpu": run.requested_gpus * seconds}
        base = price_of(costs, None)
        requested = {"cpu": held["cpu"] * base.cpu, "memory": held["memory"] * base.memory,
                     "gpu": held["gpu"] * base.gpu}
    return RunCost(requested=requested, used=used, held=held)


def _run_seconds(dialect: str) -> Any:
    """watchdog.state.ledger.run_seconds (which imports this module for retention, so it is not imported)."""
    end = func.coalesce(JobRun.finished_at, JobRun.deleted_at)
    if dialect == "sqlite":
        return (func.julianday(end) - func.julianday(JobRun.started_at)) * 86400.0
    return func.extract("epoch", end - JobRun.started_at)


def cost_sums(dialect: str, costs: Costs) -> tuple[Any, Any, Any]:
    """SUM() of `run_cost`'s three bases over job_runs rows, as SQL expressions of `dialect` (for a GROUP BY)."""
    r = JobRun
    sampled = (r.cpu_core_seconds_requested + r.memory_byte_seconds_requested + r.gpu_seconds_requested
               + r.cpu_core_seconds_used + r.memory_byte_seconds_used + r.gpu_seconds_used) > 0
    seconds = func.coalesce(_run_seconds(dialect), 0.0)
    held = case((seconds > 0, seconds), else_=0.0)
    base = price_of(costs, None)

    def requested(cost: Any, amount: Any, price: float) -> ColumnElement[float]:
        return case((sampled, cost), else_=amount * held * price)

    def idle(req: ColumnElement[float], used: Any) -> ColumnElement[float]:
        return case((req > used, req - used), else_=0.0)

    cpu = requested(r.cost_cpu_requested, r.requested_cpu_cores, base.cpu)
    memory = requested(r.cost_memory_requested, r.requested_memory_bytes, base.memory)
    gpu = requested(r.cost_gpu_requested, r.requested_gpus, base.gpu)
    return (func.sum(cpu + memory + gpu), func.sum(r.cost_cpu_used + r.cost_memory_used + r.cost_gpu_used),
            func.sum(idle(cpu, r.cost_cpu_used) + idle(memory, r.cost_memory_used) + idle(gpu, r.cost_gpu_used)))


def delete_runs(session: Session | Connection, where: ColumnElement[bool] | Sequence[int], costs: Costs) -> int:
    """Delete the job_runs rows `where` selects (or with these ids) and add their cost to `cost_retired`, in
    the caller's transaction; the rows deleted. DELETE ... RETURNING: what is retired is exactly what this
    statement deleted, so two retention passes racing (a leader handing over) cannot retire a run twice."""
    condition = JobRun.id.in_(list(where)) if isinstance(where, Sequence) else where
    # On a Connection (the chunked retention) the ORM delete is not scoped by a Session: name the cluster.
    condition = and_(JobRun.cluster == cluster_of(session), condition)
    dialect = session.dialect.name if isinstance(session, Connection) else session.get_bind().dialect.name
    r = JobRun
    gone = session.execute(delete(r).where(condition).returning(
        r.queue, r.started_at, r.finished_at, r.deleted_at, r.requested_cpu_cores, r.requested_memory_bytes,
        r.requested_gpus, r.cpu_core_seconds_requested, r.cpu_core_seconds_used, r.memory_byte_seconds_requested,
        r.memory_byte_seconds_used, r.gpu_seconds_requested, r.gpu_seconds_used, r.cost_cpu_used,
        r.cost_cpu_requested, r.cost_memory_used, r.cost_memory_requested, r.cost_gpu_used,
        r.cost_gpu_requested).execution_options(synchronize_session=False)).all()
    sums: dict[str, list[float]] = {}
    for run in gone:
        priced = run_cost(run, costs)
        have = sums.setdefault(run.queue, [0.0, 0.0, 0.0])
        for i, basis in enumerate(BASES):
            have[i] += priced.total(basis)
    table: Any = CostRetired.__table__
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
    statement = insert.on_conflict_do_update(index_elements=[table.c.cluster, table.c.queue], set_={
        name: table.c[name] + insert.excluded[name] for name in BASES})
    for queue, (requested, used, idle) in sums.items():
        session.execute(statement, {"queue": queue, "requested": requested, "used": used, "idle": idle})
    return len(gone)


CostTotals = dict[str, tuple[float, float, float]]  # queue -> (requested, used, idle)


def queue_cost_totals(session: Session, costs: Costs) -> CostTotals:
    """Per queue, (requested, used, idle) of every run the ledger holds plus what retention retired."""
    dialect = session.get_bind().dialect.name
    totals: dict[str, tuple[float, float, float]] = {}
    for queue, requested, used, idle in session.execute(
            select(JobRun.queue, *cost_sums(dialect, costs)).group_by(JobRun.queue)):
        totals[queue] = (float(requested or 0), float(used or 0), float(idle or 0))
    for row in session.scalars(select(CostRetired)):
        have = totals.get(row.queue, (0.0, 0.0, 0.0))
        totals[row.queue] = (have[0] + row.requested, have[1] + row.used, have[2] + row.idle)
    return totals


def _queue_period(queue: str, since: datetime, until: datetime) -> tuple[ColumnElement[bool], ColumnElement[bool],
                                                                       ColumnElement[Any]]:
    """The runs of `queue` and its children, those counted in [since, until), and their start."""
    r = JobRun
    end = func.coalesce(r.finished_at, r.deleted_at)
    started = func.coalesce(r.started_at, r.created_at)
    in_tree = or_(r.queue == queue, r.queue_path.like(f"{queue}/%"), r.queue_path.like(f"%/{queue}/%"))
    in_period = or_(and_(end >= since, end < until), and_(end.is_(None), started < until))
    return in_tree, in_period, started


def queue_period_costs(session: Session, costs: Costs, queue: str, since: datetime,
                       until: datetime, namespaces: Set[str] | None = None) -> tuple[float, float, float]:
    """(requested, used, idle) of `queue` and its children over [since, until), as a report counts it: the
    runs that ended in it, and those still running at its end that started before it (their cost so far).
    `namespaces`: only those namespaces' runs (a reader's scope, auth.mode kubernetes; None: all)."""
    dialect = session.get_bind().dialect.name
    in_tree, in_period, _ = _queue_period(queue, since, until)
    only = [JobRun.namespace.in_(namespaces)] if namespaces is not None else []
    row = session.execute(select(*cost_sums(dialect, costs)).where(in_tree, in_period, *only)).one()
    return float(row[0] or 0.0), float(row[1] or 0.0), float(row[2] or 0.0)


def queue_period_cost(session: Session, costs: Costs, queue: str, since: datetime, until: datetime) -> float:
    """The requested-basis cost of `queue_period_costs`: what a budget counts as spent."""
    return queue_period_costs(session, costs, queue, since, until)[0]


def queue_period_first_start(session: Session, queue: str, since: datetime, until: datetime) -> datetime | None:
    """When the earliest run counted in [since, until) for `queue` and its children started (None: no run). A
    budget's rate runs from the later of this and the period's start: a queue (or a watchdog) that began
    spending mid-period spends at its own rate, not at its spending spread over days it did not run."""
    in_tree, in_period, started = _queue_period(queue, since, until)
    first = session.scalar(select(func.min(started)).where(in_tree, in_period))
    if not isinstance(first, datetime):
        return None
    return first if first.tzinfo else first.replace(tzinfo=UTC)
