"""Cost on the ledger: prices per node (pools, GPU models), applied as the recorder integrates usage, and a
run's three bases (requested, used, idle), including a run no usage sample saw."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from volcano_monitor.core.model import parse_job, parse_queue
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.state.ledger import Ledger
from volcano_monitor.watchdog.state.prices import HOUR, PriceBook, price_of, run_cost
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.samples import PodInfo, UsageSample

T0 = 1_699_999_800.0
GIB = 2.0**30
COSTS = Costs.model_validate({
    "currency": "EUR",
    "prices": {"cpu": 0.04, "memory": 0.005, "nvidia.com/gpu": 2.5},
    "gpu_models": {"NVIDIA-A100-SXM4-80GB": 4.0},
    "node_pools": [{"node_selector": {"pool": "spot"}, "prices": {"cpu": 0.01}},
                   {"node_selector": {"pool": "spot", "zone": "b"}, "prices": {"cpu": 99.0}}],
})
NODES = {"plain": {}, "spot-1": {"pool": "spot", "zone": "b"},
         "a100": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "pool": "spot"}}


class NoBook:
    def add_usage(self, *_: object) -> None:
        pass


def pod(uid: str, node: str, cpu: float = 2.0, memory: float = 4 * GIB, gpus: float = 0.0) -> PodInfo:
    return PodInfo(job_uid=uid, job_name=uid, namespace="team-a", workload=uid, task="worker", queue="q",
                   phase="Running", cpu_request_cores=cpu, memory_request_bytes=memory, gpus=gpus, node=node,
                   gpu_resource="nvidia.com/gpu" if gpus else "")


def add_run(session: Session, uid: str) -> None:
    now = datetime.fromtimestamp(T0, UTC)
    session.add(JobRun(uid=uid, namespace="team-a", name=uid, workload=uid, queue="q", updated_at=now))
    session.flush()


def record(engine: Engine, pods: dict[str, PodInfo], samples: list[UsageSample]) -> dict[str, JobRun]:
    """Integrate `samples` of `pods` (by pod name) with COSTS priced by NODES, flush, and read the runs."""
    recorder = UsageRecorder(NoBook(), expected_interval_seconds=30, prices=PriceBook(COSTS, NODES.get))
    recorder.ingest(samples, lambda _, name: pods.get(name))
    with Session(engine) as session:
        for uid in {p.job_uid for p in pods.values()}:
            add_run(session, uid)
        recorder.flush(session, datetime.fromtimestamp(T0 + 3600, UTC), final=True)
        session.commit()
    with Session(engine) as session:
        return {r.uid: r for r in session.scalars(select(JobRun))}


def steady(pod_name: str, cpu: float, memory: float, gpu: float | None = None, gpus: int = 0,
           minutes: int = 10) -> list[UsageSample]:
    """A sample every 30 s for `minutes` (the first stands for its 30 s window)."""
    return [UsageSample(T0 + i * 30, "team-a", pod_name, "main", cpu, memory, gpu, gpus, window=30.0)
            for i in range(minutes * 2)]


def test_price_of_a_node_base_pool_first_match_and_gpu_model() -> None:
    assert price_of(COSTS, None).cpu * HOUR == pytest.approx(0.04)
    assert price_of(COSTS, {"pool": "spot", "zone": "b"}).cpu * HOUR == pytest.approx(0.01)  # the first pool wins
    assert price_of(COSTS, {"pool": "spot"}).memory * HOUR * GIB == pytest.approx(0.005)  # not named: base
    assert price_of(COSTS, {}, "nvidia.com/gpu").gpu * HOUR == pytest.approx(2.5)
    assert price_of(COSTS, NODES["a100"], "nvidia.com/gpu").gpu * HOUR == pytest.approx(4.0)
    assert price_of(COSTS, {}, "amd.com/gpu").gpu * HOUR == pytest.approx(2.5)  # unpriced vendor: nvidia's


def test_an_idle_gpu_jobs_used_gpu_cost_is_below_its_requested_cost(engine: Engine) -> None:
    runs = record(engine, {"p": pod("idle", "plain", gpus=1)}, steady("p", 1.0, 2 * GIB, gpu=5.0, gpus=1))
    cost = run_cost(runs["idle"], COSTS)
    held = 600.0  # 20 samples of 30 s, the first standing for its window
    assert cost.requested["gpu"] == pytest.approx(held / HOUR * 2.5)
    assert cost.used["gpu"] == pytest.approx(0.05 * held / HOUR * 2.5)
    assert cost.used["gpu"] < cost.requested["gpu"]
    assert cost.idle["gpu"] == pytest.approx(cost.requested["gpu"] - cost.used["gpu"])
    assert cost.requested["cpu"] == pytest.approx(2 * held / HOUR * 0.04)
    assert cost.used["cpu"] == pytest.approx(cost.requested["cpu"] / 2)
    assert cost.total("idle") == pytest.approx(sum(cost.idle.values()))


def test_node_pools_and_gpu_models_price_a_run_by_the_node_its_pods_ran_on(engine: Engine) -> None:
    pods = {"a": pod("same", "plain", gpus=1), "b": pod("spot", "spot-1", gpus=1), "c": pod("a100", "a100", gpus=1)}
    samples = [s for name in pods for s in steady(name, 2.0, 4 * GIB, gpu=100.0, gpus=1)]
    cost = {uid: run_cost(run, COSTS) for uid, run in record(engine, pods, samples).items()}
    held = 600.0 / HOUR
    assert cost["same"].requested["cpu"] == pytest.approx(2 * held * 0.04)
    assert cost["spot"].requested["cpu"] == pytest.approx(2 * held * 0.01)  # the spot pool's core
    assert cost["a100"].requested["cpu"] == pytest.approx(2 * held * 0.01)  # a100 nodes are in the pool too
    assert cost["same"].requested["gpu"] == pytest.approx(held * 2.5)
    assert cost["spot"].requested["gpu"] == pytest.approx(held * 2.5)
    assert cost["a100"].requested["gpu"] == pytest.approx(held * 4.0)  # the GPU model's price
    assert cost["a100"].used["gpu"] == pytest.approx(held * 4.0)  # fully used: nothing idle
    assert cost["a100"].idle["gpu"] == pytest.approx(0.0)


def test_a_pod_on_a_node_not_known_yet_pays_the_base_prices(engine: Engine) -> None:
    runs = record(engine, {"p": pod("r", "nowhere")}, steady("p", 1.0, GIB))
    assert run_cost(runs["r"], COSTS).requested["cpu"] == pytest.approx(2 * 600 / HOUR * 0.04)


def test_without_prices_every_run_costs_nothing(engine: Engine) -> None:
    recorder = UsageRecorder(NoBook(), expected_interval_seconds=30, prices=PriceBook(Costs(), NODES.get))
    recorder.ingest(steady("p", 1.0, GIB), lambda _, name: pod("r", "spot-1", gpus=1))
    with Session(engine) as session:
        add_run(session, "r")
        recorder.flush(session, datetime.fromtimestamp(T0 + 3600, UTC), final=True)
        session.commit()
        run = session.scalars(select(JobRun)).one()
        assert run.cpu_core_seconds_requested > 0
        assert run_cost(run, Costs()).total("requested") == 0.0


def test_a_ten_second_job_is_billed(engine: Engine) -> None:
    """No usage sample sees a 10-second job (polls are 30 s apart); the ledger saw its start and finish."""
    started = datetime(2024, 5, 1, 10, 1, tzinfo=UTC)
    raw = {"metadata": {"name": "blink", "namespace": "team-a", "uid": "blink-uid", "resourceVersion": "7",
                        "creationTimestamp": "2024-05-01T10:00:00Z"},
           "spec": {"queue": "q", "tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": [
               {"name": "main", "resources": {"requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}}]}}}]},
           "status": {"state": {"phase": "Completed"}, "conditions": [
               {"status": "Running", "lastTransitionTime": "2024-05-01T10:01:00Z"},
               {"status": "Completed", "lastTransitionTime": "2024-05-01T10:01:10Z"}]}}
    with Session(engine) as session:
        Ledger().on_job("MODIFIED", parse_job(raw), session, started + timedelta(seconds=10))
        session.commit()
        run = session.scalars(select(JobRun)).one()
    assert run.cpu_core_seconds_requested == 0  # no sample saw it
    cost = run_cost(run, COSTS)
    assert cost.requested["cpu"] == pytest.approx(4 * 10 / HOUR * 0.04)
    assert cost.requested["memory"] == pytest.approx(8 * 10 / HOUR * 0.005)
    assert cost.requested["gpu"] == pytest.approx(10 / HOUR * 2.5)
    assert cost.total("requested") > 0 and cost.total("used") == 0
    assert cost.total("idle") == pytest.approx(cost.total("requested"))
    # still running (no end yet): nothing held so far by the ledger's own times
    assert run_cost(replace_end(run), COSTS).total("requested") == 0


def replace_end(run: JobRun) -> JobRun:
    return JobRun(**{c: getattr(run, c) for c in ("cpu_core_seconds_requested", "memory_byte_seconds_requested",
                                                    "gpu_seconds_requested", "cpu_core_seconds_used",
                                                    "memory_byte_seconds_used", "gpu_seconds_used", "cost_cpu_used",
                                                    "cost_cpu_requested", "cost_memory_used", "cost_memory_requested",
                                                    "cost_gpu_used", "cost_gpu_requested", "requested_cpu_cores",
                                                    "requested_memory_bytes", "requested_gpus", "started_at")},
                  finished_at=None, deleted_at=None)


def test_cost_is_stored_with_the_usage_so_a_restart_between_flushes_changes_nothing(engine: Engine) -> None:
    """One recorder over 20 minutes, or two (a kill -9 and a new leader after 10 minutes, which starts from the
    stored rows), store the same cost: it is added in the same statement as the seconds."""
    samples = steady("p", 1.0, 2 * GIB, gpu=50.0, gpus=1, minutes=20)
    one = record(engine, {"p": pod("once", "a100", gpus=1)}, samples)["once"]
    pods = {"p": pod("twice", "a100", gpus=1)}
    first = UsageRecorder(NoBook(), expected_interval_seconds=30, prices=PriceBook(COSTS, NODES.get))
    first.ingest(samples[:20], lambda _, name: pods.get(name))
    with Session(engine) as session:
        add_run(session, "twice")
        first.flush(session, datetime.fromtimestamp(T0 + 600, UTC), final=True)
        session.commit()
    # what `first` ingests after its last committed flush dies with it; the new leader resumes from its own samples
    second = UsageRecorder(NoBook(), expected_interval_seconds=30, prices=PriceBook(COSTS, NODES.get))
    second.ingest(samples[19:], lambda _, name: pods.get(name))  # it sees the last sample first saw too
    with Session(engine) as session:
        second.flush(session, datetime.fromtimestamp(T0 + 3600, UTC), final=True)
        session.commit()
        two = session.scalars(select(JobRun).where(JobRun.uid == "twice")).one()
    for column in ("cpu_core_seconds_requested", "cost_cpu_requested", "cost_gpu_used", "cost_gpu_requested"):
        stored_seconds_ratio = getattr(two, column) / getattr(one, column)
        # the new leader credits its first sample with its window (30 s) again: at most one interval more
        assert 1.0 <= stored_seconds_ratio <= 1.0 + 30.0 / 1200.0 + 1e-9, column
    ratio = two.cost_gpu_requested / two.gpu_seconds_requested
    assert ratio == pytest.approx(one.cost_gpu_requested / one.gpu_seconds_requested)  # same price per second



def test_queue_path_walks_the_parents_root_first() -> None:
    index = ClusterIndex()
    for name, parent in (("root", ""), ("eng", "root"), ("team-a", "eng"), ("loop-a", "loop-b"), ("loop-b", "loop-a")):
        index.on_queue("ADDED", parse_queue({"metadata": {"name": name}, "spec": {"parent": parent} if parent else {}}))
    assert index.queue_path("team-a") == "root/eng/team-a"
    assert index.queue_path("unknown") == "unknown"  # not seen yet: its name alone
    assert index.queue_path("loop-a") == "loop-b/loop-a"  # a cycle in the parents ends the walk
    assert index.queue_path("") == ""
