"""Usage back-fill from Prometheus (watchdog.findings.recommendations.backfill): a real Prometheus holding
8 days of generated cAdvisor history (promtool blocks), the real watchdog (worker, leader path, SQLite and
PostgreSQL), and the same samples fed through the live path (`UsageRecorder.ingest`) for comparison."""

from __future__ import annotations

import math
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from tests.simtools import client_for, wait_for
from tests.watchdog.promhistory import PrometheusServer, create_blocks
from volcano_monitor.core.kube.informer import ADDED
from volcano_monitor.core.kube.leaderelection import LeaderElector
from volcano_monitor.core.model import parse_pod
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.config import ConfigError, Settings, load
from volcano_monitor.watchdog.findings.recommendations.backfill import BackfillBatch, Backfiller
from volcano_monitor.watchdog.findings.recommendations.backfill_queries import (
    Attributor,
    Workload,
    batch_selector,
    cpu_range_query,
    pod_pattern,
)
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook, compute_recommendations
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.runtime.app import Intervals, Watchdog
from volcano_monitor.watchdog.runtime.settings import LeaderElection
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import WorkloadBackfill, WorkloadHistogram
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.samples import PodInfo, UsageSample

DAY = 86400
BLOCK = 300  # CPU usage is constant within each 5-minute block (the back-fill's step)
LEVELS = {"main": (2.0, 4 * 2**30), "sidecar": (0.1, 200 * 2**20), "app": (0.5, 2**30)}  # cores, bytes


@dataclass(frozen=True)
class Run:
    namespace: str
    pod: str
    containers: tuple[str, ...]
    start: int
    end: int
    workload: str  # "" for decoys: pods the back-fill must not attribute
    task: str
    scale: float = 1.0


def runs(t0: int) -> list[Run]:
    out = []
    for i in range(8):  # train: one run a day, 2 pods, 20 hours (crossing midnight)
        for index in range(2):
            out.append(Run("team-a", f"train-{20240501 + i}-0600-worker-{index}", ("main", "sidecar"),
                           t0 + i * DAY, t0 + i * DAY + 20 * 3600, "train", "worker"))
    consonants = "bcdfghjklmnpqrstvwxz"
    for j in range(32):  # etl.v2: a run every 6 hours, 4 hours long, generated suffixes
        suffix = "".join(consonants[(j * 7 + k * 3) % len(consonants)] for k in range(5))
        out.append(Run("team-b", f"etl.v2-{suffix}-extract-0", ("app",), t0 + j * 21600, t0 + j * 21600 + 14400,
                       "etl.v2", "extract"))
    # Decoys, 25x the usage: `.` must not match any character, `-extra` is not a run suffix, and the
    # same pod name in a namespace outside the batch belongs to another workload.
    out.append(Run("team-b", "etlxv2-bcdfg-extract-0", ("app",), t0 + DAY, t0 + 2 * DAY, "", "", 25.0))
    out.append(Run("team-a", "train-extra-worker-0", ("main",), t0 + DAY, t0 + 2 * DAY, "", "", 25.0))
    out.append(Run("team-c", "train-20240501-0600-worker-0", ("main",), t0, t0 + 2 * DAY, "", "", 25.0))
    return out


def usage(run: Run, container: str) -> tuple[dict[int, float], dict[int, float]]:
    """CPU cores per 5-minute block (keyed by its start) and working-set bytes per minute over (start, end]."""
    rng = random.Random(f"{run.namespace}/{run.pod}/{container}")
    cores, memory = LEVELS[container]
    level = memory * (1 + rng.uniform(0, 0.3))
    cpu = {b: run.scale * cores * (1 + 0.4 * math.sin(2 * math.pi * b / DAY)) * rng.lognormvariate(0, 0.3)
           for b in range(run.start, run.end, BLOCK)}
    mem = {m: run.scale * level * (1 + 0.2 * math.sin(2 * math.pi * m / DAY)) * (1 + 0.05 * rng.random())
           for m in range(run.start + 60, run.end + 1, 60)}
    return cpu, mem


