"""The API's job items carry the run's cost: the very numbers the report gives the same run (both come
from `watchdog.state.prices.run_cost`), and null when `costs:` sets no price."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.watchdog.views.report.test_compute import PRICES, UNTIL, insert, make_rows
from tests.watchdog.views.test_api import TOKEN, health
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.report.compute import compute_report

COSTS = Costs.model_validate({"currency": "EUR", "prices": PRICES})
FAR = timedelta(days=3650)


def client(engine: Engine, costs: Costs) -> TestClient:
    settings = Settings(api_token=SecretStr(TOKEN), costs=costs)
    return TestClient(create_app(engine, settings, health(), clock=lambda: UNTIL))


def test_job_items_cost_is_the_reports_per_run_cost(engine: Engine) -> None:
    rows = make_rows()
    insert(engine, rows, [])
    with Session(engine) as session:
        report = compute_report(session, UNTIL - FAR, UNTIL + FAR, "queue", costs=COSTS)
    charges = {c.uid: c.cost for c in report.charges}
    api = client(engine, COSTS)
    items = api.get("/api/v1/jobs", params={"limit": 1000}).json()["items"]
    assert len(items) == len(rows) == len(charges)
    unsampled = rows[0]["uid"]  # make_rows leaves every ninth run unsampled: billed from the ledger's times
    for item in [*items, api.get(f"/api/v1/jobs/{unsampled}").json()]:
        want = charges[item["uid"]]
        assert item["cost"]["currency"] == "EUR"
        for basis in ("requested", "used", "idle"):
            assert item["cost"][basis] == pytest.approx(want.total(basis), rel=1e-12), (item["uid"], basis)
    assert charges[unsampled].total("requested") > 0 and charges[unsampled].total("used") == 0


def test_job_items_cost_is_null_without_prices(engine: Engine) -> None:
    rows = make_rows(count=5)
    insert(engine, rows, [])
    api = client(engine, Costs(currency="EUR"))
    assert [item["cost"] for item in api.get("/api/v1/jobs").json()["items"]] == [None] * 5
    assert api.get(f"/api/v1/jobs/{rows[1]['uid']}").json()["cost"] is None
