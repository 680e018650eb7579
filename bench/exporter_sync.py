"""The HTTP half of bench/exporter.py: the initial sync over a simulated API server, its CPU beside the
CPU of decoding the same bytes, then scrapes over HTTP (see bench/exporter.py's docstring for the keys).

    .venv/bin/python bench/exporter_sync.py serve DIR    # the API server for DIR's files; prints its URL
    .venv/bin/python bench/exporter_sync.py sync URL N   # one exporter syncs from URL; prints one JSON object

Both run as subprocesses of bench/exporter.py, so the exporter has a process of its own, set up as
`volcano-exporter` sets itself up, and the server competes with it for neither the GIL nor the collector.
"""

from __future__ import annotations

import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import orjson

from volcano_monitor.core.kube.config import api_client
from volcano_monitor.core.kube.resources import JOBS, PODGROUPS, PODS, QUEUES, ResourceKind
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator import resources as sim_types
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.simulator.store import Store, Stored

Raws = dict[ResourceKind, list[bytes]]
SIM_KINDS = {JOBS: sim_types.JOBS, PODGROUPS: sim_types.PODGROUPS, PODS: sim_types.PODS, QUEUES: sim_types.QUEUES}
STUB_KEYS = ("name", "namespace", "labels", "resourceVersion")  # what the simulator's selectors read


def watch_line(event_type: str, raw: bytes) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + raw + b"}"


def write_lines(raws: Raws, directory: str) -> None:
    """Each kind's objects as ADDED watch lines, one file per kind: the bytes the server sends."""
    for kind, items in raws.items():
        with open(Path(directory) / f"{kind.plural}.jsonl", "wb") as out:
            for raw in items:
                out.write(watch_line("ADDED", raw) + b"\n")


def serve(directory: str) -> None:
    """--serve DIR: the simulated API server for the HTTP sync, serving the objects of DIR's files byte for
    byte (so the JSON the exporter decodes is the JSON `json_decode_cpu_seconds` decodes); prints its
    URL, runs until stdin closes. The store keeps each object's bytes and a metadata stub only (what
    selectors read), not 100k decoded pods."""
    store = Store()
    prefix = len(watch_line("ADDED", b"")) - 1
    for kind, sim_kind in SIM_KINDS.items():
        bucket = store.bucket(sim_kind)
        with open(Path(directory) / f"{kind.plural}.jsonl", "rb") as lines:
            for line in lines:
                raw = line[prefix:-2]  # watch_line: prefix, the object, "}\n"
                meta = orjson.loads(raw)["metadata"]
                rv = int(meta["resourceVersion"])
                stub = {"metadata": {k: meta[k] for k in STUB_KEYS if k in meta}}
                bucket.objects[meta.get("namespace", ""), meta["name"]] = Stored(stub, raw, rv)
                store.rv = max(store.rv, rv)
    gc.collect()
    gc.freeze()  # the simulator stands in for a Go API server: keep its collector out of the measurement
    sim = SimulatorThread(store=store, bookmark_interval=5).start()
    print(sim.url, flush=True)
    sys.stdin.read()
    sim.stop()


def cpu_seconds() -> float:
    """CPU time of this process, every thread (the informers' included), user + system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def curl_ms(url: str, gzip: bool) -> float:
    """One scrape as Prometheus does it, from another process (so the client's reading is not counted
    against the exporter's GIL): wall time to the last byte, in ms."""
    flags = ["-H", "Accept-Encoding: gzip"] if gzip else []
    done = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total}", *flags, url],
                          capture_output=True, text=True, check=True)
    return float(done.stdout) * 1000


