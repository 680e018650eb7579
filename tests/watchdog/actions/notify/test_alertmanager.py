"""The Alertmanager receiver (`POST /api/v1/alertmanager`): what it accepts and refuses, through the
FastAPI app on SQLite and PostgreSQL; then a real Alertmanager (the `prometheus-alertmanager` binary)
routing to a real watchdog HTTP server, whose notifier posts to a local chat server — firing, then
resolved."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from tests.exporter.test_cli import free_port
from volcano_monitor.simulator.chatinbox import ChatInbox, InboxMessage
from volcano_monitor.simulator.stack import alertmanager_binary
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.config import Settings, load
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import NotificationDelivery, NotificationEntry, NotificationGroup
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health

TOKEN = "am-t0ken-Sekret-77"
RECEIVER_PATH = "/api/v1/alertmanager"
ROUTE = {"receiver": "chat", "group_by": ["alertname", "namespace", "job_name"], "group_wait": 0, "group_interval": 0,
         "repeat_interval": "4h"}


def settings_for(chat_url: str | None, token: str | None = TOKEN) -> Settings:
    notifications: dict[str, Any] = {"delivery": {"poll_interval_seconds": 0.2, "timeout_seconds": 5}}
    if chat_url is not None:
        notifications |= {"receivers": [{"name": "chat", "slack": {"url": chat_url}}], "route": ROUTE}
    return load(None, environ={}, api_token=token, notifications=notifications)


def am_alert(job: str, status: str = "firing", **labels: str) -> dict[str, Any]:
    """One alert as Alertmanager 0.25 writes it into a webhook payload."""
    return {
        "status": status,
        "labels": {"alertname": "VolcanoJobFailed", "severity": "critical", "namespace": "team-a",
                   "queue": "research", "job_name": job, **labels},
        "annotations": {"summary": f"Volcano job team-a/{job} failed", "description": "2 of 4 pods OOMKilled"},
        "startsAt": "2024-05-01T12:00:00.123Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2024-05-01T12:05:00Z",
        "generatorURL": "http://prometheus:9090/graph?g0.expr=volcano_job_phase",
        "fingerprint": f"f00d{job}",
    }


def am_payload(*alerts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{alertname="VolcanoJobFailed"}', "truncatedAlerts": 0,
            "status": "firing", "receiver": "volcano-watchdog", "groupLabels": {"alertname": "VolcanoJobFailed"},
            "commonLabels": {"alertname": "VolcanoJobFailed"}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts), **fields}


@dataclass
class Receiver:
    http: TestClient
    woken: list[int]


def receiver_app(engine: Engine, chat_url: str | None = "http://127.0.0.1:1/slack/x") -> Receiver:
    settings = settings_for(chat_url)
    woken: list[int] = []
    app = create_app(engine, settings, Health(ready=lambda: True, collectors=dict),
                     outbox=Outbox(settings.notifications), wake_notifier=lambda: woken.append(1))
    return Receiver(TestClient(app), woken)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def outbox_rows(engine: Engine) -> int:
    with Session(engine) as session:
        return sum(session.scalar(select(func.count()).select_from(table)) or 0
                   for table in (NotificationGroup, NotificationEntry, NotificationDelivery))


# ---- the receiver through the app -------------------------------------------------------------------------


def test_a_valid_payload_lands_in_the_outbox(engine: Engine) -> None:
    receiver = receiver_app(engine)
    reply = receiver.http.post(RECEIVER_PATH, json=am_payload(am_alert("train-a"), am_alert("train-b")),
                               headers=auth())
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"alerts": 2, "groups": 2}  # grouped by job_name: one group each
    assert receiver.woken == [1]
    with Session(engine) as session:
        entries = {e.fingerprint: e for e in session.scalars(select(NotificationEntry))}
        groups = list(session.scalars(select(NotificationGroup)))
    assert set(entries) == {"am:f00dtrain-a", "am:f00dtrain-b"}  # Alertmanager's own fingerprints, prefixed
    stored = entries["am:f00dtrain-a"].alert
    assert entries["am:f00dtrain-a"].status == "firing"
    assert (stored["kind"], stored["source"], stored["severity"]) == ("VolcanoJobFailed", "alertmanager", "critical")
    assert (stored["namespace"], stored["queue"], stored["job_name"]) == ("team-a", "research", "train-a")
    assert stored["summary"] == "Volcano job team-a/train-a failed"
    assert stored["reasons"] == ["2 of 4 pods OOMKilled"]
    assert stored["url"] == "http://prometheus:9090/graph?g0.expr=volcano_job_phase"
    assert sorted(g.labels["job_name"] for g in groups) == ["train-a", "train-b"]
    assert all(g.receiver == "chat" and g.flush_at is not None for g in groups)  # due now (group_wait 0)


def test_resolved_alert_updates_its_entry(engine: Engine) -> None:
    receiver = receiver_app(engine)
    assert receiver.http.post(RECEIVER_PATH, json=am_payload(am_alert("train-a")), headers=auth()).status_code == 200
    reply = receiver.http.post(RECEIVER_PATH, json=am_payload(am_alert("train-a", "resolved"), status="resolved"),
                               headers=auth())
    assert reply.status_code == 200, reply.text
    with Session(engine) as session:
        entry = session.scalars(select(NotificationEntry)).one()
    assert (entry.status, entry.alert["resolved_at"]) == ("resolved", "2024-05-01T12:05:00Z")


def too_many() -> dict[str, Any]:
    return am_payload(*(am_alert(f"j{i}") for i in range(1001)))


def without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


BAD = {
    "version 3": (am_payload(am_alert("a"), version="3"), ("version", "'4'")),
    "no alerts": (without(am_payload(), "alerts"), ("alerts", "required")),
    "no alertname": (am_payload(am_alert("a", alertname="")), ("alertname",)),
    "alertname missing": (am_payload({**am_alert("a"), "labels": {"job_name": "a"}}), ("alertname",)),
    "status weird": (am_payload(am_alert("a"), status="weird"), ("status: input should be 'firing'",)),
    "alert status weird": (am_payload(am_alert("a", "weird")), ("alerts.0.status",)),
    "too many alerts": (too_many(), ("alerts", "1000")),
    "not json": (b'{"version": "4", "alerts": [', ("JSON",)),
    "not an object": ([am_alert("a")], ("object",)),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_payloads_are_400_with_a_reason(engine: Engine, case: str) -> None:
    receiver = receiver_app(engine)
    body, words = BAD[case]
    if isinstance(body, bytes):
        reply = receiver.http.post(RECEIVER_PATH, content=body,
                                   headers={**auth(), "Content-Type": "application/json"})
    else:
        reply = receiver.http.post(RECEIVER_PATH, json=body, headers=auth())
    assert reply.status_code == 400, reply.text
    detail = reply.json()["detail"]
    assert isinstance(detail, str)
    for word in words:
        assert word.lower() in detail.lower(), detail
    assert outbox_rows(engine) == 0
    assert receiver.woken == []


@pytest.mark.parametrize("headers", [{}, auth("wrong"), {"Authorization": TOKEN}, {"Authorization": "Basic eDp5"}],
                         ids=["none", "wrong token", "no scheme", "basic"])
def test_without_the_token_401(engine: Engine, headers: dict[str, str]) -> None:
    receiver = receiver_app(engine)
    reply = receiver.http.post(RECEIVER_PATH, json=am_payload(am_alert("a")), headers=headers)
    assert reply.status_code == 401, reply.text
    assert outbox_rows(engine) == 0
    assert receiver.woken == []


def test_no_receivers_configured_503(engine: Engine) -> None:
    receiver = receiver_app(engine, chat_url=None)
    reply = receiver.http.post(RECEIVER_PATH, json=am_payload(am_alert("a")), headers=auth())
    assert reply.status_code == 503
    assert "no receivers" in reply.json()["detail"]
    assert outbox_rows(engine) == 0


# ---- a real Alertmanager ----------------------------------------------------------------------------------


@pytest.fixture
def inbox() -> Iterator[ChatInbox]:
    box = ChatInbox().start()
    yield box
    box.stop()


@pytest.fixture
def watchdog_url(tmp_path: Path, inbox: ChatInbox) -> Iterator[str]:
    """The watchdog as `volcano-watchdog run` assembles it (no cluster: only the receiver is used here),
    its API served by a real uvicorn server."""
    settings = settings_for(f"{inbox.url}/slack/services/T000/B000/XXXX")
    engine = make_engine(f"sqlite:///{tmp_path / 'watchdog.db'}")
    watchdog = Watchdog(settings, engine, None).start()
    app = create_app(engine, settings, Health(ready=lambda: True, collectors=dict), outbox=watchdog.outbox,
                     wake_notifier=watchdog.notifier.wake)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    watchdog.stop()
    engine.dispose()


def alertmanager_config(watchdog_url: str) -> dict[str, Any]:
    """What docs/notifications.md shows, with test-sized timings."""
    return {
        "route": {"receiver": "volcano-watchdog", "group_by": ["alertname", "namespace", "job_name"],
                  "group_wait": "200ms", "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "volcano-watchdog", "webhook_configs": [{
            "url": f"{watchdog_url}{RECEIVER_PATH}",
            "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer", "credentials": TOKEN}},
        }]}],
    }


@pytest.fixture
def alertmanager(tmp_path: Path, watchdog_url: str) -> Iterator[str]:
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_config(watchdog_url), sort_keys=False))
    port = free_port()
    log = tmp_path / "alertmanager.log"
    binary = alertmanager_binary()
    if binary is None:
        pytest.fail("Alertmanager is needed: install Debian's prometheus-alertmanager (make test does when run "
                    "as root)", pytrace=False)
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=debug"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            assert process.poll() is None, f"alertmanager exited:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"alertmanager not ready:\n{log.read_text()[-3000:]}"
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def posted_alert(job: str, ends_at: datetime | None) -> dict[str, Any]:
    """An alert as Prometheus posts it to Alertmanager's API."""
    alert: dict[str, Any] = {
        "labels": {"alertname": "VolcanoJobFailed", "severity": "critical", "namespace": "team-a",
                   "queue": "research", "job_name": job},
        "annotations": {"summary": f"Volcano job team-a/{job} failed",
                        "description": "The job ended in phase Failed: 2 of 4 pods were OOMKilled."},
        "startsAt": rfc3339(datetime.now(UTC) - timedelta(seconds=30)),
        "generatorURL": "http://prometheus:9090/graph?g0.expr=volcano_job_phase",
    }
    if ends_at is not None:
        alert["endsAt"] = rfc3339(ends_at)
    return alert