def openmetrics(all_runs: list[Run], path: Path) -> None:
    cpu_lines, mem_lines = [], []
    for run in all_runs:
        for container in run.containers:
            labels = f'namespace="{run.namespace}",pod="{run.pod}",container="{container}"'
            cpu, mem = usage(run, container)
            counter = 0.0
            cpu_lines.append(f"container_cpu_usage_seconds_total{{{labels}}} 0 {run.start}")
            for m in range(run.start + 60, run.end + 1, 60):
                counter += cpu[(m - 1) // BLOCK * BLOCK] * 60
                cpu_lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {counter!r} {m}")
                mem_lines.append(f"container_memory_working_set_bytes{{{labels}}} {mem[m]!r} {m}")
    path.write_text("# TYPE container_cpu_usage_seconds counter\n" + "\n".join(cpu_lines) + "\n"
                    "# TYPE container_memory_working_set_bytes gauge\n" + "\n".join(mem_lines) + "\n# EOF\n")


def live_book(all_runs: list[Run], settings: Recommendations) -> HistogramBook:
    """The same usage, a sample a minute per container, through the live path (recorder -> histograms)."""
    book = HistogramBook(settings)
    recorder = UsageRecorder(book, expected_interval_seconds=60)
    infos = {(r.namespace, r.pod): PodInfo("", r.pod, r.namespace, r.workload, r.task, "q", "Running", 1, 1, 0)
             for r in all_runs if r.workload}
    samples = []
    for run in all_runs:
        if not run.workload:
            continue
        for container in run.containers:
            cpu, mem = usage(run, container)
            samples += [UsageSample(float(m), run.namespace, run.pod, container, cpu[(m - 1) // BLOCK * BLOCK],
                                    mem[m], window=60) for m in range(run.start + 60, run.end + 1, 60)]
    samples.sort(key=lambda s: s.ts)
    assert recorder.ingest(samples, lambda ns, pod: infos.get((ns, pod))) == len(samples)
    return book


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Run]]]:
    """A real Prometheus with 8 days of history ending 5 minutes ago."""
    workdir = tmp_path_factory.mktemp("prom")
    t1 = int(time.time()) // BLOCK * BLOCK - BLOCK
    all_runs = runs(t1 - 8 * DAY + 3600)
    openmetrics(all_runs, workdir / "history.om")
    create_blocks(workdir / "history.om", workdir / "data")
    server = PrometheusServer(workdir / "data", workdir).wait_ready()
    try:
        yield server.url, all_runs
    finally:
        server.stop()


def raw_pod(namespace: str, name: str, job: str, task: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "labels": {"volcano.sh/job-name": job, "volcano.sh/task-spec": task,
                                    "volcano.sh/queue-name": "q"},
                         "annotations": {"scheduling.k8s.io/group-name": f"{job}-pg"}},
            "spec": {"schedulerName": "volcano", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}}


def settings_for(database_url: str, prometheus_url: str) -> Settings:
    return load(None, environ={}, database_url=database_url, sources={
        "metrics_api": {"enabled": False},
        "prometheus": {"enabled": False, "url": prometheus_url, "timeout_seconds": 30,
                       # history of any length qualifies: only the record keeps a second pass away
                       "backfill": {"enabled": True, "min_history_days": 90, "interval_seconds": 0.5}}})


def start_watchdog(settings: Settings, engine: Engine, leader: LeaderElector | None = None) -> Watchdog:
    watchdog = Watchdog(settings, engine, None, Intervals(checks=0.5, waste=5, flush=0.5), leader=leader).start()
    for namespace, pod, job, task in (("team-a", "train-20240509-0600-worker-0", "train-20240509-0600", "worker"),
                                      ("team-b", "etl.v2-zzzzz-extract-0", "etl.v2-zzzzz", "extract")):
        watchdog.enqueue("pods", ADDED, (parse_pod(raw_pod(namespace, pod, job, task)), ""))
    return watchdog


def stored_samples(engine: Engine) -> dict[tuple[str, str, str, str], int]:
    with Session(engine) as session:
        table = WorkloadHistogram
        return {(r.namespace, r.workload, r.task, r.container): r.samples for r in session.execute(
            select(table.namespace, table.workload, table.task, table.container, table.samples))}


