"""Scale of usage history (issue 12): storage over 30 days and the writer's latency while retention runs.

History (--history-containers containers, jobs of 4 pods x 2 containers, 10 queues, --days simulated
days): written through the production path, `UsageRecorder.ingest` then `UsageRecorder.flush` + commit,
one sample per container per 5-minute bucket (the collection interval compressed: a bucket's row is
the same however many samples it holds; the recorder is told the interval is 300 s), flushed once per
simulated hour (12 buckets in bulk), then a pass of `watchdog.runtime.retention.run_retention` (hourly, as
retention.check_interval_seconds' default), unpaced (nothing else writes meanwhile). Histograms are not
fed (recommendations never read rollups). On PostgreSQL a plain VACUUM of the rollup tables after every
simulated day stands in for autovacuum, which compressed time gives no chance to run. Rows and bytes
on disk after days 1, 7 and --days (SQLite: the file after a WAL checkpoint, free pages included;
PostgreSQL: pg_total_relation_size of both rollup tables, indexes included). Settings: retention.*
defaults (14 days of rollups, 5-minute rows downsampled to hourly after 24 h). Rows per container do
not depend on the number of containers, so the day-30 / day-7 ratio holds at any scale; bytes scale
linearly (the `bytes_per_container_*` keys).

Why two scales: the production flush stores ~37k rows/s on SQLite and ~17k on PostgreSQL on this
machine, and 30 days x 20,000 containers is 173M rows, hours of writing. `--history-containers 20000`
runs exactly that (hours); the default keeps the run near 15 minutes.

Writer latency (--containers containers, default 20,000, a fleet of its own in the same database):
--backlog-hours of its 5-minute rows are written already due for downsampling (a retention pass that
missed them, e.g. the watchdog was down: 1.2M rows at the defaults, the size of the single DELETE
the issue measured), plus its last hour. Then one paced pass (as production runs it) catches up on
its own thread while the writer thread runs batches as the app's worker does: every batch advances
15 s of simulated time, ingests a poll of every container every other batch (30 s interval),
flushes (ledger deltas every time, every container's rollup at each bucket close) and commits; every
fourth batch the waste detectors (JobIdle reads the rollups) run in the same transaction. Batches
follow each other --writer-gap seconds apart (the 15 s of real time compressed). Reported: the p99
(and max) of the batches that ran while the pass ran, the pass's time and rows, and one demand-policy
read of a queue's 7 days.

    .venv/bin/python bench/history.py [--history-containers 800] [--containers 20000] [--days 30]
        [--backlog-hours 5] [--databases sqlite,postgresql]
    .venv/bin/python bench/history.py --history-containers 200 --containers 2000 --days 8   # a quick one
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from volcano_monitor.core.model import parse_job
from volcano_monitor.watchdog.actions.capability.store import usage_buckets
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.detectors.waste import WasteDetector
from volcano_monitor.watchdog.runtime.retention import run_retention
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import UsageRollup, UsageRollupHourly
from volcano_monitor.watchdog.state.ledger import Ledger
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.samples import PodInfo, UsageSample

POSTGRES_ADMIN = os.environ.get("VOLCANO_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
PODS_PER_JOB, CONTAINERS, QUEUES = 4, ("main", "sidecar"), 10
BUCKET, HOUR, DAY = 300, 3600, 86400
T0 = 1_714_521_600  # 2024-05-01T00:00:00Z
BATCH_SECONDS = 15.0  # the app's flush interval


class _NoHistograms:
    def add_usage(self, *_: Any) -> None:
        return None


def _fleet(containers: int, prefix: str) -> tuple[dict[tuple[str, str], PodInfo], list[dict[str, Any]]]:
    jobs = max(1, containers // (PODS_PER_JOB * len(CONTAINERS)))
    pods: dict[tuple[str, str], PodInfo] = {}
    raws = []
    for i in range(jobs):
        namespace, name, queue = f"team-{i % 10}", f"{prefix}-{i % 50}-{i:06d}", f"q{i % QUEUES}"
        raws.append({"metadata": {"name": name, "namespace": namespace, "uid": f"{prefix}-{i:06d}",
                                  "creationTimestamp": "2024-04-30T23:59:00Z"},
                     "spec": {"queue": queue, "tasks": [{"name": "worker", "replicas": PODS_PER_JOB, "template": {
                         "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}]}}}]},
                     "status": {"state": {"phase": "Running"},
                                "conditions": [{"status": "Running", "lastTransitionTime": "2024-05-01T00:00:00Z"}]}})
        for p in range(PODS_PER_JOB):
            pods[(namespace, f"{name}-worker-{p}")] = PodInfo(
                job_uid=f"{prefix}-{i:06d}", job_name=name, namespace=namespace, workload=f"{prefix}-{i % 50}",
                task="worker", queue=queue, phase="Running", cpu_request_cores=2.0, memory_request_bytes=4 * 2.0**30,
                gpus=0.0)
    return pods, raws


class _Writer:
    """The app's worker, reduced to what touches usage: ingest, flush, waste detectors."""

    def __init__(self, engine: Engine, containers: int, settings: Settings, prefix: str) -> None:
        self.engine = engine
        self.pods, raws = _fleet(containers, prefix)
        self.keys = [(ns, pod, c) for (ns, pod) in self.pods for c in CONTAINERS]
        self.recorder = UsageRecorder(_NoHistograms(), expected_interval_seconds=BUCKET)
        self.waste = WasteDetector(settings.detectors, settle_seconds=4 * BATCH_SECONDS)
        lookup = self.pods.get

        def pod_info(namespace: str, pod: str) -> PodInfo | None:
            return lookup((namespace, pod))

        self.lookup = pod_info
        with Session(engine) as session:
            ledger, now = Ledger(), datetime.fromtimestamp(T0, UTC)
            for raw in raws:
                ledger.on_job("ADDED", parse_job(raw), session, now)
            session.commit()

    def samples(self, ts: float) -> list[UsageSample]:
        phase = int(ts) // BUCKET
        return [UsageSample(ts, ns, pod, c, 0.1 + ((i * 7 + phase) % 20) / 10, 2.0**30 * (1 + (i + phase) % 4))
                for i, (ns, pod, c) in enumerate(self.keys)]

    def history(self, start: int, end: int) -> None:
        """5-minute buckets from `start` to `end`: one sample per container each, flushed in one go
        once they all closed (the recorder's flush writes every finished bucket it holds)."""
        for bucket in range(start, end, BUCKET):
            self.recorder.ingest(self.samples(bucket + BUCKET / 2), self.lookup)
        with Session(self.engine) as session:
            self.recorder.flush(session, datetime.fromtimestamp(end + 1, UTC), final=True)
            session.commit()

    def batch(self, ts: float, poll: bool, detect: bool) -> None:
        """One batch of the app's worker at simulated time `ts`."""
        if poll:
            self.recorder.ingest(self.samples(ts), self.lookup)
        now = datetime.fromtimestamp(ts, UTC)
        with Session(self.engine) as session:
            if detect:
                self.waste.check(session, now)
            self.recorder.flush(session, now)
            session.commit()


