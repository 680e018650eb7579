"""The web UI over rows inserted by hand (SQLite and PostgreSQL), through FastAPI's TestClient: every
page renders, user-controlled text is escaped, filters and pagination, and the token rules of the
forms (write token) and of the pages with people's data (read token, HTTP Basic or Bearer)."""

from __future__ import annotations

import base64
import html
import re
from datetime import timedelta

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.watchdog.views.test_api import NOW, TOKEN, health, insert, make_alert, make_run
from volcano_monitor.core.matchers import parse_matcher
from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.recommendations.book import ContainerSpec, HistogramBook
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.models import (
    Alert,
    CapabilityChange,
    CapabilityPlan,
    NotificationDelivery,
    NotificationGroup,
    Silence,
    UsageRollup,
)
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import QueueView

READ = "read-only-T0ken"
EVIL = '<script>alert("x")</script>'


def ui(engine: Engine, queues: list[QueueView] | None = None) -> TestClient:
    settings = Settings(api_token=SecretStr(TOKEN), api_read_token=SecretStr(READ))
    worker = Watchdog(settings, engine, api=None, clock=NOW.timestamp)
    app = create_app(engine, settings, health(), clock=lambda: NOW, queues=lambda: list(queues or []),
                     request_made=lambda: worker.apply([], ["requests"]), request_wait_seconds=2)
    return TestClient(app)


def basic(token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"me:{token}".encode()).decode()}


def test_user_text_is_escaped_on_every_page(engine: Engine) -> None:
    run = make_run("uid-1", EVIL, namespace="ns\"'<b>", queue=EVIL, cpu=(5, 10))
    alert = make_alert(1, namespace="ns\"'<b>", queue=EVIL)
    alert.job_name, alert.summary, alert.details = EVIL, EVIL, {EVIL: EVIL}
    insert(engine, NotificationGroup(id=1, group_key="g", receiver="r", route="0", labels={}, created_at=NOW,
                                     updated_at=NOW))
    insert(engine, run, alert, Silence(matchers=[f'job_name="{EVIL}"'], starts_at=NOW, ends_at=NOW + timedelta(1),
                                       created_by=EVIL, comment=EVIL, created_at=NOW, updated_at=NOW),
           NotificationDelivery(group_id=1, receiver="r", state="dead", attempts=1, next_attempt_at=NOW,
                                created_at=NOW, updated_at=NOW, last_error=EVIL,
                                message={"receiver": "r", "group_key": "g", "status": "firing", "alerts": [
                                    {"kind": EVIL, "severity": "critical", "status": "firing", "summary": EVIL}]}))
    client = ui(engine, [QueueView(EVIL, "", {"cpu": 4}, {}, "Open")])
    alert_id = 1
    with Session(engine) as session:
        alert_id = session.scalars(select(Alert.id)).one()
    for path in ("/", "/ui/jobs", "/ui/jobs/uid-1", "/ui/alerts", f"/ui/alerts/{alert_id}", "/ui/silences",
                 "/ui/notifications", "/ui/queues/x"):
        response = client.get(path, headers=basic(READ))
        assert response.status_code in (200, 404), (path, response.status_code)
        assert response.headers["content-type"].startswith("text/html")
        assert "<script" not in response.text, path
        assert "&lt;script&gt;" in response.text or path in ("/ui/queues/x",), path


def test_jobs_filter_paginate_and_show_efficiency(engine: Engine) -> None:
    insert(engine, *[make_run(f"u{i}", f"job{i}", queue="a" if i % 2 else "b", created=timedelta(minutes=i),
                              cpu=(i, 100)) for i in range(120)])
    client = ui(engine)
    first = client.get("/ui/jobs", params={"queue": "a"}).text
    assert "1&ndash;50 of 60" in first and "job1<" in first and "job0<" not in first
    assert 'href="/ui/jobs?queue=a&amp;offset=50"' in first
    last = client.get("/ui/jobs", params={"queue": "a", "offset": 50}).text
    assert "51&ndash;60 of 60" in last and "job119<" in last and "older" not in last
    assert "1% <span" in first  # job1 used 1 of 100 core-seconds
    one = client.get("/ui/jobs", params={"workload": "job7"}).text
    assert "1&ndash;1 of 1" in one and 'value="job7"' in one