@pytest.mark.slow(40)
def test_backfill_recommendations_equal_the_live_feed_and_happen_once(
        history: tuple[str, list[Run]], database_url: str) -> None:
    url, all_runs = history
    settings = settings_for(database_url, url)
    engine = make_engine(database_url)
    watchdog = start_watchdog(settings, engine)
    try:
        backfiller = watchdog.backfiller
        assert backfiller is not None

        def recorded() -> int:
            with Session(engine) as session:
                return int(session.scalar(select(func.count()).select_from(WorkloadBackfill)) or 0)

        wait_for(lambda: recorded() == 2, timeout=120)
        queries, passes = backfiller.queries, backfiller.passes
        # One batch, both workloads and their 48 pods: memory (one range query and the open interval)
        # and 8-9 daily CPU chunks, whatever the number of pods.
        assert 3 <= queries <= 12, queries
        wait_for(lambda: backfiller.passes >= passes + 3, timeout=30)
        assert backfiller.queries == queries and recorded() == 2  # later passes find them recorded
        metrics = backfiller.render_metrics()
        assert "volcano_watchdog_backfill_workloads_total 2\n" in metrics
        assert f"volcano_watchdog_backfill_samples_total {backfiller.samples_added}\n" in metrics
        assert backfiller.samples_added > 0 and not backfiller.errors
    finally:
        watchdog.stop()
    with Session(engine) as session:
        rows = session.scalars(select(WorkloadBackfill)).all()
        now = max(row.range_end for row in rows)
        backfilled = {(r.namespace, r.workload, r.task, r.container): r
                      for r in compute_recommendations(session, settings.recommendations, now)}
    live = live_book(all_runs, settings.recommendations)
    expected_keys = {("team-a", "train", "worker", "main"), ("team-a", "train", "worker", "sidecar"),
                     ("team-b", "etl.v2", "extract", "app")}
    assert set(backfilled) == expected_keys  # nothing from the decoys
    for key in sorted(expected_keys):
        want, got = live.recommendation(*key, now), backfilled[key]
        assert want is not None
        for name in ("cpu_target_cores", "cpu_upper_cores", "memory_target_bytes", "memory_upper_bytes",
                     "confidence"):
            a, b = getattr(want, name), getattr(got, name)
            assert abs(a - b) <= 0.05 * a, f"{key} {name}: live {a}, back-filled {b}"
        assert got.samples == want.samples, key
    assert backfilled[("team-a", "train", "worker", "main")].confidence == 1.0  # confident on day one
    assert sum(row.samples for row in rows) == backfiller.samples_added
    assert {(row.namespace, row.workload): row.samples for row in rows} == {
        ("team-a", "train"): sum(backfilled[k].samples for k in expected_keys if k[1] == "train"),
        ("team-b", "etl.v2"): backfilled[("team-b", "etl.v2", "extract", "app")].samples}

    # A restart (or a second replica taking over) finds the records: no query, no sample added.
    before = stored_samples(engine)
    again = start_watchdog(settings, engine)
    try:
        second = again.backfiller
        assert second is not None
        wait_for(lambda: second.passes >= 3, timeout=30)
        assert second.queries == 0 and second.workloads_done == 0
    finally:
        again.stop()
    assert stored_samples(engine) == before
    engine.dispose()