def _size(engine: Engine) -> dict[str, int]:
    with Session(engine) as session:
        rows = {"rows_5m": int(session.scalar(select(func.count()).select_from(UsageRollup)) or 0),
                "rows_hourly": int(session.scalar(select(func.count()).select_from(UsageRollupHourly)) or 0)}
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            path = engine.url.database
            assert path is not None
            size = os.path.getsize(path)
        else:
            size = int(connection.exec_driver_sql(
                "SELECT pg_total_relation_size('usage_rollups') + pg_total_relation_size('usage_rollups_hourly')"
            ).scalar_one())
    return {**rows, "bytes": size}


def _vacuum(engine: Engine) -> None:
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("VACUUM usage_rollups, usage_rollups_hourly")


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))] if ordered else 0.0


def build_history(engine: Engine, settings: Settings, containers: int, days: int,
                  log: Callable[[str], None]) -> dict[str, Any]:
    """`days` of history for `containers`, retention hourly; sizes after days 1, 7 and `days`."""
    writer = _Writer(engine, containers, settings, "hist")
    sizes: dict[str, dict[str, int]] = {}
    passes: list[float] = []
    started = time.perf_counter()
    for hour in range(T0, T0 + days * DAY, HOUR):
        writer.history(hour, hour + HOUR)
        began = time.perf_counter()
        run_retention(engine, settings, datetime.fromtimestamp(hour + HOUR, UTC), pace=False)
        passes.append(time.perf_counter() - began)
        if (hour + HOUR - T0) % DAY == 0:
            day = (hour + HOUR - T0) // DAY
            _vacuum(engine)
            if day in (1, 7, days):
                sizes[f"day{day}"] = _size(engine)
            log(f"history day {day}: {time.perf_counter() - started:.0f}s")
    return {"sizes": sizes, "build_seconds": round(time.perf_counter() - started, 1),
            "hourly_pass_seconds_p50": round(_p(passes, 0.5), 3), "hourly_pass_seconds_max": round(max(passes), 3)}


