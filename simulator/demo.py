"""`make demo`: the simulated Volcano cluster plus every volcano-monitor component, started as a user
would start them (their real commands), with a summary of where to look. Where Prometheus and
Alertmanager are installed, they are started too: Prometheus scrapes everything and evaluates
alerts/, Alertmanager routes to the watchdog, the watchdog posts to a local chat inbox."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from volcano_monitor.core.flags import Parser
from volcano_monitor.simulator.stack import Stack, alertmanager_binary, alertmanager_config, prometheus_config

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv's scripts: printed commands must run as printed
DEMO_TOKEN = "demo-token"


PROD_COST_PER_SECOND = 3e-4  # what the demo's prod queue spends per second of wall time at 10x (measured)


def forecast_budget(queue: str, now: datetime) -> dict[str, Any]:
    """A budget the queue's demo rate would pass before its period ends but not reach in the demo's first
    minutes, whatever the day: a fixed 20 USD a week read as "within budget" from Sunday morning on (the rate
    times the little left of the week stayed under it), so BudgetForecast depended on the weekday. The period
    with more time left (week or month) and 30 % of what the rate would spend in it, at most 20."""
    monday = (now - timedelta(days=now.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    month_end = (first + timedelta(days=32)).replace(day=1)
    period, end = max((("week", monday + timedelta(days=7)), ("month", month_end)), key=lambda p: p[1])
    amount = min(20.0, round(0.3 * PROD_COST_PER_SECOND * (end - now).total_seconds(), 2))
    return {"queue": queue, "period": period, "amount": amount, "forecast_after_seconds": 60}


def demo_watchdog_config(webhook: str, api_url: str, prometheus: str | None) -> dict[str, Any]:
    """The watchdog's configuration in the demo: windows for a scenario at 10x, so that every alert
    kind fires within five minutes (production defaults wait 10-30 minutes), 30-second usage rollups
    (the JobIdle window must hold two), capability control in dry-run, and chat messages grouped
    and repeated as a person would keep the channel unmuted (one
    group per alert kind, at most one update per group every five minutes: 37 messages in the first
    five minutes before, when grouped by kind and queue every minute)."""
    return {
        "api_token": DEMO_TOKEN,
        "sources": {"metrics_api": {"interval_seconds": 10}, "rollup_seconds": 30,
                    "prometheus": {"enabled": prometheus is not None, "url": prometheus or "http://127.0.0.1:9090",
                                   "interval_seconds": 15, "rate_window": "1m"}},
        "detectors": {"gang_unschedulable_seconds": 45, "partial_gang_seconds": 45, "queue_starved_seconds": 45,
                      "idle_window_seconds": 90, "over_requested_min_seconds": 30,
                      "gpu_stranded": {"window_seconds": 45},
                      "node_hot": {"window_seconds": 45, "interval_seconds": 10}},
        # GpuIdle for bert-finetune's idle GPUs, GpuNoData for render-farm's unreported one (Prometheus only).
        "gpu_idle": {"no_data_seconds": 60, "default": {"gpu_idle_limit_seconds": 60}},
        # Prices, so the report, /api/v1/reports and volcano_watchdog_queue_cost_total show cost (docs/cost.md),
        # and budgets a demo reaches (its minutes cost cents): research's (research-nlp included) is spent within
        # two minutes (BudgetExceeded); prod's is not, but prod's rate since its first run would pass it before
        # the week ends (BudgetForecast).
        "costs": {"currency": "USD", "prices": {"cpu": 0.04, "memory": 0.005, "nvidia.com/gpu": 2.5},
                  "budgets": [{"queue": "research", "period": "week", "amount": 0.05},
                              forecast_budget("prod", datetime.now(UTC))]},
        "capability": {"enabled": True, "mode": "dry-run", "reconcile_interval_seconds": 30,
                       "policies": {"research-nlp": {"demand": {"window_seconds": 3600}}}},
        "notifications": {
            "receivers": [{"name": "demo-chat", "webhook": {"url": webhook}}],
            "route": {"receiver": "demo-chat", "group_by": ["alertname"], "group_wait": "20s",
                      "group_interval": "5m", "repeat_interval": "4h"},
            "api_url": api_url}}


def start_second_cluster(stack: Stack, args: argparse.Namespace, workdir: Path, database: str) -> str:
    """`--clusters 2`: cluster west, a second simulator playing the same scenario and a watchdog of its own
    writing the first one's database (the first is cluster east), as one Deployment per cluster would. Only
    the first cluster has an exporter and Prometheus: the fleet is the watchdogs' affair (docs/fleet.md).
    Both share the chat inbox. Returns the lines the summary prints about it."""
    sim_port, watchdog_port = args.sim_port + 100, args.watchdog_port + 100
    sim_url, watchdog_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{watchdog_port}"
    kubeconfig = workdir / "kubeconfig-west"
    kubeconfig.unlink(missing_ok=True)
    stack.start_python("volcano-sim-west", "volcano_monitor.simulator.cli", "--listen", f"127.0.0.1:{sim_port}",
                       "--kubeconfig-out", str(kubeconfig), "--speed", args.speed, "--scenario", "demo",
                       "--volcano-release", args.volcano_release, ready_url=sim_url + "/healthz")
    config = stack.write_yaml("watchdog-west.yaml", demo_watchdog_config(
        f"http://127.0.0.1:{args.chat_port}/webhook/demo", watchdog_url, None))
    stack.start_python("volcano-watchdog-west", "volcano_monitor.watchdog.runtime.cli", "--kubeconfig",
                       str(kubeconfig), "--database-url", database, "--cluster-name", "west", "--listen",
                       f"127.0.0.1:{watchdog_port}", "--config", str(config), ready_url=watchdog_url + "/readyz",
                       timeout=90)
    return (f"\n  second cluster      west: simulator {sim_url}, watchdog {watchdog_url}/ (the first is east);\n"
            f"                      both watchdogs write {database}: either UI shows the fleet\n"
            f"    kubectl --kubeconfig {kubeconfig} get vcjob -A\n")


def main(argv: list[str] | None = None) -> int:
    parser: argparse.ArgumentParser = Parser(prog="volcano-monitor demo",
                                             description="Run the simulated cluster and volcano-monitor.")
    parser.add_argument("--dir", default=".demo", help="where to write the kubeconfig, configs and logs")
    parser.add_argument("--sim-port", type=int, default=8001)
    parser.add_argument("--exporter-port", type=int, default=9746)
    parser.add_argument("--watchdog-port", type=int, default=9747)
    parser.add_argument("--chat-port", type=int, default=9748)
    parser.add_argument("--prometheus-port", type=int, default=9090)
    parser.add_argument("--alertmanager-port", type=int, default=9093)
    parser.add_argument("--speed", default="10", help="scenario speed (see volcano-sim --help)")
    parser.add_argument("--clusters", type=int, choices=[1, 2], default=1,
                        help="2: a second simulated cluster with its own watchdog, both watchdogs writing one database "
                             "as clusters east and west (docs/fleet.md); the second cluster's simulator and watchdog "
                             "listen 100 ports above the first's")
    parser.add_argument("--database-url", help="the watchdogs' database (default: a SQLite file in --dir; with "
                        "--clusters 2 both write it, a PostgreSQL URL shares it as a fleet would)")
    parser.add_argument("--volcano-release", default="v1.12",
                        help="the Volcano release the simulated cluster serves (see volcano-sim --help); v1.12 is the "
                             "release of the recordings and the first with HyperNodes, so the fragmentation panels "
                             "have data")
    args = parser.parse_args(argv)
    workdir = Path(args.dir).resolve()
    kubeconfig = workdir / "kubeconfig"
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig.unlink(missing_ok=True)
    stack = Stack(workdir)
    url = "http://127.0.0.1:{}".format
    sim_url, exporter_url, watchdog_url, chat_url = (url(p) for p in (args.sim_port, args.exporter_port,
                                                                      args.watchdog_port, args.chat_port))
    with_prometheus = shutil.which("prometheus") is not None
    with_alertmanager = with_prometheus and alertmanager_binary() is not None
    try:
        stack.start_python("chat-inbox", "volcano_monitor.simulator.chatinbox", "--listen",
                           f"127.0.0.1:{args.chat_port}",
                           ready_url=chat_url + "/messages")
        stack.start_python("volcano-sim", "volcano_monitor.simulator.cli", "--listen", f"127.0.0.1:{args.sim_port}",
                           "--kubeconfig-out", str(kubeconfig), "--speed", args.speed, "--scenario", "demo",
                           "--volcano-release", args.volcano_release,
                           ready_url=sim_url + "/healthz")
        stack.start_python("volcano-exporter", "volcano_monitor.exporter.cli", "--kubeconfig", str(kubeconfig),
                           "--listen", f"127.0.0.1:{args.exporter_port}", ready_url=exporter_url + "/readyz")
        prometheus = url(args.prometheus_port)
        config = stack.write_yaml("watchdog.yaml", demo_watchdog_config(
            chat_url + "/webhook/demo", watchdog_url, prometheus if with_prometheus else None))
        # Two clusters get a file of their own: a later one-cluster demo (its name defaulted) would be refused in
        # a database holding other clusters' heartbeats.
        database = args.database_url or f"sqlite:///{workdir / ('watchdog.db' if args.clusters == 1 else 'fleet.db')}"
        names = ["--cluster-name", "east"] if args.clusters == 2 else []
        # The printed commands read as the watchdog writes: its name, else its kubeconfig's context (docs/fleet.md)
        reader = names or ["--kubeconfig", str(kubeconfig)]
        stack.start_python("volcano-watchdog", "volcano_monitor.watchdog.runtime.cli", "--kubeconfig", str(kubeconfig),
                           "--database-url", database, *names, "--listen", f"127.0.0.1:{args.watchdog_port}",
                           "--config", str(config), ready_url=watchdog_url + "/readyz", timeout=90)
        fleet = start_second_cluster(stack, args, workdir, database) if args.clusters == 2 else ""
        extra = ""
        if with_prometheus:
            am_target = f"127.0.0.1:{args.alertmanager_port}" if with_alertmanager else None
            rules = sorted((ROOT / "alerts").glob("*.rules.yml"))
            stack.start_prometheus(args.prometheus_port, prometheus_config(
                {"volcano-exporter": f"127.0.0.1:{args.exporter_port}",
                 "volcano-watchdog": f"127.0.0.1:{args.watchdog_port}",
                 "cadvisor-dcgm": f"127.0.0.1:{args.sim_port}"}, rules, am_target))
            extra += f"\n  prometheus          {prometheus}   (alerts: {prometheus}/alerts)\n"
            if with_alertmanager:
                am = stack.start_alertmanager(args.alertmanager_port,
                                              alertmanager_config(watchdog_url, DEMO_TOKEN))
                extra += f"  alertmanager        {am}   (routes to the watchdog's receiver)\n"
        else:
            extra += "\n  (install Prometheus and Alertmanager — Debian: prometheus prometheus-alertmanager —\n" \
                     "   and the demo starts them too, with the alert rules loaded)\n"
        dashboards = "\n".join(f"    {path}" for path in sorted((ROOT / "dashboards").glob("*.json")))
        watchdog_cmd = BIN / "volcano-watchdog"
        print(f"""
