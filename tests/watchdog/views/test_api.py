"""The HTTP API over rows inserted by hand, on SQLite and PostgreSQL: filters, pagination, efficiency,
the bearer-token rule for every non-GET route, readiness, OpenAPI, and one real uvicorn server."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.recommendations import book as recommend
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import Alert, JobRun, UsageRollup
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.guard import check_writes_guarded, route_table
from volcano_monitor.watchdog.views.health import CollectorHealth, Health, QueueView

NOW = datetime(2024, 5, 1, 12, 2, tzinfo=UTC)
TOKEN = "t0ken-Sekret-4242"


def make_alert(i: int, *, kind: str = "JobFailed", severity: str = "critical", state: str = "firing",
               namespace: str = "team-a", queue: str = "q1", minutes_ago: float = 0) -> Alert:
    started = NOW - timedelta(minutes=minutes_ago)
    return Alert(fingerprint=f"fp{i}", kind=kind, severity=severity, state=state, namespace=namespace, queue=queue,
                 job_name=f"job{i}", subject=f"job{i}", summary=f"summary {i}", details={"i": i, "ü": "ß"},
                 started_at=started, fired_at=None if state == "pending" else started,
                 resolved_at=started + timedelta(minutes=1) if state == "resolved" else None,
                 last_seen_at=started, updated_at=started)


def make_run(uid: str, name: str, *, namespace: str = "team-a", queue: str = "q1", phase: str = "Completed",
             created: timedelta | None = None, finished: timedelta | None = None,
             cpu: tuple[float, float] = (0, 0), memory: tuple[float, float] = (0, 0),
             gpu: tuple[float, float] = (0, 0)) -> JobRun:
    """cpu/memory/gpu are (used, requested) resource-seconds; created/finished are ages before NOW."""
    return JobRun(uid=uid, namespace=namespace, name=name, workload=name, queue=queue, phase=phase,
                  created_at=None if created is None else NOW - created,
                  finished_at=None if finished is None else NOW - finished,
                  cpu_core_seconds_used=cpu[0], cpu_core_seconds_requested=cpu[1],
                  memory_byte_seconds_used=memory[0], memory_byte_seconds_requested=memory[1],
                  gpu_seconds_used=gpu[0], gpu_seconds_requested=gpu[1], updated_at=NOW)


def insert(engine: Engine, *rows: Any) -> None:
    with Session(engine) as session, session.begin():
        session.add_all(rows)


def health(ready: bool = True) -> Health:
    return Health(ready=lambda: ready, collectors=dict)


def client_for(engine: Engine, token: str | None = TOKEN, ready: bool = True,
               queues: list[QueueView] | None = None) -> TestClient:
    """The API with a watchdog worker behind it (no cluster): requests stored by the API are carried
    out by the worker's own path, as on the leader."""
    settings = Settings(api_token=SecretStr(token) if token is not None else None)
    worker = Watchdog(settings, engine, api=None, clock=NOW.timestamp)
    app = create_app(engine, settings, health(ready), clock=lambda: NOW, queues=lambda: list(queues or []),
                     request_made=lambda: worker.apply([], ["requests"]))
    return TestClient(app)


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    insert(engine,
           make_alert(1, minutes_ago=50),
           make_alert(2, kind="PodOOMKilled", severity="warning", minutes_ago=40),
           make_alert(3, kind="JobIdle", severity="warning", state="pending", namespace="team-b", queue="q2",
                      minutes_ago=30),
           make_alert(4, state="resolved", namespace="team-b", queue="q2", minutes_ago=20),
           make_alert(5, kind="QueueStarved", severity="warning", namespace="", queue="q2", minutes_ago=10),
           make_run("r1", "train-a1", created=timedelta(hours=3), finished=timedelta(hours=1),
                    cpu=(3600, 7200), memory=(1e9, 4e9)),
           make_run("r2", "train-a2", phase="Failed", created=timedelta(hours=31), finished=timedelta(hours=30),
                    cpu=(100, 400), gpu=(1800, 3600)),
           make_run("r3", "etl", namespace="team-b", queue="q2", phase="Running", created=timedelta(minutes=10),
                    cpu=(10, 20)),
           make_run("r4", "etl-old", namespace="team-b", queue="q2", created=timedelta(hours=5),
                    finished=timedelta(hours=2)))
    return engine