def job_with_history(engine: Engine, uid: str, workload: str, minutes: int, gpus: float = 0,
                     queue_memory: float | None = None) -> None:
    """A run of `workload` with 30 minutes of rollups (GPU utilisation too when it requests GPUs) and
    `minutes` of one-a-minute history in the histograms, fed by the worker's own code, with the
    container's spec as a pod of it shows: request 2 cores / 4Gi, memory limit 8Gi, no CPU limit."""
    run = make_run(uid, f"{workload}-7", namespace="ml")
    run.workload, run.requested_gpus = workload, gpus
    rollups = [UsageRollup(bucket_start=NOW - timedelta(minutes=5 * i), bucket_seconds=300, namespace="ml",
                           pod=f"{workload}-7-worker-0", container="main", job_uid=uid, workload=workload,
                           task="worker", queue="q1", samples=10, cpu_cores_sum=10.0 * i, cpu_request_cores=8,
                           memory_bytes_sum=10 * 2**30, memory_request_bytes=16 * 2**30, gpu_request=gpus,
                           gpu_samples=10 if gpus else 0, gpu_util_sum=10 * 40.0 + i if gpus else 0.0)
               for i in range(6)]
    alert = make_alert(3 + len(uid), namespace="ml")
    alert.job_name = run.name
    insert(engine, run, alert, *rollups)
    book = HistogramBook(Settings().recommendations)  # a histogram by the worker's own code
    capability = {"memory": queue_memory} if queue_memory else {}
    book.note_spec("ml", workload, "worker", "main", ContainerSpec("q1", {"cpu": 2.0, "memory": 4 * 2**30},
                                                                  {"memory": 8 * 2**30}, capability))
    for i in range(minutes):
        book.add_usage("ml", workload, "worker", "main", NOW.timestamp() - 60 * i, 1.5, 3 * 2**30)
    with Session(engine) as session, session.begin():
        book.flush(session, NOW)


def test_job_page_with_little_history_shows_no_patch(engine: Engine) -> None:
    """Three hours of history: the range and "not enough history", no YAML, no limit (the upper bound
    would have been one); the queue's capability caps memory, and the page says so; a GPU job charts
    its GPU utilisation beside CPU and memory."""
    job_with_history(engine, "uid-9", "train", minutes=200, gpus=2, queue_memory=3.2 * 2**30)
    page = ui(engine).get("/ui/jobs/uid-9").text
    assert page.count("<polyline") == 6 and 'aria-label="GPU utilisation"' in page
    assert "/ui/alerts/" in page and "JobFailed" in page
    assert "not enough history (200 samples over 3h 19m)" in page and 'id="no-patch"' in page
    assert "<pre" not in page and "limits" not in page
    assert "2000m / -" in page and "4Gi / 8Gi" in page  # what the container asks for now
    assert "<td>memory: queue_capability</td>" in page and "&ndash;3.2Gi" in page  # the range held too
    assert ui(engine).get("/ui/jobs/nope").status_code == 404


