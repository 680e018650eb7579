"""GET /api/v1/queues/{name}/capability over stored plans and changes, on SQLite and PostgreSQL: the plan
(this replica's, else the stored one), the history paged newest first, 404 for an unknown queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.capability import store
from volcano_monitor.watchdog.actions.capability.api import capability_router
from volcano_monitor.watchdog.actions.capability.guardrails import QueuePlan, ResourcePlan
from volcano_monitor.watchdog.actions.capability.store import CapabilityChange

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class StubController:
    def __init__(self, live: dict[str, dict[str, Any]], known: set[str]) -> None:
        self.live, self.known = live, known

    def status(self, queue: str) -> dict[str, Any]:
        return dict(self.live.get(queue, {}))

    def knows(self, queue: str) -> bool:
        return queue in self.known


def plan(cpu_target: float) -> QueuePlan:
    return QueuePlan("q1", "share", {"cpu": ResourcePlan(10.0, cpu_target, 12.5, 2.0, "share: 0.5 x 64 cores")},
                     {"policy": "share", "nodes": ["n1", "n2"]})


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    with Session(engine) as session, session.begin():
        for i in range(5):
            store.record_change(session, CapabilityChange(
                queue="q1", policy="share", mode="apply", outcome="applied", before={"cpu": 10.0 + i},
                after={"cpu": 11.0 + i}, why={"cpu": f"step {i}"}, at=NOW + timedelta(minutes=i),
                inputs={"i": i}, resource_version=str(100 + i), identity="wd-0"))
        store.record_change(session, CapabilityChange(
            queue="other", policy="demand", mode="dry-run", outcome="dry_run", before={"memory": None},
            after={"memory": 2.0**30}, why={"memory": "x"}, at=NOW))
        store.save_plan(session, plan(32.0), "apply", "applied", "wd-0", NOW)
    with Session(engine) as session, session.begin():  # a later reconcile replaces the plan row
        store.save_plan(session, plan(30.0), "apply", "held", "wd-1", NOW + timedelta(minutes=9))
    return engine


def client(engine: Engine, controller: StubController) -> TestClient:
    app = FastAPI()
    app.include_router(capability_router(engine, controller))
    return TestClient(app)


def test_stored_plan_and_history_newest_first_paged(seeded: Engine) -> None:
    api = client(seeded, StubController({}, {"q1"}))
    body = api.get("/api/v1/queues/q1/capability", params={"limit": 2, "offset": 1}).json()
    assert body["queue"] == "q1"
    plan_out = body["plan"]
    assert (plan_out["source"], plan_out["outcome"], plan_out["identity"]) == ("database", "held", "wd-1")
    assert plan_out["resources"]["cpu"] == {"current": 10.0, "target": 30.0, "planned": 12.5, "allocated": 2.0,
                                            "why": "share: 0.5 x 64 cores", "held": False}
    assert datetime.fromisoformat(plan_out["planned_at"]) == NOW + timedelta(minutes=9)
    history = body["history"]
    assert (history["total"], history["limit"], history["offset"]) == (5, 2, 1)
    assert [item["why"]["cpu"] for item in history["items"]] == ["step 3", "step 2"]
    assert history["items"][0]["before"] == {"cpu": 13.0} and history["items"][0]["resource_version"] == "103"


def test_this_replicas_plan_comes_first(seeded: Engine) -> None:
    live = {"q1": {"queue": "q1", "policy": "share", "mode": "dry-run", "outcome": "dry_run", "identity": "wd-2",
                   "planned_at": NOW + timedelta(hours=1), "leader": False,
                   "resources": store.plan_document(plan(40.0)), "inputs": {"policy": "share"}}}
    body = client(seeded, StubController(live, {"q1"})).get("/api/v1/queues/q1/capability").json()
    assert (body["plan"]["source"], body["plan"]["identity"]) == ("replica", "wd-2")
    assert body["plan"]["resources"]["cpu"]["target"] == 40.0
    assert body["history"]["total"] == 5 and len(body["history"]["items"]) == 5


def test_unknown_and_policy_less_queues(seeded: Engine) -> None:
    api = client(seeded, StubController({}, {"q1", "no-policy"}))
    assert api.get("/api/v1/queues/nope/capability").status_code == 404
    assert api.get("/api/v1/queues/nope/capability").json() == {"detail": "no such queue"}
    quiet = api.get("/api/v1/queues/no-policy/capability").json()  # exists, never planned
    assert quiet["plan"] is None and quiet["history"]["total"] == 0
    gone = api.get("/api/v1/queues/other/capability").json()  # deleted queue: its history is still shown
    assert gone["plan"] is None and gone["history"]["items"][0]["before"] == {"memory": None}
    assert api.get("/api/v1/queues/q1/capability", params={"limit": 0}).status_code == 422
    assert "/api/v1/queues/{name}/capability" in api.get("/openapi.json").json()["paths"]