def text_of(message: InboxMessage) -> str:
    return json.dumps(message.body, ensure_ascii=False)


def test_real_alertmanager_to_chat_firing_then_resolved(alertmanager: str, inbox: ChatInbox, tmp_path: Path) -> None:
    job = "llama-finetune-7"
    with httpx.Client(base_url=alertmanager, timeout=5) as am:
        reply = am.post("/api/v2/alerts", json=[posted_alert(job, None)])
        assert reply.status_code == 200, reply.text
        try:
            firing = inbox.wait_for(1, timeout=10, service="slack")[0]
        except TimeoutError:
            raise AssertionError((tmp_path / "alertmanager.log").read_text()[-3000:]) from None
        assert firing.path == "/slack/services/T000/B000/XXXX"
        title = firing.body["text"]
        assert title.startswith("[FIRING:1] VolcanoJobFailed"), title
        assert f"job_name={job}" in title and "namespace=team-a" in title
        assert f"Volcano job team-a/{job} failed" in text_of(firing)  # the summary annotation
        assert "2 of 4 pods were OOMKilled" in text_of(firing)  # the description, as the reason

        reply = am.post("/api/v2/alerts", json=[posted_alert(job, datetime.now(UTC) - timedelta(seconds=1))])
        assert reply.status_code == 200, reply.text
        try:
            messages = inbox.wait_for(2, timeout=10, service="slack")
        except TimeoutError:
            raise AssertionError((tmp_path / "alertmanager.log").read_text()[-3000:]) from None
        resolved = messages[1]
        assert resolved.body["text"].startswith("[RESOLVED] VolcanoJobFailed"), resolved.body["text"]
        assert f"job_name={job}" in resolved.body["text"]
        assert f"Volcano job team-a/{job} failed" in text_of(resolved)
        # Alertmanager saw its webhook answered 2xx both times (no failed notifications)
        metrics = am.get("/metrics").text
    failed = [line for line in metrics.splitlines()
              if line.startswith('alertmanager_notifications_failed_total{integration="webhook"')]
    assert failed and all(line.endswith(" 0") for line in failed), failed
    sent = [line for line in metrics.splitlines()
            if line.startswith('alertmanager_notifications_total{integration="webhook"')]
    assert sent and sum(float(line.rsplit(" ", 1)[1]) for line in sent) >= 2, sent
    time.sleep(0.3)
    assert len(inbox.messages()) == 2  # nothing told twice
