"""Memory soak (issue 12): does the RSS of `volcano-exporter` and `volcano-watchdog` stay flat under a
day of pod churn? Prints one JSON object on stdout (progress on stderr).

    .venv/bin/python bench/soak.py                # 20 minutes: 300,000 pods/day, one day in 20 minutes
    .venv/bin/python bench/soak.py --minutes 2    # quick check, same churn rate
    .venv/bin/python bench/soak.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/soak

Both are the real programs (their console scripts, `--kubeconfig` from `write_kubeconfig`), the watchdog
on a fresh SQLite file in a temporary directory unless --database-url is given (used as is; a
PostgreSQL database should be empty or the watchdog's own). They watch the simulated API server
(`SimulatorThread`, no scenario: nothing but this script writes to its store), which runs in this
process. This script plays Volcano's job controller and scheduler, the kubelet, the TTL controller,
the garbage collector and metrics-server by writing into the store (through `SimulatorThread.call`,
on the server's loop, in one batch every --tick seconds):

- Jobs (batch.volcano.sh/v1alpha1) arrive so that --pods-per-day pods are created per simulated day,
  and a simulated day lasts --day-minutes of wall time (default 300,000 pods in 20 minutes, 250 pods/s,
  every cluster duration below divided by 72). Shapes: single-pod batch jobs (50%), 2-8 pod gangs (25%),
  GPU training jobs with a master and 3-15 workers (12%), 10-40 pod arrays with minAvailable 1 (13%);
  lognormal runtimes (median 10 min to 1 h of cluster time, capped at 3 h so that the live population
  is steady well before 20% of a 20-minute run); 10% of the gangs wait minutes in a Pending PodGroup
  (Unschedulable condition and Event) before they are enqueued.
- Lifecycle: Job (Pending) + PodGroup (`status: {}`) -> PodGroup Inqueue, pods created Pending, Job
  pending=N -> pods bound (spec.nodeName), PodGroup Running + a `Scheduled` Event -> pods Running, Job
  Running -> pods Succeeded (6% of jobs: one pod Failed exit 1, 2%: OOMKilled exit 137, the others
  deleted gracefully), Job Completed/Failed (then its final status without counts, as Volcano writes
  it), PodGroup deleted -> after ttlSecondsAfterFinished (5 min to 1 h) the Job and its pods are
  deleted. 2% of the jobs are deleted while running (pods get a deletionTimestamp, then go).
  Events are deleted after an hour of cluster time.
- Usage: metrics-server's PodMetrics (metrics.k8s.io) for every running pod, refreshed every 30 s of
  wall time from `simulator.usage` (ContainerUsage, pod_metrics), deleted when the pod stops; the
  watchdog polls them (its default 30 s), so it has samples (`watchdog_usage_samples`).
- Queues' status.allocated is rewritten every 10 s from the running pods.

Measured:
- exporter_rss_bytes / watchdog_rss_bytes: VmRSS of each process (/proc/PID/status) at 25, 50, 75 and
  100% of the run, each the median of the samples taken every 2 s over the 60 s before the checkpoint:
  a single reading can land inside a scrape (the exporter builds a 14 MB body) or a flush and say
  +3% for a moment, in either direction, and 60 s hold four scrapes and four of the programs' malloc
  trims (every 15 s), so where the checkpoint falls in their cycles does not decide the figure. The single
  readings are in `*_rss_bytes_instant`;
  `rss_timeline` also has one sample a minute (a single reading, and `*_median` of the last 60 s).
  The first ~20% of the run is warm-up
  (informer caches, the first relist, histograms, the live population reaching its steady size), so the
  growth ratios are RSS at 100% / RSS at 25% (target <= 1.05). `live_objects` gives the store's pod,
  job and PodGroup counts at the same points: growth with a flat population is retention.
  `*_rss_growth_ratio_at_equal_population` (a diagnostic, not the target) fits the timeline's medians from
  25% on to RSS = a + b * minute + c * live pods and gives 1 + b * (75% of the run) / RSS at 25%: the
  growth that time alone accounts for, since the live population drifts a few per cent either way.
- The exporter's /metrics is scraped every --scrape-interval seconds (15, as Prometheus), the
  watchdog's /metrics too; `scrapes` has counts, sizes and durations, and the events each applied
  (from their self-metrics).
- cpu_seconds of each process, so that the load of the soak itself can be judged (2 shared cores).

--debug-memory gc|tracemalloc runs both programs under a small bootstrap that dumps, on SIGUSR1, the
gc object counts by type, the allocator's figures (pymalloc blocks, arenas and free bytes, glibc heap in
use, free and mmapped, SQLite's own, and the RSS that glibc's malloc_trim(0) gives back: the dump trims),
the length and table bytes of the project's large containers and, with `tracemalloc`, a snapshot with 10
frames; the dumps are taken at 25 and 100% and the JSON gets the types, containers and
allocation sites that grew most (`memory_debug`). A dump is taken after its checkpoint's readings, and
what it allocates (a list of every object, ~8 MB) raises the readings after it; tracemalloc also slows
the programs: the ratios of a debug run are not the measurement.

The pieces, each a module beside this one: the Jobs and their objects (soak_workload.py), the churn that
writes them (soak_churn.py), the programs' processes, /proc readings and scrapes (soak_programs.py), the
--debug-memory bootstrap and dump comparison (soak_memory.py), the ratios and the fit (soak_stats.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import httpx
from soak_churn import METRICS_PERIOD, Churn, setup_cluster
from soak_memory import BOOTSTRAP, compare_dumps, wait_for_dumps
from soak_programs import (
    ERROR_FAMILIES,
    Child,
    Scrapes,
    child_env,
    error_series,
    free_port,
    read_cpu_seconds,
    read_rss,
    ready,
    sums,
    wait_until,
)
from soak_stats import growth_at_equal_population, ratio, window_median
from soak_workload import NAMESPACE_NAMES, QUEUE_NAMES, Obj

from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.simulator.store import Store

TARGET_RSS_GROWTH_RATIO = 1.05
CHECKPOINTS = (25, 50, 75, 100)
RSS_SAMPLE_SECONDS = 2.0  # wall seconds between RSS readings of both programs
RSS_WINDOW_SECONDS = 60.0  # a checkpoint's RSS is the median of the readings in this window before it
HISTORY_LIMIT = 30_000  # watch history per resource kept by the store (its default, 200,000, holds GBs of pods)

log_start = time.monotonic()


def log(message: str) -> None:
    print(f"[soak {time.monotonic() - log_start:7.1f}s] {message}", file=sys.stderr, flush=True)


# ---- the run ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM (and SIGHUP) end the run like Ctrl-C: through the `finally` blocks that stop the children."""
    def handler(signum: int, _: FrameType | None) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the cleanup
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def measure(args: argparse.Namespace) -> Obj:
    duration = args.minutes * 60.0
    speed = 1440.0 / args.day_minutes
    pods_per_second = args.pods_per_day / (args.day_minutes * 60.0)
    children: list[Child] = []
    sim: SimulatorThread | None = None
    workdir = Path(tempfile.mkdtemp(prefix="volcano-soak-"))
    try:
        store = Store(history_limit=HISTORY_LIMIT)
        sim = SimulatorThread(store=store, bookmark_interval=5).start()
        churn = Churn(store, pods_per_second, speed, args.nodes, args.seed)
        sim.call(setup_cluster, store, args.nodes)
        kubeconfig = workdir / "kubeconfig"
        write_kubeconfig(kubeconfig, sim.url)
        database_url = args.database_url or f"sqlite:///{workdir}/watchdog.db"
        exporter_port, watchdog_port = free_port(), free_port()
        debug = args.debug_memory != "off"
        common = ["--kubeconfig", str(kubeconfig), "--log-level", args.log_level]
        for program, port, extra in (("exporter", exporter_port, []),
                                     ("watchdog", watchdog_port, ["--database-url", database_url, "run"])):
            env = child_env({})
            command = [str(Path(sys.executable).parent / f"volcano-{program}")]
            if debug:
                (workdir / f"dumps-{program}").mkdir()
                env |= {"SOAK_DUMP_DIR": str(workdir / f"dumps-{program}"),
                        "SOAK_TRACEMALLOC": str(int(args.debug_memory == "tracemalloc"))}
                if args.debug_memory == "peaks":
                    env["SOAK_PEAKS_AFTER"] = str(args.minutes * 60 / 4)
                command = [sys.executable, "-c", BOOTSTRAP, program]
            children.append(Child(program, [*command, *common, "--listen", f"127.0.0.1:{port}", *extra], workdir, env))
        exporter, watchdog = children
        exporter_url, watchdog_url = f"http://127.0.0.1:{exporter_port}", f"http://127.0.0.1:{watchdog_port}"
        with httpx.Client() as http:
            wait_until(lambda: ready(http, f"{exporter_url}/readyz") and ready(http, f"{watchdog_url}/readyz"), 120,
                       "the exporter and the watchdog to be ready", children)
            log(f"ready: simulator {sim.url}, exporter pid {exporter.pid}, watchdog pid {watchdog.pid}; "
                f"{pods_per_second:.0f} pods/s for {args.minutes:g} min (speed {speed:g}x), logs in {workdir}")
            cpu_start = {c.name: read_cpu_seconds(c.pid) or 0.0 for c in children}
            bench_cpu_start = time.process_time()
            started = time.monotonic()
            end = started + duration
            exporter_scrapes, watchdog_scrapes = Scrapes(), Scrapes()
            stop_scraping = threading.Event()

            def scrape() -> None:  # Prometheus: both targets every --scrape-interval, off the churn's thread
                while not stop_scraping.is_set() and time.monotonic() < end + 30:
                    exporter_scrapes.get(http, f"{exporter_url}/metrics")
                    watchdog_scrapes.get(http, f"{watchdog_url}/metrics")
                    stop_scraping.wait(args.scrape_interval)

            scraper = threading.Thread(target=scrape, name="scraper", daemon=True)
            scraper.start()
            next_minute = started + 60
            pending_checkpoints = list(CHECKPOINTS)
            rss: dict[str, dict[str, int | None]] = {"exporter": {}, "watchdog": {}}
            instant: dict[str, dict[str, int | None]] = {"exporter": {}, "watchdog": {}}
            readings: dict[str, list[tuple[float, int]]] = {"exporter": [], "watchdog": []}
            next_reading = started
            population: dict[str, dict[str, int]] = {}
            timeline: list[Obj] = []
            dumps_requested = 0
            step_seconds: list[float] = []
            while True:
                now = time.monotonic()
                if now >= end + 30:  # bounded even if a step or scrape hangs
                    raise SystemExit("bench/soak: the run overran its end by 30 s")
                for child in children:
                    if not child.alive():
                        raise SystemExit(f"bench/soak: {child.name} exited ({child.proc.returncode}):\n"
                                         f"{child.tail()}")
                t0 = time.perf_counter()
                sim.call(churn.step)
                step_seconds.append(time.perf_counter() - t0)
                elapsed = now - started
                if now >= next_reading:
                    next_reading += RSS_SAMPLE_SECONDS
                    for child in children:
                        value = read_rss(child.pid)
                        if value is not None:
                            kept = [r for r in readings[child.name] if r[0] > now - RSS_WINDOW_SECONDS]
                            readings[child.name] = [*kept, (now, value)]
                if now >= next_minute:
                    next_minute += 60
                    pop = sim.call(churn.population)
                    timeline.append({"minute": round(elapsed / 60), "exporter": read_rss(exporter.pid),
                                     "watchdog": read_rss(watchdog.pid), "live_pods": pop["pods"],
                                     "running_pods": pop["running_pods"],
                                     **{f"{name}_median": window_median(values) for name, values in readings.items()}})
                    log(f"minute {timeline[-1]['minute']}: exporter {timeline[-1]['exporter']} B, watchdog "
                        f"{timeline[-1]['watchdog']} B, {pop}, pods created {churn.pods_created}, "
                        f"max lag {churn.max_lag:.2f} s")
                while pending_checkpoints and elapsed >= duration * pending_checkpoints[0] / 100:
                    percent = str(pending_checkpoints.pop(0))
                    for child in children:
                        instant[child.name][percent] = read_rss(child.pid)
                        rss[child.name][percent] = window_median(readings[child.name]) or instant[child.name][percent]
                    population[percent] = sim.call(churn.population)
                    log(f"{percent}%: exporter {rss['exporter'][percent]} B, watchdog {rss['watchdog'][percent]} B, "
                        f"live {population[percent]}")
                    if debug and percent in ("25", "100"):
                        dumps_requested += 1
                        for child in children:
                            os.kill(child.pid, signal.SIGUSR1)
                if not pending_checkpoints:
                    break
                time.sleep(max(0.0, args.tick - (time.monotonic() - now)))
            elapsed = time.monotonic() - started
            cpu = {c.name: round((read_cpu_seconds(c.pid) or 0.0) - cpu_start[c.name], 1) for c in children}
            bench_cpu = round(time.process_time() - bench_cpu_start, 1)
            stop_scraping.set()
            scraper.join(60)
            exporter_scrapes.get(http, f"{exporter_url}/metrics")
            watchdog_scrapes.get(http, f"{watchdog_url}/metrics")
        exporter_self = sums(exporter_scrapes.last, b"volcano_exporter_",
                             ("volcano_exporter_events_total", "volcano_exporter_relists_total",
                              *ERROR_FAMILIES,
                              "volcano_exporter_objects"))
        watchdog_self = sums(watchdog_scrapes.last, b"volcano_watchdog_",
                             ("volcano_watchdog_collector_samples_total", "volcano_watchdog_collector_errors_total",
                              "volcano_watchdog_alerts"))
        ordered_steps = sorted(step_seconds)
        samples = int(watchdog_self["volcano_watchdog_collector_samples_total"])
        result: Obj = {
            "exporter_rss_bytes": rss["exporter"],
            "watchdog_rss_bytes": rss["watchdog"],
            "exporter_rss_bytes_instant": instant["exporter"],
            "watchdog_rss_bytes_instant": instant["watchdog"],
            "exporter_rss_growth_ratio": ratio(rss["exporter"]),
            "watchdog_rss_growth_ratio": ratio(rss["watchdog"]),
            "target_rss_growth_ratio": TARGET_RSS_GROWTH_RATIO,
        }
        after_warmup = [r for r in timeline if r["minute"] >= args.minutes * CHECKPOINTS[0] / 100]
        for name in ("exporter", "watchdog"):
            result[f"{name}_rss_growth_ratio_at_equal_population"] = growth_at_equal_population(
                [(r["minute"], r["live_pods"], r[f"{name}_median"]) for r in after_warmup if r[f"{name}_median"]],
                args.minutes * (100 - CHECKPOINTS[0]) / 100, rss[name].get("25") or 0)
        ratios = (result["exporter_rss_growth_ratio"], result["watchdog_rss_growth_ratio"])
        result["meets_target"] = all(r is not None and r <= TARGET_RSS_GROWTH_RATIO for r in ratios)
        result |= {
            "minutes": round(elapsed / 60, 2),
            "pods_created": churn.pods_created,
            "jobs_created": churn.runs,
            "pods_per_second": round(churn.pods_created / elapsed, 1),
            "job_outcomes": dict(churn.outcomes),
            "api_writes": sum(churn.writes.values()),
            "api_writes_by_kind": dict(sorted(churn.writes.items())),
            "exporter_events": int(exporter_self["volcano_exporter_events_total"]),
            "exporter_relists": int(exporter_self["volcano_exporter_relists_total"]),
            "exporter_errors": int(sum(exporter_self[name] for name in ERROR_FAMILIES)),
            "exporter_error_series": error_series(exporter_scrapes.last),
            "watchdog_usage_samples": samples,
            "usage_samples_present": samples > 0,
            "watchdog_collector_errors": int(watchdog_self["volcano_watchdog_collector_errors_total"]),
            "live_objects": population,
            "rss_timeline": timeline,
            "scrapes": {"exporter": exporter_scrapes.summary(), "watchdog": watchdog_scrapes.summary()},
            "cpu_seconds": {**cpu, "bench_and_simulator": bench_cpu},
            "driver": {"step_ms_p50": round(ordered_steps[len(ordered_steps) // 2] * 1000, 1),
                       "step_ms_max": round(ordered_steps[-1] * 1000, 1), "max_lag_seconds": round(churn.max_lag, 2),
                       "actions": churn.actions, "store_errors": dict(churn.errors)},
            "config": {"pods_per_day": args.pods_per_day, "day_minutes": args.day_minutes, "speed": speed,
                       "nodes": args.nodes, "namespaces": len(NAMESPACE_NAMES), "queues": len(QUEUE_NAMES) + 1,
                       "database": "sqlite (fresh file)" if not args.database_url else "given --database-url",
                       "scrape_interval_seconds": args.scrape_interval, "podmetrics_period_seconds": METRICS_PERIOD,
                       "store_history_limit": HISTORY_LIMIT, "debug_memory": args.debug_memory,
                       "growth_ratio": "RSS at 100% / RSS at 25% (the first ~20% is warm-up)"},
        }
        if debug:
            result["memory_debug"] = {}
            for child in children:
                paths = wait_for_dumps(workdir / f"dumps-{child.name}", dumps_requested)
                result["memory_debug"][child.name] = (compare_dumps(paths[0], paths[-1]) if len(paths) >= 2
                                                      else "no dumps")
        return result
    finally:
        for child in children:
            child.stop()
        if sim is not None:
            sim.stop()
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=20.0, help="length of the run in wall minutes (20)")
    parser.add_argument("--pods-per-day", type=int, default=300_000, help="pods created per simulated day")
    parser.add_argument("--day-minutes", type=float, default=20.0,
                        help="wall minutes a simulated day lasts (20: 300,000 pods in 20 minutes)")
    parser.add_argument("--nodes", type=int, default=200, help="simulated nodes (a fifth with GPUs)")
    parser.add_argument("--database-url", default="",
                        help="watchdog database (default: a fresh SQLite file), e.g. "
                        "postgresql+psycopg://postgres@127.0.0.1:5432/soak")
    parser.add_argument("--scrape-interval", type=float, default=15.0, help="seconds between /metrics scrapes")
    parser.add_argument("--tick", type=float, default=0.25, help="seconds between churn batches")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="log level of the exporter and the watchdog (their logs go to files)")
    parser.add_argument("--debug-memory", default="off", choices=("off", "gc", "peaks", "tracemalloc"),
                        help="dump gc counts (and tracemalloc snapshots) of both programs at 25%% and 100%%; "
                             "peaks: also, after 25%%, what every thread was running at each new high of "
                             "pymalloc's blocks")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, database)")
    args = parser.parse_args()
    with terminate_as_exit():
        print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