def fingerprints(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["fingerprint"] for item in response.json()["items"]]


def test_alerts_filters_order_and_pagination(seeded: Engine) -> None:
    client = client_for(seeded)
    everything = client.get("/api/v1/alerts")
    assert fingerprints(everything) == ["fp5", "fp4", "fp3", "fp2", "fp1"]
    assert everything.json()["total"] == 5 and everything.json()["limit"] == 100
    assert fingerprints(client.get("/api/v1/alerts?state=firing")) == ["fp5", "fp2", "fp1"]
    assert fingerprints(client.get("/api/v1/alerts?kind=JobFailed&namespace=team-b")) == ["fp4"]
    assert fingerprints(client.get("/api/v1/alerts", params={"queue": "q2", "severity": "warning"})) == ["fp5", "fp3"]
    page = client.get("/api/v1/alerts?limit=2&offset=1")
    assert fingerprints(page) == ["fp4", "fp3"] and page.json()["total"] == 5
    assert fingerprints(client.get("/api/v1/alerts?offset=50")) == []
    assert client.get("/api/v1/alerts?state=bogus").status_code == 422
    first = client.get("/api/v1/alerts?kind=JobIdle").json()["items"][0]
    one = client.get(f"/api/v1/alerts/{first['id']}").json()
    assert one["details"] == {"i": 3, "ü": "ß"} and one["state"] == "pending" and one["fired_at"] is None
    assert datetime.fromisoformat(one["started_at"]) == NOW - timedelta(minutes=30)
    assert client.get("/api/v1/alerts/999999").status_code == 404
    assert client.get("/api/v1/alerts/0").status_code == 422
    assert client.get("/api/v1/alerts/99999999999999999999").status_code == 422


def uids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["uid"] for item in response.json()["items"]]


def test_jobs_filters_pagination_and_efficiency(seeded: Engine) -> None:
    client = client_for(seeded)
    everything = client.get("/api/v1/jobs")
    assert uids(everything) == ["r3", "r1", "r4", "r2"] and everything.json()["total"] == 4
    assert uids(client.get("/api/v1/jobs?namespace=team-a")) == ["r1", "r2"]
    assert uids(client.get("/api/v1/jobs?queue=q2&phase=Running")) == ["r3"]
    assert uids(client.get("/api/v1/jobs?name=train-a1")) == ["r1"]
    after = (NOW - timedelta(hours=3)).isoformat()
    before = (NOW - timedelta(minutes=90)).isoformat()
    assert uids(client.get("/api/v1/jobs", params={"finished_after": after})) == ["r1", "r4"]
    assert uids(client.get("/api/v1/jobs", params={"finished_before": before})) == ["r4", "r2"]
    assert uids(client.get("/api/v1/jobs", params={"finished_after": after, "finished_before": before})) == ["r4"]
    naive = (NOW - timedelta(hours=3)).replace(tzinfo=None).isoformat()  # taken as UTC
    assert uids(client.get("/api/v1/jobs", params={"finished_after": naive})) == ["r1", "r4"]
    page = client.get("/api/v1/jobs?limit=1&offset=1")
    assert uids(page) == ["r1"] and page.json()["total"] == 4 and page.json()["offset"] == 1

    r1 = client.get("/api/v1/jobs/r1").json()
    assert r1["efficiency"] == {"cpu": 0.5, "memory": 0.25, "gpu": None}
    assert r1["cpu_core_seconds_used"] == 3600 and r1["phase"] == "Completed"
    assert client.get("/api/v1/jobs/r2").json()["efficiency"] == {"cpu": 0.25, "memory": None, "gpu": 0.5}
    assert client.get("/api/v1/jobs/r3").json()["finished_at"] is None
    assert client.get("/api/v1/jobs/nope").status_code == 404


