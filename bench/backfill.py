"""Back-fill of recommendation histograms from a real Prometheus: 10k containers x 8 days.

Setup (not timed): 1,000 workloads in 100 namespaces, each one pod (`wl-N-worker-0`) running the whole
8 days with 10 containers: 10,000 container series of `container_cpu_usage_seconds_total` and
`container_memory_working_set_bytes`, one sample every `--resolution` seconds (default 300: a 30 s
scrape would be 10x the samples, more than promtool can import on this machine in reasonable time).
The OpenMetrics text is written one file per 2-hour TSDB block window, because promtool 2.42
re-reads its whole input once per block it writes (8 days = 96 passes); each file becomes one block
with `promtool tsdb create-blocks-from openmetrics`, and /usr/bin/prometheus is started on the data
directory with compaction held at 2 hours (it would otherwise compact during the measurement).

Timed: `Backfiller.run_once` over the 1,000 workloads as the watchdog runs it — candidates from the
database, 20 batches of 50 workloads (one pod regex each), memory peaks and CPU rate range queries in
daily chunks (step 300 s, rate window 2 x resolution), the points fed through `HistogramBook.add_usage`,
and each batch merged, flushed and recorded in a SQLite transaction (as the worker does). Reported:
wall seconds, of which waiting for Prometheus, queries, points, histograms written, peak RSS.

    .venv/bin/python bench/backfill.py [--containers 10000] [--days 8] [--resolution 300]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from sqlalchemy import func, select  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from tests.watchdog.promhistory import PrometheusServer  # noqa: E402
from volcano_monitor.watchdog.config import load  # noqa: E402
from volcano_monitor.watchdog.findings.recommendations.backfill import BackfillBatch, Backfiller  # noqa: E402
from volcano_monitor.watchdog.findings.recommendations.backfill_queries import Workload  # noqa: E402
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook  # noqa: E402
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate  # noqa: E402
from volcano_monitor.watchdog.state.db.models import WorkloadHistogram  # noqa: E402

CONTAINERS_PER_POD = 10
BLOCK_WINDOW = 7200
NOISE = [0.7 + 0.6 * ((i * 37) % 97) / 97 for i in range(97)]


def generate(workdir: Path, containers: int, days: float, resolution: int, end: int) -> tuple[int, float]:
    """OpenMetrics per 2-hour window -> one TSDB block each; returns (samples, seconds promtool took)."""
    pods = containers // CONTAINERS_PER_POD
    series = [(f'{{namespace="ns-{p % 100}",pod="wl-{p}-worker-0",container="c{c}"}} ', 0.05 + (p * 13 + c) % 40 / 10,
               2**28 * (1 + (p * 7 + c) % 16)) for p in range(pods) for c in range(CONTAINERS_PER_POD)]
    counters = [0.0] * len(series)
    start = end - int(days * 86400)
    data = workdir / "data"
    data.mkdir()
    samples, promtool_seconds = 0, 0.0
    window = start // BLOCK_WINDOW * BLOCK_WINDOW
    while window < end:
        times = [t for t in range(max(start, window), min(end, window + BLOCK_WINDOW - 1) + 1, resolution)
                 if t % resolution == 0]
        cpu_lines, mem_lines = [], []
        for i, (labels, cores, memory) in enumerate(series):
            counter = counters[i]
            for t in times:
                daily = 1 + 0.4 * math.sin(2 * math.pi * t / 86400)
                counter += cores * daily * NOISE[(i + t // resolution) % 97] * resolution
                cpu_lines.append(f"container_cpu_usage_seconds_total{labels}{counter:.3f} {t}\n")
                mem_lines.append(f"container_memory_working_set_bytes{labels}"
                                 f"{memory * daily * NOISE[(i * 3 + t // 3600) % 97]:.0f} {t}\n")
            counters[i] = counter
        samples += len(cpu_lines) + len(mem_lines)
        path = workdir / "window.om"
        with path.open("w") as out:
            out.write("# TYPE container_cpu_usage_seconds counter\n")
            out.writelines(cpu_lines)
            out.write("# TYPE container_memory_working_set_bytes gauge\n")
            out.writelines(mem_lines)
            out.write("# EOF\n")
        began = time.perf_counter()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(path), str(data)],
                       check=True, capture_output=True)
        promtool_seconds += time.perf_counter() - began
        window += BLOCK_WINDOW
    return samples, promtool_seconds


def measure(containers: int, days: float, resolution: int) -> dict[str, float | int | str]:
    end = int(time.time()) // 300 * 300 - 300
    with tempfile.TemporaryDirectory(prefix="bench-backfill-") as tmp:
        workdir = Path(tmp)
        began = time.perf_counter()
        samples, promtool_seconds = generate(workdir, containers, days, resolution, end)
        setup_seconds = time.perf_counter() - began
        server = PrometheusServer(workdir / "data", workdir, ("--storage.tsdb.min-block-duration=2h",
                                                              "--storage.tsdb.max-block-duration=2h")).wait_ready(300)
        try:
            settings = load(None, environ={}, database_url=f"sqlite:///{workdir / 'bench.db'}", sources={
                "prometheus": {"url": server.url, "timeout_seconds": 300, "rate_window": f"{2 * resolution}s",
                               "backfill": {"enabled": True, "days": days, "step_seconds": 300,
                                            "min_history_days": 1}}})
            engine = make_engine(settings.database_url)
            migrate(engine)
            book = HistogramBook(settings.recommendations)
            backfiller = Backfiller(settings.sources.prometheus, settings.recommendations, engine, book,
                                    clock=lambda: float(end + 1))
            waited = [0.0]
            query = backfiller._query

            def timed_query(path: str, params: dict[str, str]) -> list[dict[str, object]]:
                started = time.perf_counter()
                try:
                    return query(path, params)
                finally:
                    waited[0] += time.perf_counter() - started

            backfiller._query = timed_query  # type: ignore[method-assign]

            def store(batch: BackfillBatch) -> None:  # what the watchdog's worker does with a batch
                with Session(engine) as session, session.begin():
                    backfiller.store(batch, session, datetime.fromtimestamp(end, UTC))
                backfiller.committed([batch])

            workloads = [Workload(f"ns-{p % 100}", f"wl-{p}", ("worker",))
                         for p in range(containers // CONTAINERS_PER_POD)]
            started = time.perf_counter()
            batches = backfiller.run_once(workloads, store, threading.Event())
            seconds = time.perf_counter() - started
            with Session(engine) as session:
                rows = session.scalar(select(func.count()).select_from(WorkloadHistogram))
                points = session.scalar(select(func.sum(WorkloadHistogram.samples))) or 0
            engine.dispose()
        finally:
            server.stop()
    return {"containers": containers, "days": days, "resolution_seconds": resolution,
            "generated_samples": samples, "setup_seconds": round(setup_seconds, 1),
            "promtool_seconds": round(promtool_seconds, 1), "backfill_seconds": round(seconds, 2),
            "prometheus_wait_seconds": round(waited[0], 2), "queries": backfiller.queries, "batches": batches,
            "histogram_rows": int(rows or 0), "cpu_points": int(points) // 5,
            "workloads_done": backfiller.workloads_done,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=8)
    parser.add_argument("--resolution", type=int, default=300, help="seconds between generated samples")
    args = parser.parse_args()
    print(json.dumps(measure(args.containers, args.days, args.resolution)))
