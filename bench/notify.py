"""Notification latency: a Volcano Job turns Failed -> the chat message naming it arrives (DESIGN §7,
issue 5: p99 <= 2,000 ms). Prints one JSON object.

Everything runs in this process, over real HTTP: the simulated API server (`SimulatorThread`,
scenario "empty": namespaces, nodes and queues, no workload, so nothing but this benchmark moves),
the watchdog (`Watchdog` with its informers, worker and notifier, SQLite in a temporary directory,
the production worker intervals) and a local chat server (`ChatInbox`, generic webhook receiver).

The benchmark plays Volcano's job controller: it creates the Jobs (phase Pending), waits until the
watchdog has seen them all, then writes `status.state.phase: Failed` through the status subresource,
as the real controller does. Two phases: SPACED jobs fail one every SPACING seconds (what a cluster
usually sees), then BURST jobs fail back to back (a node dies and takes a batch of gangs with it).

Per job, latency = arrival at the chat server (its own receive timestamp) minus the moment just before
the status PATCH was sent (so the API server's round trip is included: a slight overestimate). The
route gives every job its own message (`group_by: [alertname, namespace, job_name]`, `group_wait: 0`,
`group_interval: 0`); the receiver's rate limit is raised, because the default (20 a minute) is a
deliberate throttle, not latency, and would hold back the 120 messages here for minutes.

    .venv/bin/python bench/notify.py
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from volcano_monitor.core.kube.config import api_client
from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine

SPACED, SPACING, BURST = 60, 0.15, 60
NAMESPACE, QUEUE = "team-a", "default"
TARGET_P99_MS = 2000.0
JOBS_PATH = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}

ROUTE = {"receiver": "bench", "group_by": ["alertname", "namespace", "job_name"], "group_wait": 0,
         "group_interval": 0, "repeat_interval": "4h"}
RECEIVER_RATE_LIMIT = 100_000.0
DELIVERY = {"poll_interval_seconds": 1.0, "timeout_seconds": 5}  # the default poll: the worker wakes the notifier


def job_object(name: str) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "busybox",
                                         "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"schedulerName": "volcano", "queue": QUEUE, "minAvailable": 1, "maxRetry": 3,
                     "tasks": [{"name": "worker", "replicas": 1, "template": template}]},
            "status": {"state": {"phase": "Pending"}, "pending": 1}}


def failed_status() -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"state": {"phase": "Failed", "reason": "PodFailed", "message": "task worker failed",
                                 "lastTransitionTime": stamp},
                       "pending": 0, "failed": 1}}


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {}
    return {"p50": round(percentile(latencies, 0.5), 1), "p99": round(percentile(latencies, 0.99), 1),
            "max": round(max(latencies), 1)}


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/notify: timed out waiting for {what}")
        time.sleep(0.02)


def first_arrivals(inbox: ChatInbox) -> dict[str, float]:
    """Job name -> when the first message telling it fired arrived."""
    out: dict[str, float] = {}
    for message in inbox.messages("webhook"):
        for alert in message.body.get("alerts", []):
            if alert.get("kind") == "JobFailed" and alert.get("status") == "firing":
                out.setdefault(alert["job_name"], message.received_at)
    return out


def measure() -> dict[str, Any]:
    started = time.monotonic()
    spaced = [f"bench-spaced-{i:03d}" for i in range(SPACED)]
    burst = [f"bench-burst-{i:03d}" for i in range(BURST)]
    written: dict[str, float] = {}
    write_ms: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, ChatInbox() as inbox, \
            SimulatorThread(scenario="empty") as sim, httpx.Client(base_url=sim.url, timeout=10) as http:
        kubeconfig = Path(tmp) / "kubeconfig"
        write_kubeconfig(kubeconfig, sim.url)
        settings = load(None, environ={}, database_url=f"sqlite:///{tmp}/watchdog.db",
                        sources={"metrics_api": {"enabled": False}},
                        notifications={"receivers": [{"name": "bench", "rate_limit_per_minute": RECEIVER_RATE_LIMIT,
                                                      "webhook": {"url": f"{inbox.url}/webhook/bench"}}],
                                       "route": ROUTE, "delivery": DELIVERY})
        engine = make_engine(settings.database_url)
        watchdog = Watchdog(settings, engine, api_client(str(kubeconfig))).start()
        try:
            wait_until(watchdog.ready, 30, "the informers' first sync")
            for name in spaced + burst:
                http.post(JOBS_PATH, json=job_object(name)).raise_for_status()
            wait_until(lambda: watchdog.stats.events["jobs"] >= len(spaced) + len(burst) and watchdog.idle(), 30,
                       "the watchdog to see the pending jobs")

            def fail(name: str) -> None:
                before = time.time()
                http.patch(f"{JOBS_PATH}/{name}/status", content=json.dumps(failed_status()),
                           headers=MERGE_PATCH).raise_for_status()
                written[name] = before
                write_ms.append((time.time() - before) * 1000)

            next_at = time.monotonic()
            for name in spaced:
                time.sleep(max(0.0, next_at - time.monotonic()))
                fail(name)
                next_at += SPACING
            wait_until(lambda: spaced[-1] in first_arrivals(inbox), 30, "the last spaced job's message")
            for name in burst:
                fail(name)
            wait_until(lambda: len(first_arrivals(inbox)) >= len(written), 60, "every job's message")
        finally:
            watchdog.stop()
            engine.dispose()
        arrivals = first_arrivals(inbox)
        messages = len(inbox.messages("webhook"))
        outcomes = {f"{r}/{o}": n for (r, o), n in watchdog.notifier.stats.outcomes.items()}
    latency = {name: (arrivals[name] - written[name]) * 1000 for name in written if name in arrivals}
    everything = list(latency.values())
    overall = summary(everything)
    return {
        "failed_to_chat_ms_p50": overall["p50"], "failed_to_chat_ms_p99": overall["p99"],
        "failed_to_chat_ms_max": overall["max"], "jobs": len(everything),
        "spaced": {"jobs": SPACED, "one_every_ms": SPACING * 1000,
                   **summary([latency[n] for n in spaced if n in latency])},
        "burst": {"jobs": BURST, "back_to_back": True, **summary([latency[n] for n in burst if n in latency])},
        "api_status_write_ms_p99": round(percentile(write_ms, 0.99), 1),
        "messages": messages, "notifier_outcomes": outcomes,
        "target_p99_ms": TARGET_P99_MS, "meets_target": overall["p99"] <= TARGET_P99_MS,
        "config": {"database": "sqlite (temp file)", "route": ROUTE, "receiver": "webhook (ChatInbox, local)",
                   "receiver_rate_limit_per_minute": RECEIVER_RATE_LIMIT, "delivery": DELIVERY,
                   "worker_intervals": "defaults (watchdog.runtime.app.Intervals)", "simulator_scenario": "empty",
                   "latency_from": "just before the status PATCH is sent",
                   "latency_to": "the chat server's receive time"},
        "elapsed_seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    print(json.dumps(measure()))


if __name__ == "__main__":
    main()