def test_bad_query_parameters_are_422(seeded: Engine) -> None:
    client = client_for(seeded)
    for query in ("limit=0", "limit=1001", "offset=-1", "limit=abc", "namespace=%00", "namespace=" + "x" * 300,
                  "finished_after=yesterday", "finished_after=9999-12-31T23:59:59-01:00",
                  "finished_before=0001-01-01T00:00:00%2B01:00",  # past the calendar in UTC: were 503s
                  "finished_after=2024", "finished_before=0.0"):  # were Unix seconds: 1970-01-01T00:33:44Z
        response = client.get(f"/api/v1/jobs?{query}")
        assert response.status_code == 422, (query, response.text)
        assert response.json()["detail"][0]["loc"] == ["query", query.split("=")[0]], (query, response.text)
    assert client.get("/api/v1/jobs?limit=1").json()["total"] == 4


def test_odd_but_valid_parameters(seeded: Engine) -> None:
    client = client_for(seeded)
    assert client.get("/api/v1/jobs?limit=1000").json()["total"] == 4
    unicode = client.get("/api/v1/jobs", params={"namespace": "ü名\"'; DROP TABLE job_runs"})
    assert unicode.status_code == 200 and unicode.json()["total"] == 0
    assert client.get("/api/v1/alerts?offset=1000000000").json()["items"] == []
    assert client.get("/api/v1/jobs?finished_after=9999-12-31T23:59:59Z").json()["total"] == 0
    assert client.get("/api/v1/jobs?finished_before=0001-01-01T00:00:00-01:00").json()["total"] == 0
    assert client.get("/api/v1/jobs").json()["total"] == 4


def resolve(client: TestClient, alert_id: int, authorization: str | bytes | None = None) -> httpx.Response:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response: httpx.Response = client.post(f"/api/v1/alerts/{alert_id}/resolve", headers=headers)
    return response


def firing_id(engine: Engine) -> int:
    with Session(engine) as session:
        alert_id: int = session.scalars(select(Alert.id).where(Alert.fingerprint == "fp1")).one()
        return alert_id


def test_writes_refused_when_no_token_is_configured(seeded: Engine) -> None:
    client = client_for(seeded, token=None)
    for authorization in (None, f"Bearer {TOKEN}", "Bearer "):
        response = resolve(client, firing_id(seeded), authorization)
        assert response.status_code == 403 and response.json() == {"detail": "no api_token configured"}
    assert client_for(seeded, token="").post(f"/api/v1/alerts/{firing_id(seeded)}/resolve").status_code == 403
    assert client.get("/api/v1/alerts?state=firing").json()["total"] == 3  # reads need no token


