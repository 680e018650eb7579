"""Web UI benchmark: prints one JSON object on stdout, per page the p50 and p95 milliseconds of a full
request through the app (FastAPI TestClient: routing, queries, rendering), on SQLite and PostgreSQL.

    .venv/bin/python bench/ui.py [--jobs 10000 --runs 40]

The database holds --jobs ledger rows over 20 queues and 50 namespaces, an alert for every 4th job
(a quarter of them firing), 12 five-minute usage rollups per job for its 2 containers (the job page
charts them), a histogram per workload, 200 silences and 2,000 outbox messages. PostgreSQL: a database
created on $VOLCANO_BENCH_POSTGRES (default postgresql://postgres@127.0.0.1:5432/postgres), dropped after.
Target: p95 <= 200 ms on every page.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import (
    Alert,
    JobRun,
    NotificationDelivery,
    NotificationGroup,
    Silence,
    UsageRollup,
)
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health, QueueView

POSTGRES_ADMIN = os.environ.get("VOLCANO_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
TOKEN = "bench-token"


def seed(engine: Engine, jobs: int) -> None:
    runs, alerts, rollups = [], [], []
    for i in range(jobs):
        created = NOW - timedelta(minutes=i)
        ns, queue, workload = f"ns-{i % 50}", f"q{i % 20}", f"wl-{i % 500}"
        runs.append(dict(uid=f"uid-{i}", namespace=ns, name=f"{workload}-{i}", workload=workload, queue=queue,
                         phase=("Completed", "Failed", "Running")[i % 3], created_at=created,
                         started_at=created, finished_at=created + timedelta(minutes=50) if i % 3 != 2 else None,
                         requested_cpu_cores=8, requested_memory_bytes=32 * 2**30,
                         cpu_core_seconds_used=1000.0 * (i % 7),
                         cpu_core_seconds_requested=8000, memory_byte_seconds_used=2**40,
                         memory_byte_seconds_requested=2**42,
                         updated_at=created))
        if i % 4 == 0:
            state = "firing" if i % 16 == 0 else "resolved"
            alerts.append(dict(fingerprint=f"fp{i}", kind="JobFailed", severity="critical", state=state, namespace=ns,
                               queue=queue, job_name=f"{workload}-{i}", subject=f"{workload}-{i}-worker-0",
                               summary=f"job {i} failed", details={"exit_code": 1}, started_at=created,
                               fired_at=created,
                               resolved_at=None if state == "firing" else created + timedelta(hours=1),
                               last_seen_at=created, updated_at=created))
        for b in range(12):
            for container in ("main", "sidecar"):
                rollups.append(dict(bucket_start=created + timedelta(minutes=5 * b), bucket_seconds=300, namespace=ns,
                                    pod=f"{workload}-{i}-worker-0", container=container, job_uid=f"uid-{i}",
                                    workload=workload, task="worker", queue=queue, samples=10, cpu_cores_sum=40.0,
                                    cpu_cores_max=5, memory_bytes_sum=10 * 2**33, memory_bytes_max=2**33,
                                    cpu_request_cores=4, memory_request_bytes=2**34))
    book = HistogramBook(Settings().recommendations)
    for w in range(500):
        for s in range(50):
            book.add_usage(f"ns-{w % 50}", f"wl-{w}", "worker", "main", NOW.timestamp() - 600 * s, 2.0 + s % 3, 2**33)
    with Session(engine) as session, session.begin():
        for model, rows in ((JobRun, runs), (Alert, alerts), (UsageRollup, rollups)):
            for start in range(0, len(rows), 5000):
                session.execute(insert(model), rows[start:start + 5000])
        book.flush(session, NOW)
        session.execute(insert(Silence), [dict(matchers=[f'namespace="ns-{i}"'], starts_at=NOW,
                                               ends_at=NOW + timedelta(1), created_by="bench", comment="",
                                               created_at=NOW, updated_at=NOW)
                                          for i in range(200)])
        session.add(NotificationGroup(id=1, group_key="g", receiver="chat", route="0", labels={}, created_at=NOW,
                                      updated_at=NOW))
        session.flush()
        message = {"receiver": "chat", "group_key": "g", "status": "firing", "alerts": [
            {"kind": "JobFailed", "severity": "critical", "status": "firing", "summary": "failed"}]}
        session.execute(insert(NotificationDelivery), [dict(group_id=1, receiver="chat", state="sent", message=message,
                                                            attempts=1, next_attempt_at=NOW, created_at=NOW,
                                                            updated_at=NOW, last_error="") for _ in range(2000)])


def measure(engine: Engine, runs: int) -> dict[str, dict[str, float]]:
    settings = Settings(api_token=SecretStr(TOKEN))
    queues = [QueueView(f"q{i}", "root" if i else "", {"cpu": 100.0}, {"cpu": 50.0}, "Open", {"cpu": 80.0})
              for i in range(20)]
    client = TestClient(create_app(engine, settings, Health(ready=lambda: True, collectors=dict), clock=lambda: NOW,
                                   queues=lambda: queues))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    pages = {"queues": "/", "fleet": "/ui/fleet", "jobs": "/ui/jobs", "jobs_filtered": "/ui/jobs?queue=q3&phase=Failed",
             "jobs_deep_page": "/ui/jobs?offset=9000", "job": "/ui/jobs/uid-4321",
             "alerts_firing": "/ui/alerts?state=firing",
             "alerts_all_deep": "/ui/alerts?offset=2000", "alert": "/ui/alerts/5", "silences": "/ui/silences",
             "notifications": "/ui/notifications", "capability": "/ui/queues/q1"}
    out = {}
    for name, path in pages.items():
        get: Callable[[], Any] = lambda p=path: client.get(p, headers=auth)  # noqa: E731
        assert get().status_code == 200, (name, get().status_code)  # warm-up
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            get()
            times.append((time.perf_counter() - start) * 1000)
        times.sort()
        p95 = times[int(0.95 * (len(times) - 1))]
        out[name] = {"p50_ms": round(statistics.median(times), 1), "p95_ms": round(p95, 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    import tempfile

    result: dict[str, Any] = {"jobs": args.jobs}
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/ui.db")
        migrate(engine)
        seed(engine, args.jobs)
        result["sqlite"] = measure(engine, args.runs)
        engine.dispose()
    name = f"vm_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        engine = make_engine(f"postgresql+psycopg://{POSTGRES_ADMIN.rsplit('/', 1)[0].split('://', 1)[1]}/{name}")
        migrate(engine)
        seed(engine, args.jobs)
        result["postgresql"] = measure(engine, args.runs)
        engine.dispose()
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    result["worst_p95_ms"] = max(v["p95_ms"] for db in ("sqlite", "postgresql") for v in result[db].values())
    result["target_p95_ms"] = 200
    print(json.dumps(result))


if __name__ == "__main__":
    main()