volcano-monitor demo is running (logs and configs in {workdir}/). Ctrl-C stops everything.

  web UI              {watchdog_url}/   (open this first: jobs, why they wait, alerts, queues, recommendations)

  simulated cluster   {sim_url}   (Volcano {args.volcano_release}, scenario 'demo' at {args.speed}x)
    kubectl --kubeconfig {kubeconfig} get vcjob,podgroup,queue -A
    curl -s {sim_url}/metrics | head            # cAdvisor/DCGM-style usage

  exporter            {exporter_url}/metrics
    curl -s {exporter_url}/metrics | grep -E '^volcano_(queue|job)_' | head -30

  watchdog            {watchdog_url}/docs   (API; token for writes: {DEMO_TOKEN})
    curl -s '{watchdog_url}/api/v1/alerts?state=firing'
    {watchdog_cmd} --database-url {database} {' '.join(reader)} recommend
    {watchdog_cmd} --config {config} notify-test --receiver demo-chat

  chat inbox          {chat_url}/messages   (the watchdog's messages; also printed in {workdir}/chat-inbox.log)
{fleet}{extra}
  Grafana dashboards to import (datasource: that Prometheus):
{dashboards}
""", flush=True)
        stop = [False]
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.__setitem__(0, True))
        while not stop[0]:
            failed = stack.failed()
            if failed:
                print(f"demo: {failed} exited; see {stack.log(failed)}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        return 0
    except RuntimeError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
