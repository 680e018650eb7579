"""The wait-time histogram end to end: the simulator's `queue-wait` scenario (30 Jobs queueing in a 2-cpu
queue), the exporter over HTTP, and a real Prometheus scraping it every second. Prometheus' p90 per queue
must be within 10% of the p90 of the waits the simulator's own Job objects show (creationTimestamp to the
first Running condition), for the Jobs that turned Running after the exporter started.

Prometheus is a test dependency: when it is missing the test fails, it never skips.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.exporter.test_prometheus import EXPORTER_JOB, Prometheus, poll, prometheus_binary
from tests.simtools import client_for, wait_for
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.server import make_server, serve_in_background
from volcano_monitor.simulator.resources import JOBS
from volcano_monitor.simulator.runtime import SimulatorThread

BUDGET = 90.0  # seconds for the whole test once Prometheus is found (the scenario plays ~35 s)
TOLERANCE = 0.10
QUEUE, JOBS_IN_QUEUE = "fifo", 30
P90 = ("histogram_quantile(0.9, sum by (le, queue) "
       "(rate(volcano_queue_job_wait_duration_seconds_bucket[5m])))")
COUNT = "sum by (queue) (volcano_queue_job_wait_duration_seconds_count)"


def unix(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def waits_from_objects(jobs: list[dict[str, Any]], queue: str, since: float) -> list[float]:
    """What the simulator produced, read from its Job objects (not through the exporter's model): the first
    Running condition minus creation, for the Jobs of `queue` that turned Running after `since`."""
    waits = []
    for job in jobs:
        if job["spec"]["queue"] != queue:
            continue
        running = [unix(c["lastTransitionTime"]) for c in job["status"].get("conditions", [])
                   if c["status"] == "Running"]
        if running and running[0] > since:
            waits.append(running[0] - unix(job["metadata"]["creationTimestamp"]))
    return waits


def quantile(q: float, values: list[float]) -> float:
    """Linear interpolation between closest ranks (PromQL's `quantile` and numpy's default)."""
    ordered = sorted(values)
    x = q * (len(ordered) - 1)
    i = int(x)
    upper = ordered[min(i + 1, len(ordered) - 1)]
    return ordered[i] + (upper - ordered[i]) * (x - i)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[SimulatorThread, Exporter, str]]:
    with SimulatorThread(scenario="queue-wait", speed=10, tick_interval=0.1) as sim:
        exporter = Exporter(client_for(sim, tmp_path)).start()
        server = make_server(exporter, "127.0.0.1", 0)
        serve_in_background(server)
        try:
            wait_for(exporter.ready, timeout=10)
            yield sim, exporter, f"127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            exporter.stop()


@pytest.mark.slow(90)
def test_prometheus_p90_of_queue_wait_matches_the_simulated_waits(
        tmp_path: Path, stack: tuple[SimulatorThread, Exporter, str]) -> None:
    binary = prometheus_binary()
    deadline = time.monotonic() + BUDGET
    sim, exporter, target = stack
    prom = Prometheus(binary, tmp_path, {EXPORTER_JOB: target})
    try:
        prom.wait_ready(timeout=10)

        def all_started() -> str | None:
            jobs = sim.call(lambda: sim.store.objects(JOBS))
            waits = waits_from_objects(jobs, QUEUE, exporter.store.observe_since)
            return None if len(waits) == JOBS_IN_QUEUE else f"{len(waits)} of {JOBS_IN_QUEUE} fifo Jobs started"

        poll("every fifo Job started", deadline, all_started, interval=1.0)
        jobs = sim.call(lambda: sim.store.objects(JOBS))
        waits = waits_from_objects(jobs, QUEUE, exporter.store.observe_since)
        expected = quantile(0.9, waits)

        def scraped() -> str | None:
            counts = prom.by_queue(COUNT)
            return None if counts.get(QUEUE) == len(waits) else f"counts {counts}, {len(waits)} waits"

        poll("every wait scraped", deadline, scraped)
        answer = prom.by_queue(P90)
        print(f"waits {sorted(waits)}: p90 {expected:.2f} s, Prometheus {answer}")
        assert QUEUE in answer, answer
        assert abs(answer[QUEUE] - expected) <= TOLERANCE * expected, (answer[QUEUE], expected, sorted(waits))
        assert min(waits) > 0 and max(waits) / min(waits) > 3  # a spread of waits, not one value
        # The job that filled the queue started before any fifo Job was created: it is in its own queue.
        assert set(answer) <= {QUEUE, "hold"}, answer
    except BaseException:
        print(f"---- prometheus log ({prom.log_path}) ----\n{prom.log()}")
        raise
    finally:
        prom.stop()