def writer_under_retention(engine: Engine, settings: Settings, containers: int, end: int, backlog_hours: float,
                           writer_gap: float, log: Callable[[str], None]) -> dict[str, Any]:
    """The writer's batch latency at `containers` while a paced retention pass moves a backlog."""
    writer = _Writer(engine, containers, settings, "load")
    cutoff = datetime.fromtimestamp(end, UTC) - timedelta(hours=settings.retention.downsample_after_hours)
    due_end = int(cutoff.timestamp()) // HOUR * HOUR
    for hour in range(due_end - int(backlog_hours * HOUR), due_end, HOUR):
        writer.history(hour, hour + HOUR)
    writer.recorder = UsageRecorder(_NoHistograms(), expected_interval_seconds=BUCKET)  # a gap: no integral across it
    writer.history(end - HOUR, end)
    log(f"load: backlog of {backlog_hours:g} h written")
    now = datetime.fromtimestamp(end, UTC)
    done = threading.Event()
    result: dict[str, Any] = {}

    def retention_thread() -> None:
        began = time.perf_counter()
        result.update(run_retention(engine, settings, now))
        result["seconds"] = time.perf_counter() - began
        done.set()

    writer.recorder = UsageRecorder(_NoHistograms(), expected_interval_seconds=30.0)
    latencies: list[float] = []
    thread = threading.Thread(target=retention_thread, name="retention")
    ts, n = float(end), 0
    thread.start()
    while not done.is_set():
        began = time.perf_counter()
        writer.batch(ts, poll=n % 2 == 0, detect=n % 4 == 0)
        latencies.append(time.perf_counter() - began)
        ts += BATCH_SECONDS
        n += 1
        done.wait(writer_gap)
    thread.join()
    with Session(engine) as session:
        began = time.perf_counter()
        buckets = usage_buckets(session, "q0", now - timedelta(days=7), now)
        demand_seconds = time.perf_counter() - began
    return {"retention_pass_seconds": round(result.pop("seconds"), 2), "retention_pass": result,
            "writer_batches": len(latencies), "writer_p99_seconds": round(_p(latencies, 0.99), 3),
            "writer_max_seconds": round(max(latencies), 3), "writer_p50_seconds": round(_p(latencies, 0.5), 3),
            "demand_query_seconds": round(demand_seconds, 3), "demand_buckets": len(buckets)}


@contextmanager
def _database(kind: str, tmp: str) -> Iterator[Engine]:
    if kind == "sqlite":
        engine = make_engine(f"sqlite:///{Path(tmp) / 'history.db'}")
        migrate(engine)
        try:
            yield engine
        finally:
            engine.dispose()
        return
    name = f"vm_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    engine = make_engine(f"postgresql+psycopg://{POSTGRES_ADMIN.rsplit('/', 1)[0].split('://', 1)[1]}/{name}")
    try:
        migrate(engine)
        yield engine
    finally:
        engine.dispose()
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--history-containers", type=int, default=800)
    parser.add_argument("--containers", type=int, default=20_000, help="the writer's fleet while retention runs")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--backlog-hours", type=float, default=5.0)
    parser.add_argument("--writer-gap", type=float, default=0.2, help="real seconds between writer batches")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args()
    if args.days < 7:
        parser.error("--days must be at least 7")

    def log(message: str) -> None:
        if args.verbose:
            print(message, file=sys.stderr, flush=True)

    out: dict[str, Any] = {"history_containers": args.history_containers, "containers": args.containers,
                           "days": args.days, "backlog_hours": args.backlog_hours}
    targets: dict[str, float] = {}
    settings = Settings()
    for kind in args.databases.split(","):
        short = "postgres" if kind.startswith("postgres") else "sqlite"
        with tempfile.TemporaryDirectory() as tmp, _database(kind, tmp) as engine:
            log(f"{short}: {args.days} days x {args.history_containers} containers of history")
            gc.collect()
            gc.freeze()
            history = build_history(engine, settings, args.history_containers, args.days, log)
            load = writer_under_retention(engine, settings, args.containers, T0 + args.days * DAY,
                                          args.backlog_hours, args.writer_gap, log)
            gc.unfreeze()
        sizes = history.pop("sizes")
        out[f"writer_p99_seconds_{short}"] = load.pop("writer_p99_seconds")
        ratio = f"bytes_day{args.days}_over_day7_{short}"
        out[ratio] = round(sizes[f"day{args.days}"]["bytes"] / sizes["day7"]["bytes"], 3)
        targets[f"writer_p99_seconds_{short}"], targets[ratio] = 1.0, 2.0
        for day, size in sizes.items():
            for key, value in size.items():
                out[f"{key}_{day}_{short}"] = value
            out[f"bytes_per_container_{day}_{short}"] = round(size["bytes"] / args.history_containers)
        out.update({f"history_{key}_{short}": value for key, value in history.items()})
        out.update({f"{key}_{short}": value for key, value in load.items()})
    out["targets"] = {k: f"<= {v:g}" for k, v in targets.items()}
    out["meets_targets"] = {k: out[k] <= v for k, v in targets.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
