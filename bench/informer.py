"""Informer list+watch throughput against the simulated API server, over HTTP.

Prints one JSON object. The simulator runs in this process on its own thread (it shares the GIL,
so the numbers are a floor for the informer against a real API server):
- list_objects_per_second: the initial paginated LIST of every pod, raw JSON into the cache;
- list_objects_per_second_parsed: the same with the Pod model as transform (what the exporter does);
- watch_events_per_second: a burst of MODIFIED events that queued up while the informer was cut
  off, from reconnect until every one was applied (decode + cache + handler), model transform on.

    .venv/bin/python bench/informer.py [--pods 100000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.config import api_client
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.resources import PODS
from volcano_monitor.core.podview import parse_pod
from volcano_monitor.simulator import resources as sim_types
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig


def timed_sync(api: Any, transform: Any = None) -> tuple[float, Informer[Any]]:
    informer: Informer[Any] = Informer(api, PODS, transform=transform, page_size=500, backoff=Backoff(0.01, 0.1))
    started = time.perf_counter()
    informer.start()
    if not informer.wait_synced(600):
        raise SystemExit("informer did not sync")
    return time.perf_counter() - started, informer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--updates", type=int, default=20_000)
    args = parser.parse_args()

    sim = SimulatorThread(bookmark_interval=5).start()
    sim.call(lambda: Driver(sim.store, "scale", pods=args.pods, jobs=max(1, args.pods // 10), queues=100).setup())
    pods = sim.call(lambda: [(o["metadata"]["namespace"], o["metadata"]["name"])
                             for o in sim.store.objects(sim_types.PODS)])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kubeconfig"
        write_kubeconfig(path, sim.url)
        api = api_client(str(path))

        raw_seconds, raw = timed_sync(api)
        raw.stop()
        parsed_seconds, informer = timed_sync(api, parse_pod)

        # Cut the informer off, queue up a burst of updates, then let it reconnect and drain them.
        while sim.api.active_watches < 1:
            time.sleep(0.01)
        sim.faults.error_count, sim.faults.error_code = 10**9, 503
        sim.call(sim.api.drop_watches)
        updates = min(args.updates, len(pods))

        def burst() -> None:
            for namespace, name in pods[:updates]:
                sim.store.mutate(sim_types.PODS, namespace, name,
                                 lambda o: o["metadata"].setdefault("labels", {}).update(bench="1"))

        sim.call(burst)
        before = informer.events["MODIFIED"]
        started = time.perf_counter()
        sim.faults.error_count = 0
        while informer.events["MODIFIED"] - before < updates:
            time.sleep(0.001)
        watch_seconds = time.perf_counter() - started
        informer.stop()
    sim.stop()
    print(json.dumps({
        "pods": len(pods),
        "list_seconds": round(raw_seconds, 3),
        "list_objects_per_second": round(len(pods) / raw_seconds),
        "list_seconds_parsed": round(parsed_seconds, 3),
        "list_objects_per_second_parsed": round(len(pods) / parsed_seconds),
        "watch_events": updates,
        "watch_events_per_second": round(updates / watch_seconds),
        "relists": informer.relists,
        "decode_errors": informer.decode_errors,
    }))


if __name__ == "__main__":
    main()
