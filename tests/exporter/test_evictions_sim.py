"""volcano_pod_evictions_total against the simulated cluster: the `preemption` scenario's high-priority Job
preempts two pods of a low-priority Job in the same queue, as Volcano's preempt action does (a DisruptionTarget
condition, an `Evict` Event, then the deletion). Counted once each, through relists and watch drops, and
not again by an exporter started afterwards."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.exporter.harness import start_exporter
from tests.exporter.scrape import parse, select
from tests.simtools import wait_for
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator.runtime import SimulatorThread

NAME = "volcano_pod_evictions_total"
PREEMPTED = frozenset({"namespace": "default", "queue": "shared", "reason": "preempt",
                       "preemptor_queue": "shared"}.items())


def evictions(exporter: Exporter) -> dict[frozenset[tuple[str, str]], float]:
    return select(parse(exporter.scrape()), NAME)


def test_preempted_pods_are_counted_once_with_queue_and_preemptor_queue(
        tmp_path: Path, exporters: list[Exporter]) -> None:
    # The scenario moves only when ticked, from after the exporter has started: a slow start (a loaded
    # machine) must not make the evictions older than the exporter.
    with SimulatorThread(scenario="preemption", speed=10, auto_tick=False, bookmark_interval=0.2) as sim:
        exporter = start_exporter(sim, tmp_path)
        exporters.append(exporter)
        stop = threading.Event()
        ticker = threading.Thread(target=tick_until, args=(sim, stop), daemon=True)
        ticker.start()
        try:
            wait_for(lambda: evictions(exporter) == {PREEMPTED: 2}, timeout=15, interval=0.1)

            relisted = {i.name: i.relists for i in exporter.informers}
            sim.stop_http()  # the API server goes away while pods change and it compacts its history:
            time.sleep(0.5)  # 410 Gone, a relist of the pods
            sim.call(sim.store.compact)
            sim.start_http()
            wait_for(lambda: all(i.relists > relisted[i.name] for i in exporter.informers if i.name == "pods"),
                     timeout=15)
            time.sleep(1.0)  # the urgent job finishes, the replaced batch pods run: no more evictions
            assert evictions(exporter) == {PREEMPTED: 2}

            later = start_exporter(sim, tmp_path)  # a restarted exporter: the evictions are older than it
            exporters.append(later)
            time.sleep(0.5)
            assert evictions(later) == {}
            assert evictions(exporter) == {PREEMPTED: 2}
        finally:
            stop.set()
            ticker.join()


def tick_until(sim: SimulatorThread, stop: threading.Event) -> None:
    while not stop.wait(0.1):
        sim.tick()
