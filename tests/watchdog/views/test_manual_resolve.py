"""Resolving an alert by hand goes through the worker and the alert book (issue 12, defect 3).

`POST /api/v1/alerts/{id}/resolve` stores a request; the worker (the leader's, in production) carries it
out through the alert book, so exactly one "resolved" message is queued, no new episode opens while the
cause persists — across a restart too — and once the cause has gone, a recurrence is a new episode
whose end again sends exactly one "resolved" message. Both databases.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.watchdog.findings.test_detectors import podgroup, ts
from tests.watchdog.harness import fast_settings
from volcano_monitor.core.model import parse_podgroup
from volcano_monitor.watchdog.actions.notify.message import AlertItem
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health

TOKEN = "resolve-t0ken"
T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Told:
    """Stands in for the outbox: what the worker asks it to announce (its enabled path)."""

    enabled = True

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def enqueue(self, session: Session, item: AlertItem, now: Any) -> int:
        self.items.append((item.status, item.fingerprint))
        return 1

    def count(self, status: str) -> int:
        return sum(1 for s, _ in self.items if s == status)


def worker(database_url: str, engine: Engine, clock: Clock, told: Told) -> Watchdog:
    settings = fast_settings(database_url, api_token=SecretStr(TOKEN))
    wd = Watchdog(settings, engine, api=None, clock=clock)
    wd.outbox = wd.tasks.outbox = told  # type: ignore[assignment]
    return wd


def gang(phase: str) -> Any:
    raw = podgroup(phase=phase, queue="nowhere", min_resources={"cpu": "500"})  # never fits: no queue blocks it
    raw["metadata"]["creationTimestamp"] = ts(T0)
    return parse_podgroup(raw)


def checks(wd: Watchdog, clock: Clock, seconds: int) -> None:
    for _ in range(seconds):
        clock.now += 1
        wd.apply([], ["checks"])


def alerts(engine: Engine) -> list[tuple[str, str, bool]]:
    with Session(engine) as session:
        return [(a.kind, a.state, a.held) for a in session.scalars(select(Alert).order_by(Alert.id))]


def test_resolved_by_hand_once_while_the_cause_persists_then_new_episodes(database_url: str,
                                                                          engine: Engine) -> None:
    clock, told = Clock(), Told()
    wd = worker(database_url, engine, clock, told)
    wd.apply([("podgroups", "ADDED", gang("Pending"))], [])
    checks(wd, clock, 3)
    assert alerts(engine) == [("GangUnschedulable", "firing", False)] and told.count("firing") == 1

    settings = fast_settings(database_url, api_token=SecretStr(TOKEN))
    app = create_app(engine, settings, Health(ready=lambda: True, collectors=dict),
                     request_made=lambda: wd.apply([], ["requests"]))
    with Session(engine) as session:
        alert_id = session.scalars(select(Alert.id)).one()
    response = TestClient(app).post(f"/api/v1/alerts/{alert_id}/resolve", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and response.json()["state"] == "resolved", response.text
    assert told.count("resolved") == 1
    assert alerts(engine) == [("GangUnschedulable", "resolved", True)]

    checks(wd, clock, 5)  # the cause persists: no new episode, nothing said
    restarted = worker(database_url, engine, clock, told)  # a restart (or a new leader) keeps it held
    restarted.apply([("podgroups", "ADDED", gang("Pending"))], [])
    checks(restarted, clock, 5)
    assert alerts(engine) == [("GangUnschedulable", "resolved", True)]
    assert (told.count("firing"), told.count("resolved")) == (1, 1)

    restarted.apply([("podgroups", "MODIFIED", gang("Running"))], [])  # the cause ends
    checks(restarted, clock, 2)
    assert alerts(engine) == [("GangUnschedulable", "resolved", False)]
    assert told.count("resolved") == 1  # no second "resolved" for the episode resolved by hand

    restarted.apply([("podgroups", "MODIFIED", gang("Pending"))], [])  # it recurs
    checks(restarted, clock, 3)
    assert [state for _, state, _ in alerts(engine)] == ["resolved", "firing"]
    restarted.apply([("podgroups", "DELETED", gang("Pending"))], [])
    checks(restarted, clock, 1)
    assert [state for _, state, _ in alerts(engine)] == ["resolved", "resolved"]
    assert (told.count("firing"), told.count("resolved")) == (2, 2)


def test_resolving_twice_or_a_missing_alert(database_url: str, engine: Engine) -> None:
    clock, told = Clock(), Told()
    wd = worker(database_url, engine, clock, told)
    wd.apply([("podgroups", "ADDED", gang("Pending"))], [])
    checks(wd, clock, 3)
    settings = fast_settings(database_url, api_token=SecretStr(TOKEN))
    client = TestClient(create_app(engine, settings, Health(ready=lambda: True, collectors=dict),
                                   request_made=lambda: wd.apply([], ["requests"])))
    with Session(engine) as session:
        alert_id = session.scalars(select(Alert.id)).one()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert client.post(f"/api/v1/alerts/{alert_id}/resolve", headers=auth).status_code == 200
    assert client.post(f"/api/v1/alerts/{alert_id}/resolve", headers=auth).status_code == 409
    assert client.post("/api/v1/alerts/424242/resolve", headers=auth).status_code == 404
    assert told.count("resolved") == 1