def test_job_page_with_a_week_of_history_shows_a_patch_keeping_the_ratio(engine: Engine) -> None:
    job_with_history(engine, "uid-8", "etl", minutes=8 * 1440)
    page = html.unescape(ui(engine).get("/ui/jobs/uid-8").text)
    assert page.count("<polyline") == 4 and "GPU utilisation" not in page  # no GPUs requested: no GPU chart
    assert "not enough history" not in page
    patch = re.search(r'<pre id="patch">(.*?)</pre>', page, re.S)
    assert patch is not None
    resources = yaml.safe_load(patch.group(1))["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    request, limit = parse_quantity(resources["requests"]["memory"]), parse_quantity(resources["limits"]["memory"])
    assert limit / request == pytest.approx(2.0, rel=0.01) and "cpu" not in resources["limits"]
    assert 3 * 2**30 * 1.15 <= request <= 3 * 2**30 * 1.15 * 1.06


def test_resolve_needs_the_write_token_in_the_form(engine: Engine) -> None:
    insert(engine, make_alert(1))
    client = ui(engine)
    with Session(engine) as session:
        alert_id = session.scalars(select(Alert.id)).one()
    path = f"/ui/alerts/{alert_id}/resolve"
    assert client.post(path, data={"token": ""}).status_code == 401
    assert client.post(path, data={"token": READ}).status_code == 401  # the read token does not write
    # a reader's cached Basic login (or any header) is not a write token: only the form field counts
    assert client.post(path, data={}, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 401
    refused = client.post(path, data={"token": "wrong"})
    assert refused.status_code == 401 and "text/html" in refused.headers["content-type"]
    with Session(engine) as session:
        assert session.get(Alert, alert_id).state == "firing"  # type: ignore[union-attr]
    done = client.post(path, data={"token": TOKEN}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/ui/alerts/{alert_id}?note=resolved"
    with Session(engine) as session:
        assert session.get(Alert, alert_id).state == "resolved"  # type: ignore[union-attr]
    assert client.post(path, data={"token": TOKEN}).status_code == 409


def test_silence_form_needs_the_write_token_and_valid_matchers(engine: Engine) -> None:
    client = ui(engine)
    form = {"matchers": 'alertname="JobFailed"\nnamespace="ml"', "hours": "2", "created_by": "ann",
            "back": "/ui/alerts/1"}
    assert client.post("/ui/silences", data=form).status_code == 401
    assert client.post("/ui/silences", data={**form, "token": TOKEN, "matchers": "bad matcher"}).status_code == 400
    assert client.post("/ui/silences", data={**form, "token": TOKEN, "hours": "-1"}).status_code == 400
    done = client.post("/ui/silences", data={**form, "token": TOKEN}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui/alerts/1?note=silenced"
    evil = client.post("/ui/silences", data={**form, "token": TOKEN, "back": "//evil.example/x"},
                       follow_redirects=False)
    assert evil.headers["location"] == "/ui/silences?note=silenced"  # no open redirect
    insert(engine, make_alert(7, namespace='we"ird\\ns'))
    with Session(engine) as session:
        alert_id = session.scalars(select(Alert.id)).one()
    prefilled = html.unescape(re.search(r'<textarea name="matchers"[^>]*>(.*?)</textarea>',
                                        client.get(f"/ui/alerts/{alert_id}").text, re.S)[1])  # type: ignore[index]
    assert client.post("/ui/silences", data={"matchers": prefilled.replace("\n", "\r\n"), "hours": "1",
                                             "token": TOKEN}, follow_redirects=False).status_code == 303
    with Session(engine) as session:
        rows = list(session.scalars(select(Silence).order_by(Silence.id)))
    labels = {"alertname": "JobFailed", "kind": "JobFailed", "namespace": 'we"ird\\ns', "job_name": "job7",
              "queue": "q1"}
    assert all(parse_matcher(m).matches(labels) for m in rows[2].matchers), rows[2].matchers
    assert len(rows) == 3 and rows[0].matchers == ['alertname="JobFailed"', 'namespace="ml"']
    assert rows[0].ends_at - rows[0].starts_at == timedelta(hours=2)


@pytest.mark.parametrize("path", ["/ui/notifications", "/ui/silences", "/ui/queues/q1"])
def test_pages_with_peoples_data_need_the_read_token(engine: Engine, path: str) -> None:
    client = ui(engine, [QueueView("q1", "", {}, {}, "Open")])
    refused = client.get(path)
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic ")
    assert client.get(path, headers=basic("wrong")).status_code == 401
    for headers in (basic(READ), basic(TOKEN), {"Authorization": f"Bearer {READ}"}):
        assert client.get(path, headers=headers).status_code == 200


def test_queue_tree_follows_parents(engine: Engine) -> None:
    insert(engine, make_run("u1", "wait-1", queue="child", phase="Pending"),
           make_run("u2", "run-1", queue="child", phase="Running"),
           make_run("u3", "run-2", queue="child", phase="Running"),
           make_run("u4", "done", queue="child", phase="Running", finished=timedelta(minutes=1)))
    queues = [QueueView("root", "", {}, {}, "Open"), QueueView("child", "root", {"cpu": 8}, {"cpu": 2}, "Open",
                                                               {"cpu": 4}),
              QueueView("grandchild", "child", {}, {}, "Closed"), QueueView("loop", "loop", {}, {}, "Open")]
    page = ui(engine, queues).get("/").text
    order = [m for m in re.findall(r'href="/ui/queues/([^"]+)"', page)]
    assert order == ["loop", "root", "child", "grandchild"]
    assert "&nbsp;" * 6 + '<a href="/ui/queues/grandchild">' in page
    assert "cpu: 4" in page  # deserved
    assert '<a href="/ui/jobs?queue=child&amp;phase=Pending%2CInqueue">1</a>' in page
    assert '<a href="/ui/jobs?queue=child&amp;phase=Running">2</a>' in page  # the finished one is not running


def test_links_in_chat_messages_land_on_the_ui(engine: Engine) -> None:
    """An alert's link in a message (api_url + path) is the UI page of that alert, and it renders."""
    from volcano_monitor.watchdog.actions.notify.describe import alert_item
    from volcano_monitor.watchdog.actions.notify.sample import sample_message

    insert(engine, make_alert(1))
    with Session(engine) as session:
        row = session.scalars(select(Alert)).one()
        url = alert_item(row, "firing", api_url="http://watchdog:9747/").url
    assert url == f"http://watchdog:9747/ui/alerts/{row.id}?cluster=default"  # the alert's cluster
    client = ui(engine)
    page = client.get(url.removeprefix("http://watchdog:9747"))
    assert page.status_code == 200 and "summary 1" in page.text
    overview = sample_message("r", api_url="http://watchdog:9747").links["api"]
    assert overview == "http://watchdog:9747/ui/alerts?state=firing"
    assert client.get(overview.removeprefix("http://watchdog:9747")).status_code == 200


def test_capability_page_shows_plan_and_history_in_units(engine: Engine) -> None:
    resources = {"memory": {"current": None, "target": 64 * 2**30, "planned": 32 * 2**30, "allocated": 2**30,
                            "why": EVIL},
                 "cpu": {"current": 8, "target": "bad", "planned": 10, "allocated": 2, "why": ""}}
    insert(engine, CapabilityPlan(queue="q1", policy="share", mode="dry-run", outcome="dry_run", resources=resources,
                                  inputs={}, identity="wd-0", planned_at=NOW),
           CapabilityChange(queue="q1", policy="share", mode="dry-run", outcome="dry_run", before={"memory": None},
                            after={"memory": 32 * 2**30}, why={"memory": EVIL}, inputs={}, created_at=NOW))
    page = ui(engine).get("/ui/queues/q1", headers=basic(READ)).text
    assert "<script" not in page and page.count("&lt;script&gt;") == 2
    assert "<td>unlimited</td><td>64 GiB</td><td>32 GiB</td><td>1 GiB</td>" in page
    assert "<td>8</td><td>bad</td><td>10</td><td>2</td>" in page  # a malformed stored amount shows, no crash
    assert "memory: unlimited" in page and "memory: 32 GiB" in page and "1&ndash;1 of 1" in page