def test_bearer_token_guards_resolve(seeded: Engine, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = client_for(seeded)
    alert_id = firing_id(seeded)
    responses = []
    for authorization in (None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer", b"Bearer \xc3\xbc\xff"):
        response = resolve(client, alert_id, authorization)
        assert response.status_code == 401, (authorization, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        responses.append(response)
    assert resolve(client, 999999, "Bearer wrong").status_code == 401  # authentication comes first
    assert client.get(f"/api/v1/alerts/{alert_id}").json()["state"] == "firing"

    ok = resolve(client, alert_id, f"Bearer {TOKEN}")
    assert ok.status_code == 200, ok.text
    assert ok.json()["state"] == "resolved" and datetime.fromisoformat(ok.json()["resolved_at"]) == NOW
    with Session(seeded) as session:
        stored = session.get(Alert, alert_id)
        assert stored is not None and stored.state == "resolved" and stored.resolved_at == NOW
    again = resolve(client, alert_id, f"bearer {TOKEN}")  # the scheme is case-insensitive
    assert again.status_code == 409 and again.json() == {"detail": "alert is already resolved"}
    missing = resolve(client, 999999, f"Bearer {TOKEN}")
    assert missing.status_code == 404
    responses += [ok, again, missing]
    for response in responses:
        assert TOKEN not in response.text and TOKEN not in str(response.headers)
    assert caplog.records, "expected the request log to be captured"
    assert TOKEN not in caplog.text


def guarded_app(engine: Engine) -> tuple[FastAPI, Any]:
    app = client_for(engine).app
    assert isinstance(app, FastAPI)
    writes = [r for r in route_table(app) if r.methods - {"GET", "HEAD"}]
    assert sorted(r.path for r in writes) == [
        "/api/v1/alertmanager", "/api/v1/alerts/{alert_id}/resolve", "/api/v1/notifications/{delivery_id}/retry",
        "/api/v1/silences", "/api/v1/silences/{silence_id}", "/ui/alerts/{alert_id}/resolve", "/ui/silences"]
    guard = next(call for call in writes[0].dependencies if getattr(call, "__name__", "") == "require_token")
    assert all(guard in r.dependencies for r in writes)
    check_writes_guarded(app, guard)
    return app, guard


def test_every_non_get_route_is_guarded(seeded: Engine) -> None:
    app, guard = guarded_app(seeded)
    router = APIRouter()

    @router.put("/api/v1/silences")
    def unguarded_in_router() -> None: ...

    app.include_router(router)
    with pytest.raises(RuntimeError, match=r"\['PUT'\] /api/v1/silences must be on the token-guarded router"):
        check_writes_guarded(app, guard)

    direct, guard = guarded_app(seeded)

    @direct.delete("/api/v1/alerts/{alert_id}")
    def unguarded(alert_id: int) -> None: ...

    with pytest.raises(RuntimeError, match="DELETE"):
        check_writes_guarded(direct, guard)


def test_health_and_readiness(engine: Engine) -> None:
    ready = [False]
    app = create_app(engine, Settings(), Health(ready=lambda: ready[0], collectors=dict), clock=lambda: NOW)
    client = TestClient(app)
    assert client.get("/healthz").json() == {"status": "ok"}
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503 and not_ready.json() == {"status": "not ready"}
    ready[0] = True
    assert client.get("/readyz").status_code == 200 and client.get("/readyz").json() == {"status": "ready"}

    def broken() -> bool:
        raise RuntimeError("informer gone")

    failing = TestClient(create_app(engine, Settings(), Health(ready=broken, collectors=dict), clock=lambda: NOW))
    assert failing.get("/readyz").status_code == 503 and failing.get("/healthz").status_code == 200


def test_openapi_documents_every_route(engine: Engine) -> None:
    client = client_for(engine)
    spec = client.get("/openapi.json").json()
    expected = {"/healthz", "/readyz", "/metrics", "/api/v1/alerts", "/api/v1/alerts/{alert_id}",
                "/api/v1/alerts/{alert_id}/resolve", "/api/v1/jobs", "/api/v1/jobs/{uid}",
                "/api/v1/recommendations", "/api/v1/queues", "/api/v1/alertmanager", "/api/v1/silences",
                "/api/v1/silences/{silence_id}", "/api/v1/notifications", "/api/v1/notifications/{delivery_id}/retry",
                "/api/v1/receivers", "/api/v1/reports"}
    assert isinstance(client.app, FastAPI)
    routes = {r.path for r in route_table(client.app)} - {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
    ui = {"/", "/ui/fleet", "/ui/queues", "/ui/queues/{name}", "/ui/jobs", "/ui/jobs/{uid}", "/ui/alerts",
          "/ui/alerts/{alert_id}", "/ui/alerts/{alert_id}/resolve", "/ui/silences",
          "/ui/notifications"}  # HTML pages: not in the OpenAPI
    assert routes == expected | ui and set(spec["paths"]) == expected
    resolve_op = spec["paths"]["/api/v1/alerts/{alert_id}/resolve"]["post"]
    assert resolve_op["security"] == [{"HTTPBearer": []}]
    assert {"401", "403", "404", "409"} <= set(resolve_op["responses"])
    assert "security" not in spec["paths"]["/api/v1/jobs"]["get"]
    assert {"AlertPage", "JobPage", "JobOut", "Efficiency", "RecommendationOut", "QueueOut"} <= set(
        spec["components"]["schemas"])
    jobs_params = {p["name"] for p in spec["paths"]["/api/v1/jobs"]["get"]["parameters"]}
    assert {"namespace", "queue", "phase", "name", "finished_after", "finished_before", "limit",
            "offset"} <= jobs_params
    assert client.get("/docs").status_code == 200 and "swagger" in client.get("/docs").text.lower()


def rec(namespace: str, workload: str, cpu: float) -> recommend.Recommendation:
    return recommend.Recommendation(namespace, workload, "worker", "main", cpu, cpu / 2, cpu * 2, 2**30, 2**29, 2**31,
                                    0.75, 1234, NOW - timedelta(days=2), NOW, False)


def test_recommendations(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    client = client_for(engine)
    assert client.get("/api/v1/recommendations").json() == []  # the real computation, over no history
    calls: list[tuple[str | None, datetime]] = []

    def fake(session: Session, settings: Any, now: datetime, namespace: str | None = None) -> list[Any]:
        calls.append((namespace, now))
        return [rec("team-a", "train", 1.5)]

    monkeypatch.setattr(recommend, "compute_recommendations", fake)
    got = client.get("/api/v1/recommendations?namespace=team-a").json()
    assert calls == [("team-a", NOW)]
    assert got == [{"namespace": "team-a", "workload": "train", "task": "worker", "container": "main",
                    "cpu_target_cores": 1.5, "cpu_lower_cores": 0.75, "cpu_upper_cores": 3.0,
                    "memory_target_bytes": 2**30, "memory_lower_bytes": 2**29, "memory_upper_bytes": 2**31,
                    "confidence": 0.75, "samples": 1234, "first_sample_at": (NOW - timedelta(days=2)).isoformat(
                    ).replace("+00:00", "Z"), "last_sample_at": NOW.isoformat().replace("+00:00", "Z"),
                    "oom_bumped": False,  # the fields above are the first version's; those below were added
                    "status": "ok", "message": "", "cpu_limit_cores": None, "memory_limit_bytes": None,
                    "capped_by": {}, "current_requests": None, "current_limits": None, "queue": "", "notes": [],
                    "gpu_requests": {}, "cluster": "default"}]


def test_recommendations_below_min_confidence_say_why(engine: Engine) -> None:
    """The real computation over an hour of history: the numbers (limit at the container's ratio, never
    the upper bound) with status not_enough_history and the reason; min_confidence 0 lets it through."""
    book = recommend.HistogramBook(Settings().recommendations)
    book.note_spec("ml", "train", "worker", "main", recommend.ContainerSpec("q", {"memory": 2**30}, {"memory": 2**31}))
    for minute in range(60):
        book.add_usage("ml", "train", "worker", "main", NOW.timestamp() - 60 * minute, 1.0, 2**30)
    with Session(engine) as session, session.begin():
        book.flush(session, NOW)
    (got,) = client_for(engine).get("/api/v1/recommendations").json()
    assert got["status"] == "not_enough_history" and got["message"] == "not enough history (60 samples over 59m)"
    assert got["memory_limit_bytes"] == pytest.approx(2 * got["memory_target_bytes"], abs=1)
    assert got["memory_upper_bytes"] > 10 * got["memory_target_bytes"] and got["capped_by"] == {}
    settings = Settings(api_token=SecretStr(TOKEN), recommendations={"min_confidence": 0})
    app = create_app(engine, settings, health(), clock=lambda: NOW)
    assert TestClient(app).get("/api/v1/recommendations").json()[0]["status"] == "ok"


def rollup(start: str, queue: str, pod: str, samples: int, cpu_sum: float, memory_sum: float = 0.0,
           gpu_samples: int = 0, gpu_util_sum: float = 0.0, gpu_request: float = 0.0) -> UsageRollup:
    return UsageRollup(bucket_start=datetime.fromisoformat(f"2024-05-01T{start}:00+00:00"), bucket_seconds=300,
                       namespace="ns", pod=pod, container="main", queue=queue, samples=samples, cpu_cores_sum=cpu_sum,
                       memory_bytes_sum=memory_sum, gpu_samples=gpu_samples, gpu_util_sum=gpu_util_sum,
                       gpu_request=gpu_request)


def test_queues_usage_against_capability(engine: Engine) -> None:
    views = [QueueView("q1", "root", {"cpu": 3.0, "memory": 3e9, "nvidia.com/gpu": 4}, {"cpu": 2.0}, "Open"),
             QueueView("q2", "root", {}, {}, "Open"), QueueView("q3", "q1", {"cpu": 1.0}, {}, "Closed")]
    empty = client_for(engine, queues=views).get("/api/v1/queues").json()
    assert [q["usage"]["bucket_start"] for q in empty] == [None, None, None]
    insert(engine,
           rollup("11:50", "q1", "pod-a", 10, 10.0),  # older complete bucket: not "now"
           rollup("11:55", "q1", "pod-a", 5, 5.0, 5e9, gpu_samples=5, gpu_util_sum=250, gpu_request=2),
           rollup("11:55", "q1", "pod-b", 4, 2.0, 2e9),
           rollup("11:55", "q2", "pod-c", 2, 0.2, 1e8),
           rollup("11:55", "q-gone", "pod-d", 1, 0.3),
           rollup("11:55", "", "pod-e", 1, 9.0),  # unattributed
           rollup("12:00", "q1", "pod-a", 1, 100.0))  # the bucket still filling at 12:02
    got = {q["name"]: q for q in client_for(engine, queues=views).get("/api/v1/queues").json()}
    assert list(got) == ["q-gone", "q1", "q2", "q3"]
    q1 = got["q1"]
    assert q1["usage"]["containers"] == 2 and q1["usage"]["cpu_cores"] == pytest.approx(1.5)
    assert q1["usage"]["memory_bytes"] == pytest.approx(1.5e9) and q1["usage"]["gpu_util_percent"] == pytest.approx(50)
    assert q1["usage"]["gpus_busy"] == pytest.approx(1.0) and q1["usage"]["bucket_seconds"] == 300
    assert datetime.fromisoformat(q1["usage"]["bucket_start"]) == datetime(2024, 5, 1, 11, 55, tzinfo=UTC)
    assert q1["cpu_used_of_capability"] == pytest.approx(0.5) and q1["memory_used_of_capability"] == pytest.approx(0.5)
    assert q1["capability"]["nvidia.com/gpu"] == 4 and q1["allocated"] == {"cpu": 2.0} and q1["parent"] == "root"
    assert got["q2"]["usage"]["cpu_cores"] == pytest.approx(0.1) and got["q2"]["cpu_used_of_capability"] is None
    assert got["q2"]["usage"]["gpu_util_percent"] is None
    assert got["q3"]["usage"]["containers"] == 0 and got["q3"]["usage"]["cpu_cores"] == 0
    assert got["q3"]["usage"]["bucket_start"] == q1["usage"]["bucket_start"] and got["q3"]["state"] == "Closed"
    assert got["q-gone"]["state"] == "Unknown" and got["q-gone"]["usage"]["cpu_cores"] == pytest.approx(0.3)


@pytest.mark.parametrize("url", ["sqlite", "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"])
def test_database_errors_are_503_without_details(tmp_path: Path, url: str) -> None:
    broken = make_engine(f"sqlite:///{tmp_path / 'empty.db'}" if url == "sqlite" else url)  # no schema / no server
    client = TestClient(create_app(broken, Settings(api_token=SecretStr(TOKEN)), health(), clock=lambda: NOW))
    for path in ("/api/v1/alerts", "/api/v1/jobs", "/api/v1/queues"):
        response = client.get(path)
        assert response.status_code == 503 and response.json() == {"detail": "database unavailable"}
    assert resolve(client, 1, f"Bearer {TOKEN}").status_code == 503
    assert client.get("/healthz").status_code == 200
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and "volcano_watchdog_database_up 0" in metrics.text
    broken.dispose()


@pytest.fixture
def served(engine: Engine) -> Iterator[str]:
    app = create_app(engine, Settings(), Health(ready=lambda: True, collectors=lambda: {
        "metrics_api": CollectorHealth(True, NOW.timestamp(), 0, 1)}), clock=lambda: NOW)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    assert not thread.is_alive()


def test_real_uvicorn_server(served: str, engine: Engine) -> None:
    insert(engine, make_alert(1))
    with httpx.Client(base_url=served, timeout=5) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/api/v1/alerts").json()["total"] == 1
        metrics = http.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert 'volcano_watchdog_collector_up{collector="metrics_api"} 1' in metrics.text


def test_people_data_needs_a_token_and_the_rest_is_public(seeded: Engine) -> None:
    """The outbox's messages (owners' phone numbers and e-mails in mentions) and silences (their authors)
    need the read token or the write token; alerts, jobs, queues, receivers and health stay public."""
    read_token = "re4d-only-t0ken"
    settings = Settings(api_token=SecretStr(TOKEN), api_read_token=SecretStr(read_token))
    client = TestClient(create_app(seeded, settings, health(), clock=lambda: NOW))
    for path in ("/api/v1/notifications", "/api/v1/silences"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
        assert client.get(path, headers={"Authorization": f"Bearer {read_token}"}).status_code == 200, path
        assert client.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200, path
    for path in ("/api/v1/alerts", "/api/v1/jobs", "/api/v1/queues", "/api/v1/receivers", "/healthz", "/metrics"):
        assert client.get(path).status_code == 200, path
    # The read token opens no write.
    assert resolve(client, firing_id(seeded), f"Bearer {read_token}").status_code == 401
    # Without any token configured the people's data is refused, not served.
    closed = TestClient(create_app(seeded, Settings(), health(), clock=lambda: NOW))
    assert closed.get("/api/v1/notifications").status_code == 403
    assert closed.get("/api/v1/alerts").status_code == 200


def test_the_documented_silence_works_as_curl_sends_it(engine: Engine) -> None:
    """docs/notifications.md's example, with what `curl -d` declares when not told (form-urlencoded) and
    with no content type at all: JSON either way (it was a 422)."""
    docs = (Path(__file__).resolve().parents[3] / "docs" / "notifications.md").read_text()
    body = re.search(r"silences -d '(\{.*?\})'", docs, re.S)
    assert body is not None, "the silence example is gone from docs/notifications.md"
    payload = json.loads(body.group(1))
    payload["ends_at"] = (NOW + timedelta(hours=2)).isoformat()
    client = client_for(engine)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for declared in ({"Content-Type": "application/x-www-form-urlencoded"}, {}):
        created = client.post("/api/v1/silences", content=json.dumps(payload), headers={**auth, **declared})
        assert created.status_code in (200, 201), created.text
    listed = client.get("/api/v1/silences?active=true", headers=auth).json()
    assert len(listed) == 2 and listed[0]["created_by"] == "alice"
    garbage = client.post("/api/v1/silences", content=b"matchers=x", headers=auth)
    assert garbage.status_code == 422  # still refused, now as JSON that does not decode


def test_silence_times_are_times_within_the_calendar(engine: Engine) -> None:
    """A time whose UTC is past year 9999 overflowed when stored (503 "database unavailable"); a number was
    read as Unix seconds (2100: 1970-01-01T00:35:00Z). Both are 422s now; a time zone other than UTC is
    kept as the same instant."""
    client = client_for(engine)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for times in ({"ends_at": "9999-12-31T23:59:59-01:00"}, {"ends_at": "2100-01-01T00:00:00Z",
                                                             "starts_at": "0001-01-01T00:00:00+01:00"},
                  {"ends_at": 4102444800}, {"ends_at": "2100-01-01T00:00:00Z", "starts_at": 0}):
        refused = client.post("/api/v1/silences", json={"matchers": ['queue="q1"'], **times}, headers=auth)
        assert refused.status_code == 422, (times, refused.text)
    created = client.post("/api/v1/silences", json={"matchers": ['queue="q1"'], "ends_at": "2100-01-01T02:00:00+02:00"},
                          headers=auth)
    assert created.status_code == 201 and created.json()["ends_at"] == "2100-01-01T00:00:00Z", created.text
    assert [s["id"] for s in client.get("/api/v1/silences", headers=auth).json()] == [created.json()["id"]]
