"""Recommendations for 10k containers with 8 days of history (target: <= 5 s, DESIGN §7).

Setup (not timed, ~30 s): 10,000 containers (1,000 namespaces x 5 workloads x 2 containers) each
get 8 days of usage through `HistogramBook.add_usage`. One sample a minute would be 115M calls, so
each container gets one sample an hour standing for that hour's 60 per-minute samples (`count=60`:
CPU weight 60, sample count +60, so 11,520 samples per container as with one a minute). CPU follows
a daily cycle around a per-container base with noise (about 22 non-empty CPU buckets each); memory
has a per-day level plus a daily cycle and noise, so each day has its own peak (about 4-5 memory
buckets from 8 daily peaks). Every container has a spec as a pod shows it (`HistogramBook.note_spec`:
requests, limits with a 1.5x or 2x ratio or none, its queue's capability and the largest node's
allocatable) and `container_policies` hold a default and a per-namespace max_allowed, so the policy's
caps and limits are part of the timed work. The book is flushed into a fresh SQLite file (WAL) with
`HistogramBook.flush`, committed, and the engine's connections are closed.

Timed: one `compute_recommendations(session, settings, now)` over all 10k rows on a new engine and
session — reading the rows, decoding both histograms and the spec of each, the percentiles, the bounds,
the caps and limits, and building the 10k `Recommendation`s. The median of 3 runs is reported, with
the 11 container_policies (the headline figure) and, on the same rows, without any (the default
configuration), interleaved.

    .venv/bin/python bench/watchdog_recommend.py
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.recommendations.book import ContainerSpec, HistogramBook, compute_recommendations
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate

CONTAINERS = 10_000
DAYS = 8
STEP_SECONDS = 3600
NOW = datetime(2024, 5, 9, tzinfo=UTC)


def build(book: HistogramBook, containers: int = CONTAINERS, days: int = DAYS, seed: int = 42) -> None:
    rng = random.Random(seed)
    start = NOW.timestamp() - days * 86400
    steps = days * 86400 // STEP_SECONDS
    per_step = STEP_SECONDS // 60
    for n in range(containers):
        namespace, workload, container = f"ns-{n // 10}", f"workload-{n // 2 % 5}", ("main", "sidecar")[n % 2]
        cpu_base = rng.lognormvariate(-0.5, 1.0)
        memory_base = rng.lognormvariate(21, 1.0)  # ~1.3 GB median
        daily = [rng.uniform(0.0, 0.4) for _ in range(days + 1)]
        ratio = (1.5, 2.0, None)[n % 3]
        requests = {"cpu": round(cpu_base * 2, 3), "memory": round(memory_base * 1.5)}
        book.note_spec(namespace, workload, "worker", container, ContainerSpec(
            f"queue-{n // 100}", requests, {k: v * ratio for k, v in requests.items()} if ratio else {},
            {"cpu": 512.0, "memory": 4.0 * 2**40}, {"cpu": 96.0, "memory": 768.0 * 2**30}))
        add = book.add_usage
        gauss = rng.gauss
        for i in range(steps):
            ts = start + i * STEP_SECONDS
            day_phase = math.sin(2 * math.pi * (ts % 86400) / 86400)
            cpu = max(0.0, cpu_base * (1 + 0.4 * day_phase + gauss(0, 0.15)))
            memory = memory_base * (1 + daily[i * STEP_SECONDS // 86400] + 0.1 * day_phase + abs(gauss(0, 0.03)))
            add(namespace, workload, "worker", container, ts, cpu, memory, count=per_step)


def measure(containers: int = CONTAINERS, runs: int = 3) -> dict[str, float]:
    settings = Recommendations(container_policies=[
        {"max_allowed": {"cpu": 64, "memory": "512Gi"}},
        *({"namespace": f"ns-{n}*", "container": "main", "max_allowed": {"memory": "8Gi"}} for n in range(10))])
    book = HistogramBook(settings)
    build(book, containers)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        engine = make_engine(url)
        migrate(engine)
        with Session(engine) as session, session.begin():
            written = book.flush(session, NOW)
        engine.dispose()
        assert written == containers, written
        timings: dict[str, list[float]] = {"policies": [], "no_policies": []}
        for _ in range(runs):  # interleaved: the same rows, with and without container_policies
            for name, used in (("policies", settings), ("no_policies", Recommendations())):
                engine = make_engine(url)
                with Session(engine) as session:
                    started = time.perf_counter()
                    recommendations = compute_recommendations(session, used, NOW)
                    timings[name].append(time.perf_counter() - started)
                engine.dispose()
                assert len(recommendations) == containers, len(recommendations)
                assert all(r.current_requests for r in recommendations), "specs were not read back"
    return {"recommend_seconds_10k_containers_8d": round(statistics.median(timings["policies"]), 3),
            "recommend_seconds_10k_containers_8d_no_policies": round(statistics.median(timings["no_policies"]), 3)}


if __name__ == "__main__":
    print(json.dumps(measure()))