def sync_child(url: str, scrapes: int) -> None:
    """--sync-child URL: a fresh process set up as `volcano-exporter` sets itself up syncs from the
    simulated API server (streaming lists), then serves /metrics; prints, as JSON: the wall time from
    start() until ready(), the process CPU it took (all threads), the time the cyclic collector ran, the
    RSS after the sync, and plain / gzip scrape times over HTTP (median of `scrapes` each)."""
    from volcano_monitor.core import memory
    from volcano_monitor.exporter.server import make_server, serve_in_background

    memory.tune_allocator()
    gc_time = [0.0, 0.0]  # seconds in the collector, when the current collection started

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kubeconfig"
        write_kubeconfig(path, url)
        exporter = Exporter(api_client(str(path)))
        gc.collect()
        gc.callbacks.append(on_gc)
        collections_before = sum(g["collections"] for g in gc.get_stats())
        cpu_before, started = cpu_seconds(), time.perf_counter()
        exporter.start()
        while not exporter.ready():
            if time.perf_counter() - started > 900:
                raise SystemExit(f"exporter did not sync: {exporter.not_synced()}")
            time.sleep(0.02)
        seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu_before
        gc.callbacks.remove(on_gc)
        collections = sum(g["collections"] for g in gc.get_stats()) - collections_before
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        pods = sum(len(i.cache) for i in exporter.informers if i.kind is PODS)
        server = make_server(exporter, "127.0.0.1", 0)
        serve_in_background(server)
        metrics = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        plain = [curl_ms(metrics, gzip=False) for _ in range(scrapes)]
        gzipped = [curl_ms(metrics, gzip=True) for _ in range(scrapes)]
        server.shutdown()
        exporter.stop()
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "gc_seconds": gc_time[0], "gc_collections": collections,
                      "rss_bytes": rss, "pods": pods, "http_scrape_ms_p50": statistics.median(plain),
                      "http_scrape_gzip_ms_p50": statistics.median(gzipped)}))


def initial_sync(url: str, scrapes: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "sync", url, str(scrapes)], stdout=subprocess.PIPE, text=True,
                          check=True)
    return cast(dict[str, Any], json.loads(done.stdout))


def json_decode_cpu(directory: str) -> tuple[float, int]:
    """CPU seconds to decode, once, every watch line the server sends for the initial lists (the same
    bytes the exporter reads), with orjson; and their size. Lines are read first, untimed."""
    lines: list[bytes] = []
    for kind in (JOBS, PODGROUPS, QUEUES, PODS):
        with open(Path(directory) / f"{kind.plural}.jsonl", "rb") as f:
            lines += f.read().splitlines()
    size = sum(map(len, lines))
    loads = orjson.loads
    best = math.inf
    for _ in range(2):  # the best of two: a shared machine only ever adds time
        started = time.process_time()
        for line in lines:
            loads(line)
        best = min(best, time.process_time() - started)
    return best, size


def sync_result(runs: list[dict[str, Any]], decoded_bytes: int) -> dict[str, Any]:
    """The sync keys of the output. The run with the least CPU counts, over the decode measured just
    before it (others only add noise: the machine is shared)."""
    best = min(runs, key=lambda r: r["cpu_seconds"])
    return {
        "initial_sync_seconds_100k_pods": round(min(r["seconds"] for r in runs), 2),
        "initial_sync_runs": [round(r["seconds"], 2) for r in runs], "initial_sync_pods": best["pods"],
        "initial_sync_cpu_seconds": round(best["cpu_seconds"], 2),
        "initial_sync_cpu_runs": [round(r["cpu_seconds"], 2) for r in runs],
        "initial_sync_gc_seconds": round(best["gc_seconds"], 2), "initial_sync_gc_collections": best["gc_collections"],
        "json_decode_cpu_seconds": round(best["decode_cpu_seconds"], 2),
        "json_decode_cpu_runs": [round(r["decode_cpu_seconds"], 2) for r in runs], "json_bytes": decoded_bytes,
        "sync_cpu_over_json_decode": round(best["cpu_seconds"] / best["decode_cpu_seconds"], 2),
        "sync_cpu_over_json_decode_runs": [round(r["cpu_seconds"] / r["decode_cpu_seconds"], 2) for r in runs],
        "rss_after_sync_bytes": best["rss_bytes"],
        "http_scrape_ms_p50": round(statistics.median(r["http_scrape_ms_p50"] for r in runs), 1),
        "http_scrape_gzip_ms_p50": round(statistics.median(r["http_scrape_gzip_ms_p50"] for r in runs), 1),
    }


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["sync"]:
        sync_child(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
