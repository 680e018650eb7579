"""Usage samples stored per second (targets: >= 50,000/s SQLite, >= 20,000/s PostgreSQL, DESIGN §7).

What the app does every poll, for 2,000 containers (250 jobs x 4 pods x 2 containers) over --rounds
polls 30 s apart (simulated time, so the rounds cross 5-minute rollup buckets):
`UsageRecorder.ingest(samples, lookup)` (attribution through a dict-backed pod lookup, the rollup
deltas, the ledger integrals and the real `HistogramBook.add_usage` of each sample), then in a new
Session `UsageRecorder.flush(session, now)` and `commit()`. With the recorder's defaults a flush adds
every job's delta to its job_runs row (250 rows each round) and upserts the rollups of finished
5-minute buckets, plus those of the open bucket once per bucket length (2,000 rows about every tenth
round). Timed end to end: ingest + flush + commit of every round; building the sample objects (a
collector's work) is not timed, nor is the HistogramBook's own flush into workload_histograms (the
app runs it on its own schedule). The job_runs rows are created by the Ledger beforehand, as
informer events would have.

Databases: a fresh SQLite file (WAL, synchronous=NORMAL, as `make_engine` sets it up) and a fresh
PostgreSQL database created on $VOLCANO_BENCH_POSTGRES (default postgresql://postgres@127.0.0.1:5432/postgres)
and dropped afterwards. The best of --repeat runs is reported per database.

    .venv/bin/python bench/watchdog_usage.py [--rounds 30] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from volcano_monitor.core.model import parse_job
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import UsageRollup
from volcano_monitor.watchdog.state.ledger import Ledger
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.samples import PodInfo, UsageSample

POSTGRES_ADMIN = os.environ.get("VOLCANO_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
JOBS, PODS_PER_JOB, CONTAINERS = 250, 4, ("main", "sidecar")
INTERVAL = 30.0
T0 = 1_714_550_400.0  # 2024-05-01T08:00:00Z


def _job_raw(i: int) -> dict[str, object]:
    requests = {"cpu": "2", "memory": "4Gi"}
    return {"metadata": {"name": f"train-{i % 25}-{i:05d}", "namespace": f"team-{i % 10}", "uid": f"job-{i:05d}",
                         "creationTimestamp": "2024-05-01T07:59:00Z"},
            "spec": {"queue": f"q{i % 5}", "tasks": [{"name": "worker", "replicas": PODS_PER_JOB, "template": {
                "spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}}}]},
            "status": {"state": {"phase": "Running"},
                       "conditions": [{"status": "Running", "lastTransitionTime": "2024-05-01T08:00:00Z"}]}}


def _pods() -> dict[tuple[str, str], PodInfo]:
    pods: dict[tuple[str, str], PodInfo] = {}
    for i in range(JOBS):
        namespace, name = f"team-{i % 10}", f"train-{i % 25}-{i:05d}"
        for p in range(PODS_PER_JOB):
            pods[(namespace, f"{name}-worker-{p}")] = PodInfo(
                job_uid=f"job-{i:05d}", job_name=name, namespace=namespace, workload=f"train-{i % 25}",
                task="worker", queue=f"q{i % 5}", phase="Running", cpu_request_cores=2.0,
                memory_request_bytes=4 * 2.0**30, gpus=0.0)
    return pods


def _rounds(pods: dict[tuple[str, str], PodInfo], rounds: int) -> list[list[UsageSample]]:
    out = []
    for r in range(rounds):
        ts = T0 + r * INTERVAL
        out.append([UsageSample(ts, namespace, pod, container, 0.2 + (hash((pod, r)) % 1000) / 500,
                                2.0**30 * (1 + (hash((container, pod, r)) % 100) / 100))
                    for (namespace, pod) in pods for container in CONTAINERS])
    return out


def _run(engine: Engine, rounds: list[list[UsageSample]], pods: dict[tuple[str, str], PodInfo]) -> dict[str, float]:
    with Session(engine) as session:
        ledger, now = Ledger(), datetime.fromtimestamp(T0, UTC)
        for i in range(JOBS):
            ledger.on_job("ADDED", parse_job(_job_raw(i)), session, now)
        session.commit()
    book = HistogramBook(Recommendations())
    recorder = UsageRecorder(book, expected_interval_seconds=INTERVAL)
    lookup = pods.get
    samples = sum(len(r) for r in rounds)
    written = 0
    gc.collect()
    started = time.perf_counter()
    for batch in rounds:
        recorder.ingest(batch, lambda namespace, pod: lookup((namespace, pod)))
        with Session(engine) as session:
            written += recorder.flush(session, datetime.fromtimestamp(batch[0].ts, UTC))
            session.commit()
    elapsed = time.perf_counter() - started
    with Session(engine) as session:
        rows = session.scalar(select(func.count()).select_from(UsageRollup)) or 0
    return {"samples_per_second": samples / elapsed, "samples": samples, "seconds": elapsed,
            "rollup_rows": rows, "rows_written": written, "accepted": recorder.accepted}


def _best(make: Callable[[], Engine], rounds: list[list[UsageSample]], pods: dict[tuple[str, str], PodInfo],
          repeat: int) -> dict[str, float]:
    results = []
    for _ in range(repeat):
        engine = make()
        try:
            results.append(_run(engine, rounds, pods))
        finally:
            engine.dispose()
    return max(results, key=lambda r: r["samples_per_second"])


def measure(rounds: int = 30, repeat: int = 3) -> dict[str, float]:
    pods = _pods()
    batches = _rounds(pods, rounds)
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(1000))

        def sqlite_engine() -> Engine:
            engine = make_engine(f"sqlite:///{Path(tmp) / f'usage-{next(counter)}.db'}")
            migrate(engine)
            return engine

        sqlite = _best(sqlite_engine, batches, pods, repeat)
    names: list[str] = []
    base = POSTGRES_ADMIN.rsplit("/", 1)[0].split("://", 1)[1]

    def postgres_engine() -> Engine:
        name = f"vm_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        names.append(name)
        engine = make_engine(f"postgresql+psycopg://{base}/{name}")
        migrate(engine)
        return engine

    try:
        postgres = _best(postgres_engine, batches, pods, repeat)
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return {
        "samples_per_second_sqlite": round(sqlite["samples_per_second"]),
        "samples_per_second_postgres": round(postgres["samples_per_second"]),
        "usage_samples": sqlite["samples"],
        "usage_rollup_rows": sqlite["rollup_rows"],
        "usage_rows_written_per_run": sqlite["rows_written"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.rounds, args.repeat)))


if __name__ == "__main__":
    main()
