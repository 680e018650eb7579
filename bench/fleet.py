"""Fleet benchmark (issue 32): several clusters' watchdogs writing one PostgreSQL, then the API over HTTP on a
ledger of --runs job runs spread over the clusters. Prints one JSON object on stdout (progress on stderr).

    .venv/bin/python bench/fleet.py            # 10 clusters at 300,000 pods a day each, 1,000,000 runs
    .venv/bin/python bench/fleet.py --quick    # CI smoke (< 60 s): 3 clusters, a short window, 20,000 runs

Writers: one process per cluster (as one Deployment per cluster would be), each the real `Watchdog`
(its writer thread, detectors, alert book, heartbeat, default intervals: checks and flushes every 15 s,
waste every 60 s, heartbeat every 30 s) with its engine scoped to its cluster, fed in real time as its
informers and the metrics-API collector would feed it: Jobs arrive so that --pods-per-day pods are created
per day (the shapes, runtimes and outcomes of bench/soak_workload.py: batch jobs, gangs, GPU training,
arrays); each cluster starts with the population still running from the last three hours (its informers'
first lists), then jobs are created, scheduled (PodGroup and pods Running, Job Running) and finish (pods
Succeeded or Failed, Job Completed or Failed, pods and PodGroup deleted) as their runtimes say; every
30 s a usage sample for every running container. The writer's transactions (events, flushes of rollups
and the ledger, the detectors' passes, the heartbeat) are timed in each process over the --seconds after
--warmup (the first lists and first flush are warm-up): `writer_p99_seconds_max` is the worst cluster's
p99 (target <= 1 s). All processes share this machine's cores with PostgreSQL, so the figures are
pessimistic for clusters that each run their watchdog on their own nodes.

API: --runs ledger rows over the clusters, 8 namespaces and 7 queues, 30 days of creation times, added
to what the writers stored (then ANALYZE, as autovacuum would). The watchdog's app (`create_app`, as
cluster c00's watchdog serves it) runs in uvicorn on a local port; `api_p95_ms` is the p95 of
--requests GETs per kind of /api/v1/jobs and /api/v1/alerts list filtered by `?cluster=` and
`?namespace=` (target <= 200 ms); the UI's jobs page with the same filters is `ui_p95_ms`.

The database is created on $VOLCANO_BENCH_POSTGRES (default postgresql://postgres@127.0.0.1:5432/postgres)
and dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from pydantic import SecretStr
from sqlalchemy import insert, text
from sqlalchemy.orm import Session

from volcano_monitor.core.model import parse_job, parse_podgroup
from volcano_monitor.watchdog.config import Settings, load
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.sources.feeds import pod_view
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.state.samples import UsageSample
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health

import soak_workload as work  # the Jobs' shapes and objects, as bench/soak.py writes them  # isort: skip
import ui  # the scratch database's admin URL and the API token, as bench/ui.py uses them  # isort: skip



POLL = 30.0  # seconds between usage samples (the metrics-API collector's default)
Obj = dict[str, Any]


def log(message: str) -> None:
    print(f"[fleet {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else 0.0


# ---- one cluster's feed ----------------------------------------------------------------------------------

class Feed:
    """Plays Volcano, the kubelet and metrics-server for one watchdog: informer events and usage polls."""

    def __init__(self, watchdog: Watchdog, cluster: str, pods_per_day: float, seed: int) -> None:
        self.watchdog, self.cluster, self.rng = watchdog, cluster, random.Random(seed)
        sample = [work.make_run(random.Random(i), i).npods for i in range(2000)]
        self.jobs_per_second = pods_per_day / 86400 / statistics.fmean(sample)
        self.seq, self.live, self.last = 0, list[Any](), 0.0
        self.stats = {"jobs": 0, "pods": 0, "events": 0, "samples": 0}

    def send(self, what: str, event: str, obj: Any) -> None:
        self.stats["events" if what != "samples" else "samples"] += 1 if what != "samples" else len(obj)
        self.watchdog.enqueue(what, event, obj)

    def _job(self, run: Any, phase: str, now: float) -> Obj:
        raw = work.job_object(run)
        raw["metadata"].update(uid=run.uid, creationTimestamp=work.rfc3339(run.created))
        conditions = [{"status": "Pending", "lastTransitionTime": work.rfc3339(run.created)}]
        if phase != "Pending":
            conditions.append({"status": "Running", "lastTransitionTime": work.rfc3339(run.running_since)})
        if phase in ("Completed", "Failed"):
            conditions.append({"status": phase, "lastTransitionTime": work.rfc3339(now)})
        raw["status"] = {"state": {"phase": phase, "lastTransitionTime": work.rfc3339(now)},
                         "minAvailable": run.min_available, "conditions": conditions,
                         **({"running": run.npods} if phase == "Running" else {}),
                         **({"succeeded": run.npods} if phase == "Completed" else {}),
                         **({"failed": 1, "succeeded": run.npods - 1} if phase == "Failed" else {})}
        return raw

    def _group(self, run: Any, phase: str | None, now: float) -> Obj:
        raw = work.podgroup_object(run)
        raw["metadata"].update(uid=f"{run.uid}-pg", creationTimestamp=work.rfc3339(run.created))
        if phase is not None:
            raw["status"] = {"phase": phase, "running": run.npods if phase == "Running" else 0,
                             "conditions": [{"type": "Scheduled", "status": "True",
                                             "lastTransitionTime": work.rfc3339(now)}]}
        return raw

    def _pod(self, pod: Any, now: float, exit_code: int | None = None, reason: str = "") -> Any:
        raw = work.pod_object(pod, pod.run.created)
        raw["metadata"]["uid"] = f"{pod.run.uid}-{pod.name}"
        if pod.node:
            raw["spec"]["nodeName"] = pod.node
            raw["status"] = work.pod_status(pod, now, exit_code, reason)
        return pod_view(None, raw)

    def create(self, created: float, now: float) -> None:
        """A Job submitted at `created`, as the informers deliver it at `now`: pending, or already running
        (the first lists); nothing when it ended before `now`."""
        run = work.make_run(self.rng, self.seq)
        self.seq += 1
        run.created, run.running_since = created, created + 2.0
        if now >= run.running_since + run.runtime:
            return
        run.uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.cluster}/{run.name}"))
        run.pods = [work.PodRun(run, task, i, f"{run.name}-{task.name}-{i}")
                    for task in run.tasks for i in range(task.replicas)]
        self.stats["jobs"] += 1
        self.stats["pods"] += len(run.pods)
        running = now >= run.running_since
        if running:
            self._place(run)
        self.send("jobs", "ADDED", parse_job(self._job(run, "Running" if running else "Pending", now)))
        self.send("podgroups", "ADDED", parse_podgroup(self._group(run, "Running" if running else None, now)))
        for pod in run.pods:
            self.send("pods", "ADDED", self._pod(pod, now))
        self.live.append(run)

    def _place(self, run: Any) -> None:
        for n, pod in enumerate(run.pods):
            pod.node, pod.started, pod.phase = f"node-{(hash(run.name) + n) % 200:03d}", run.running_since, "Running"

    def start(self, run: Any, now: float) -> None:
        self._place(run)
        for pod in run.pods:
            self.send("pods", "MODIFIED", self._pod(pod, now))
        self.send("podgroups", "MODIFIED", parse_podgroup(self._group(run, "Running", now)))
        self.send("jobs", "MODIFIED", parse_job(self._job(run, "Running", now)))

    def finish(self, run: Any, now: float) -> None:
        failed = run.outcome in ("fail", "oom")
        for n, pod in enumerate(run.pods):
            code, reason = (137, "OOMKilled") if failed and n == 0 and run.outcome == "oom" else \
                (1, "Error") if failed and n == 0 else (0, "Completed")
            self.send("pods", "MODIFIED", self._pod(pod, now, code, reason))
        self.send("jobs", "MODIFIED", parse_job(self._job(run, "Failed" if failed else "Completed", now)))
        for pod in run.pods:
            self.send("pods", "DELETED", self._pod(pod, now, 0, "Completed"))
        self.send("podgroups", "DELETED", parse_podgroup(self._group(run, "Running", now)))

    def first_lists(self, now: float) -> None:
        """What is still running after three hours of arrivals."""
        self.last = now - work.RUNTIME_CAP
        self.arrivals(now)

    def arrivals(self, now: float) -> None:
        """The Jobs submitted since the last call."""
        t = self.last
        while True:
            t += self.rng.expovariate(self.jobs_per_second)
            if t >= now:
                break
            self.create(t, now)
        self.last = now

    def tick(self, now: float) -> None:
        self.arrivals(now)
        for run in [r for r in self.live if not r.pods or r.pods[0].phase == "Pending"]:
            if now >= run.running_since:
                self.start(run, now)
        done = [r for r in self.live if now >= r.running_since + r.runtime]
        for run in done:
            self.finish(run, now)
        self.live = [r for r in self.live if now < r.running_since + r.runtime]

    def poll(self, now: float) -> None:
        samples = [UsageSample(now, run.namespace, pod.name, pod.task.name, 0.5 + (hash(pod.name) % 100) / 50,
                               2.0**30 * (1 + hash(pod.name) % 8))
                   for run in self.live for pod in run.pods if pod.phase == "Running"]
        if samples:
            self.send("samples", "metrics_api", samples)


def writer_process(url: str, cluster: str, args: argparse.Namespace, seed: int, out: Any) -> None:
    """One cluster's watchdog and its feed; its transactions' durations in the measured window go to `out`."""
    engine = make_engine(url, cluster=cluster)
    watchdog = Watchdog(load(None, environ={}, database_url=url, cluster={"name": cluster}), engine, None)
    timings: list[tuple[float, float, bool]] = []  # (monotonic end, seconds, held a flush)
    inner = watchdog.writer._transaction

    def timed(writes: list[Any], periodic: list[str]) -> None:
        started = time.perf_counter()
        inner(writes, periodic)
        timings.append((time.monotonic(), time.perf_counter() - started, "flush" in periodic))

    watchdog.writer._transaction = timed  # type: ignore[method-assign]
    feed = Feed(watchdog, cluster, args.pods_per_day, seed)
    watchdog.start()
    feed.first_lists(time.time())
    watchdog.writer.drain(600)
    begin = time.monotonic() + args.warmup
    end, next_poll = begin + args.seconds, time.monotonic()
    cpu_before = None
    while time.monotonic() < end:
        if cpu_before is None and time.monotonic() >= begin:
            cpu_before = time.process_time()
        feed.tick(time.time())
        if time.monotonic() >= next_poll:
            feed.poll(time.time())
            next_poll += POLL
        time.sleep(1.0)
    cpu = time.process_time() - (cpu_before or 0.0)
    watchdog.stop()
    engine.dispose()
    window = [(seconds, flush) for at, seconds, flush in timings if at >= begin]
    out.put({"cluster": cluster, "transactions": [s for s, _ in window], "flushes": [s for s, f in window if f],
             "feed": feed.stats, "live_pods": sum(len(r.pods) for r in feed.live), "cpu_seconds": round(cpu, 1),
             "db_errors": watchdog.stats.db_errors, "skipped": watchdog.stats.skipped,
             "samples_accepted": watchdog.recorder.accepted})


def writers(url: str, args: argparse.Namespace) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    names = [f"c{i:02d}" for i in range(args.clusters)]
    processes = [context.Process(target=writer_process, args=(url, name, args, i, out), daemon=True)
                 for i, name in enumerate(names)]
    for process in processes:
        process.start()
    results = [out.get(timeout=args.warmup + args.seconds + 900) for _ in processes]
    for process in processes:
        process.join(60)
    per = {}
    for r in sorted(results, key=lambda r: r["cluster"]):
        per[r["cluster"]] = {"p50_s": round(percentile(r["transactions"], 0.5), 4),
                             "p99_s": round(percentile(r["transactions"], 0.99), 4),
                             "max_s": round(max(r["transactions"], default=0.0), 4),
                             "flush_p99_s": round(percentile(r["flushes"], 0.99), 4),
                             "transactions": len(r["transactions"]), "live_pods": r["live_pods"],
                             "cpu_seconds": r["cpu_seconds"], "db_errors": r["db_errors"], "skipped": r["skipped"],
                             "samples_accepted": r["samples_accepted"],
                             **r["feed"]}
    return {"writer_p99_seconds_max": max(v["p99_s"] for v in per.values()),
            "writer_flush_p99_seconds_max": max(v["flush_p99_s"] for v in per.values()), "writers": per}


# ---- the API on a big ledger -----------------------------------------------------------------------------

def seed_runs(url: str, clusters: int, runs: int) -> None:
    now = datetime.now(UTC)
    for c in range(clusters):
        engine = make_engine(url, cluster=f"c{c:02d}")
        rows = []
        for i in range(c, runs, clusters):
            created = now - timedelta(seconds=(i * 2_592_000) // runs)
            workload = f"wl-{i % 400}"
            phase = ("Completed", "Completed", "Failed", "Running")[i % 4]
            rows.append(dict(uid=f"seed-{i}", namespace=work.NAMESPACE_NAMES[i % 8], name=f"{workload}-{i}",
                             workload=workload, queue=work.QUEUE_NAMES[i % 7], phase=phase, created_at=created,
                             started_at=created, finished_at=created + timedelta(minutes=30) if i % 4 != 3 else None,
                             requested_cpu_cores=8, requested_memory_bytes=32 * 2**30, cpu_core_seconds_used=1000.0,
                             cpu_core_seconds_requested=8000, memory_byte_seconds_used=2**40,
                             memory_byte_seconds_requested=2**42, updated_at=created))
        with Session(engine) as session, session.begin():
            for start in range(0, len(rows), 10_000):
                session.execute(insert(JobRun), rows[start:start + 10_000])
        engine.dispose()
        log(f"seeded {len(rows)} runs of c{c:02d}")


def api(url: str, args: argparse.Namespace) -> dict[str, Any]:
    import uvicorn

    seed_runs(url, args.clusters, args.runs)
    engine = make_engine(url, cluster="c00")
    with engine.begin() as connection:
        connection.execute(text("ANALYZE"))
    app = create_app(engine, Settings(api_token=SecretStr(ui.TOKEN)), Health(ready=lambda: True, collectors=dict))
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    kinds = {"jobs": "/api/v1/jobs?cluster={c}&namespace={ns}",
             "jobs_failed": "/api/v1/jobs?cluster={c}&namespace={ns}&phase=Failed",
             "jobs_deep_page": "/api/v1/jobs?cluster={c}&namespace={ns}&offset=2000",
             "alerts": "/api/v1/alerts?cluster={c}&namespace={ns}"}
    ui_kinds = {"ui_jobs": "/ui/jobs?cluster={c}&namespace={ns}"}
    out: dict[str, Any] = {}
    filtered = None
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ui.TOKEN}"},
                      timeout=60) as client:
        for name, path in {**kinds, **ui_kinds}.items():
            times = []
            for i in range(args.requests + 3):
                target = path.format(c=f"c{i % args.clusters:02d}", ns=work.NAMESPACE_NAMES[i % 8])
                started = time.perf_counter()
                response = client.get(target)
                elapsed = (time.perf_counter() - started) * 1000
                assert response.status_code == 200, (target, response.status_code, response.text[:200])
                if i >= 3:  # three warm-up requests
                    times.append(elapsed)
                if name == "jobs" and i == 4:  # another cluster's: does ?cluster= narrow the list (not c00's own)?
                    asked = f"c{4 % args.clusters:02d}"
                    filtered = {item.get("cluster") for item in response.json()["items"]} == {asked}
            out[name] = {"p50_ms": round(statistics.median(times), 1), "p95_ms": round(percentile(times, 0.95), 1)}
    server.should_exit = True
    thread.join(30)
    engine.dispose()
    return {"api_p95_ms": max(out[k]["p95_ms"] for k in kinds), "ui_p95_ms": max(out[k]["p95_ms"] for k in ui_kinds),
            "cluster_filter_applied": filtered, "api": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="CI smoke: 3 clusters, 15 s measured, 20,000 runs")
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--pods-per-day", type=float, default=300_000)
    parser.add_argument("--warmup", type=float, default=45.0, help="seconds after the first lists are stored")
    parser.add_argument("--seconds", type=float, default=300.0, help="the measured window")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    if args.quick:
        args.clusters, args.warmup, args.seconds, args.runs, args.requests = 3, 5.0, 15.0, 20_000, 20
    name = f"vm_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ui.POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://{ui.POSTGRES_ADMIN.rsplit('/', 1)[0].split('://', 1)[1]}/{name}"
    result: dict[str, Any] = {"clusters": args.clusters, "pods_per_day_per_cluster": args.pods_per_day,
                              "measured_seconds": args.seconds, "runs": args.runs, "cores": os.cpu_count()}
    try:
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        log(f"{args.clusters} writers: {args.warmup:g} s warm-up, {args.seconds:g} s measured")
        result.update(writers(url, args))
        log(f"writer p99 (worst cluster): {result['writer_p99_seconds_max']} s; the API on {args.runs} runs")
        log(json.dumps(result))  # kept should the API part fail
        result.update(api(url, args))
    finally:
        with psycopg.connect(ui.POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    result["targets"] = {"writer_p99_seconds_max": "<= 1", "api_p95_ms": "<= 200"}
    result["meets_targets"] = {"writer_p99_seconds_max": result["writer_p99_seconds_max"] <= 1.0,
                               "api_p95_ms": result["api_p95_ms"] <= 200}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