def test_a_rolled_back_merge_is_undone_and_a_second_store_adds_nothing(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    settings = load(None, environ={}, database_url=database_url)
    book = HistogramBook(settings.recommendations)
    now_ts = 1_700_000_000.0
    book.add_usage("ns", "w", "t", "c", now_ts, 1.0, 2**30)  # the live path's first sample
    backfiller = Backfiller(settings.sources.prometheus, settings.recommendations, engine, book)
    older = HistogramBook(settings.recommendations)
    for i in range(1, 2001):
        older.add_usage("ns", "w", "t", "c", now_ts - 300 * i, 0.5 + (i % 7) / 10, 2**29 + i * 2**16, count=5)
    batch = BackfillBatch([Workload("ns", "w", ("t",))], older, now_ts - 2000 * 300, now_ts)
    batch.samples[("ns", "w")] = 10_000
    now = datetime.fromtimestamp(now_ts, UTC)

    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        assert backfiller.store(batch, session, now) == 1
        assert book.recommendation("ns", "w", "t", "c", now).samples == 10_001  # type: ignore[union-attr]
        raise RuntimeError("the database went away before the commit")
    backfiller.rolled_back()
    assert book.recommendation("ns", "w", "t", "c", now).samples == 1  # type: ignore[union-attr]

    for attempt in range(2):  # the retry merges; a second store of the same batch finds the record
        with Session(engine) as session, session.begin():
            assert backfiller.store(batch, session, now) == (1 if attempt == 0 else 0)
        backfiller.committed([batch])
    with Session(engine) as session:
        stored = compute_recommendations(session, settings.recommendations, now)
    assert [(r.workload, r.samples) for r in stored] == [("w", 10_001)]
    assert batch.stored.is_set()
    engine.dispose()


def test_queries_escape_names_and_select_a_batch_in_one_matcher() -> None:
    workloads = [Workload("team-b", "etl.v2", ("extract",)), Workload('we"ird', "a|b", ("t(1)",)),
                 Workload("team-a", "train", ("worker", "ps"))]
    promql = cpu_range_query(batch_selector(workloads), "5m")
    parsed = promql_parser.parse(promql)  # one valid query for the whole batch
    assert promql.count("container_cpu_usage_seconds_total") == 1 and parsed is not None
    attribute = Attributor(workloads)
    assert attribute("team-b", "etl.v2-7k2pq-extract-0") == ("etl.v2", "extract")
    assert attribute("team-b", "etlxv2-7k2pq-extract-0") is None  # `.` is literal
    assert attribute('we"ird', "a|b-t(1)-3") == ("a|b", "t(1)")
    assert attribute('we"ird', "a-t(1)-3") is None  # `|` is literal
    assert attribute("team-a", "train-20240501-1200-ps-12") == ("train", "ps")
    assert attribute("team-a", "train-extra-worker-0") is None  # `-extra` is no run suffix
    assert attribute("team-c", "train-worker-0") is None  # another namespace
    assert pod_pattern(workloads[0]).startswith(r"etl\.v2(")


@pytest.mark.parametrize("live_hours", [3, 60])  # the live history still in the shared interval, or past it
def test_merging_older_history_equals_feeding_it_first(live_hours: int) -> None:
    settings = Recommendations()
    rng = random.Random(live_hours)
    start = 1_700_000_000 - 10 * DAY
    split = start + 8 * DAY + 7 * 3600  # the back-fill ends mid-interval, where the live samples start
    samples = [(float(ts), rng.lognormvariate(0, 0.5), 2**30 * (1 + rng.random()))
               for ts in range(start, split + live_hours * 3600, 300)]
    whole, live, older = (HistogramBook(settings) for _ in range(3))
    for ts, cpu, memory in samples:
        whole.add_usage("ns", "w", "t", "c", ts, cpu, memory)
        (older if ts < split else live).add_usage("ns", "w", "t", "c", ts, cpu, memory)
    assert live.merge_older(older) == [("ns", "w", "t", "c")]
    now = datetime.fromtimestamp(samples[-1][0], UTC)
    want, got = whole.recommendation("ns", "w", "t", "c", now), live.recommendation("ns", "w", "t", "c", now)
    assert want is not None and got is not None
    assert got.samples == want.samples and got.first_sample_at == want.first_sample_at
    assert got.cpu_target_cores == want.cpu_target_cores
    key = ("ns", "w", "t", "c")
    merged_memory, whole_memory = live._entries[key].memory, whole._entries[key].memory  # the histograms themselves
    assert merged_memory.ref is not None and whole_memory.ref is not None
    in_whole_scale = merged_memory.total_weight() * 2.0 ** ((merged_memory.ref - whole_memory.ref) / DAY)
    if live_hours == 3:  # both peaks of the shared interval were known: exactly one (the higher) is kept
        assert got == want
        assert in_whole_scale == pytest.approx(whole_memory.total_weight(), rel=1e-9)
        assert merged_memory.to_dict()["i"] == whole_memory.to_dict()["i"]
    else:  # the live side's first interval is closed (peak not kept): it stands for that interval alone
        assert abs(got.memory_target_bytes - want.memory_target_bytes) <= 0.05 * want.memory_target_bytes
        assert in_whole_scale == pytest.approx(whole_memory.total_weight(), rel=1e-9)  # one peak per interval


def test_two_replicas_back_fill_once_and_the_next_leader_adds_nothing(
        history: tuple[str, list[Run]], database_url: str, tmp_path: Path) -> None:
    url, _ = history
    settings = settings_for(database_url, url)
    sim = SimulatorThread(auto_tick=False, bookmark_interval=1.0).start()
    replicas = []
    try:
        for name in ("wd-a", "wd-b"):
            elector = LeaderElector(client_for(sim, tmp_path / name), LeaderElection(
                enabled=True, identity=name, lease_duration_seconds=2.0, renew_interval_seconds=0.2))
            engine = make_engine(database_url)
            replicas.append((elector, engine, start_watchdog(settings, engine, leader=elector)))
        for elector, _, _ in replicas:
            elector.start()
        engine = replicas[0][1]

        def recorded() -> int:
            with Session(engine) as session:
                return int(session.scalar(select(func.count()).select_from(WorkloadBackfill)) or 0)

        wait_for(lambda: recorded() == 2, timeout=120)
        (leader, _, leading), = [r for r in replicas if r[0].is_leader()]
        (_, _, following), = [r for r in replicas if r[2] is not leading]
        assert leading.backfiller is not None and following.backfiller is not None
        assert following.backfiller.queries == 0 and following.backfiller.passes == 0  # followers never read
        leading.stop()
        leader.stop(release=True)
        before = stored_samples(engine)
        assert sum(before.values()) == leading.backfiller.samples_added > 0
        wait_for(lambda: following.backfiller is not None and following.backfiller.passes >= 3, timeout=30)
        assert following.backfiller.queries == 0 and following.backfiller.workloads_done == 0
        assert recorded() == 2 and stored_samples(engine) == before
    finally:
        for elector, engine, watchdog in replicas:
            watchdog.stop()
            elector.stop(release=True)
            engine.dispose()
        sim.stop()


def test_a_series_of_samples_lands_as_sample_by_sample() -> None:
    settings = Recommendations()
    rng = random.Random(7)
    rows = [(1_700_000_000.0 + 300 * i, rng.lognormvariate(0, 0.5), 2**30 * (1 + rng.random())) for i in range(3000)]
    one_by_one, series = HistogramBook(settings), HistogramBook(settings)
    for ts, cpu, memory in rows:
        one_by_one.add_usage("ns", "w", "t", "c", ts, cpu, memory, count=5)
    bad = [(math.nan, 1.0, 1.0), (1.0, -1.0, 1.0), (2.0, 1.0, math.inf)]
    assert series.add_usage_series("ns", "w", "t", "c", rows + bad, count=5) == len(rows)
    assert series.skipped["bad_backfill_sample"] == 3
    now = datetime.fromtimestamp(rows[-1][0], UTC)
    assert series.recommendation("ns", "w", "t", "c", now) == one_by_one.recommendation("ns", "w", "t", "c", now)
    key = ("ns", "w", "t", "c")
    assert series._entries[key].memory.to_dict() == one_by_one._entries[key].memory.to_dict()
    assert series._entries[key].cpu.to_dict() == one_by_one._entries[key].cpu.to_dict()


def test_prometheus_down_is_counted_and_nothing_is_recorded(database_url: str) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = settings_for(database_url, f"http://127.0.0.1:{port}")
    engine = make_engine(database_url)
    migrate(engine)
    backfiller = Backfiller(settings.sources.prometheus, settings.recommendations, engine,
                            HistogramBook(settings.recommendations))
    handed: list[BackfillBatch] = []
    assert backfiller.run_once([Workload("ns", "w", ("t",))], handed.append, threading.Event()) == 0
    assert handed == [] and backfiller.errors == {"connection": 1} and backfiller.passes == 1
    assert 'volcano_watchdog_backfill_query_errors_total{cause="connection"} 1\n' in backfiller.render_metrics()
    with Session(engine) as session:  # nothing recorded: the next pass tries the workload again
        assert session.scalar(select(func.count()).select_from(WorkloadBackfill)) == 0
    engine.dispose()


def test_chunks_beyond_what_prometheus_answers_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sources\.prometheus\.backfill: .*chunk_hours \(720\) / step_seconds "
                                          r"\(60\) gives 43200 points per series; Prometheus allows 11000"):
        load(None, environ={}, sources={"prometheus": {"backfill": {"chunk_hours": 720, "step_seconds": 60}}})
