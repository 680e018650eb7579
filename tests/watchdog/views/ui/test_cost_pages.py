"""Cost on the web UI: the job page's line (absent without prices) and the queue page's week and month,
children included, with its budget counted as the budget detector counts it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.watchdog.views.test_api import TOKEN, health, insert
from tests.watchdog.views.ui.test_pages import READ, basic
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.detectors.budget import BudgetDetector
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import QueueView

NOW = datetime(2024, 5, 15, 12, 0, tzinfo=UTC)  # a Wednesday: the week began on the 13th, the month on the 1st
PRICED = Costs.model_validate({"currency": "USD", "prices": {"cpu": 0.04},
                               "budgets": [{"queue": "eng", "period": "month", "amount": 20}]})


def run(uid: str, queue: str, path: str, ended: datetime, requested: float, used: float) -> JobRun:
    """A run a usage sample saw (so its stored cpu cost is its cost), ended at `ended`."""
    return JobRun(uid=uid, namespace="ml", name=uid, workload=uid, queue=queue, queue_path=path, phase="Completed",
                  created_at=ended - timedelta(hours=2), started_at=ended - timedelta(hours=1), finished_at=ended,
                  cpu_core_seconds_requested=3600.0, cpu_core_seconds_used=1000.0, cost_cpu_requested=requested,
                  cost_cpu_used=used, updated_at=ended)


def client(engine: Engine, costs: Costs) -> TestClient:
    settings = Settings(api_token=SecretStr(TOKEN), api_read_token=SecretStr(READ), costs=costs)
    queues = [QueueView("eng", "", {}, {}, "Open"), QueueView("team-a", "eng", {}, {}, "Open")]
    return TestClient(create_app(engine, settings, health(), clock=lambda: NOW, queues=lambda: queues))


def test_job_page_shows_the_cost_line_with_prices_only(engine: Engine) -> None:
    insert(engine, run("u1", "eng", "root/eng", NOW - timedelta(hours=1), 1.23, 0.40))
    text = client(engine, PRICED).get("/ui/jobs/u1").text
    assert "Cost: 1.23 USD held, 0.40 used, 0.83 idle" in text
    assert "docs/cost.md" in text
    assert "Cost:" not in client(engine, Costs()).get("/ui/jobs/u1").text


def test_queue_page_shows_week_and_month_with_children_and_the_budget(engine: Engine) -> None:
    insert(engine,
           run("child-week", "team-a", "root/eng/team-a", datetime(2024, 5, 14, tzinfo=UTC), 3.0, 1.0),
           run("own-month", "eng", "root/eng", datetime(2024, 5, 5, tzinfo=UTC), 10.0, 4.0),
           run("last-month", "eng", "root/eng", datetime(2024, 4, 20, tzinfo=UTC), 500.0, 0.0),
           run("other-queue", "other", "root/other", datetime(2024, 5, 14, tzinfo=UTC), 100.0, 0.0))
    text = client(engine, PRICED).get("/ui/queues/eng", headers=basic(READ)).text
    cells = [c.split("</td>")[0] for c in text.split("<td")[1:]]
    week = cells.index(">this week")
    assert cells[week + 2:week + 5] == [' class="n">3.00', ' class="n">1.00', ' class="n">2.00']
    month = cells.index(">this month")
    assert cells[month + 2:month + 5] == [' class="n">13.00', ' class="n">5.00', ' class="n">8.00']
    assert "Budget: 20.00 USD a month; spent 13.00 (65%)" in text
    with Session(engine) as session:  # the budget detector counts the same spent
        signals = BudgetDetector(PRICED).check(session, NOW)
    assert {s.details["spent"] for s in signals} == {13.0}
    child = client(engine, PRICED).get("/ui/queues/team-a", headers=basic(READ)).text
    assert '<td class="n">3.00</td>' in child and "Budget:" not in child
    assert "<h2>Cost</h2>" not in client(engine, Costs()).get("/ui/queues/eng", headers=basic(READ)).text
