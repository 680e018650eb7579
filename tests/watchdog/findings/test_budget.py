"""BudgetForecast and BudgetExceeded from the ledger: a queue's children count in it, the forecast is the
period's rate so far, each period is its own episode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.config import ConfigError, load
from volcano_monitor.watchdog.findings.detectors.budget import BudgetDetector, period_bounds
from volcano_monitor.watchdog.state.alerts import AlertBook
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import Alert, JobRun

MONDAY = datetime(2026, 11, 30, tzinfo=UTC)  # a Monday


def costs(amount: float, queue: str = "eng", period: str = "week", after: float = 3600) -> Costs:
    return Costs.model_validate({"currency": "EUR", "prices": {"cpu": 1.0},
                                 "budgets": [{"queue": queue, "period": period, "amount": amount,
                                              "forecast_after_seconds": after}]})


def run(uid: str, queue: str, path: str, cost: float, ended: datetime | None, started: datetime) -> JobRun:
    return JobRun(uid=uid, namespace="ml", name=uid, workload=uid, queue=queue, queue_path=path,
                  started_at=started, finished_at=ended, updated_at=started, cpu_core_seconds_requested=3600.0,
                  cost_cpu_requested=cost)


def seed(engine: Engine) -> None:
    """Spent in eng's tree this week by Wednesday noon: 30 + 20 (team-a, team-b) + 5 (still running);
    not counted: last week's run, and prod (another tree)."""
    wed = MONDAY + timedelta(days=2, hours=12)
    with Session(engine) as session, session.begin():
        session.add_all([
            run("a", "team-a", "root/eng/team-a", 30.0, wed - timedelta(hours=1), MONDAY + timedelta(hours=1)),
            run("b", "team-b", "root/eng/team-b", 20.0, wed - timedelta(hours=2), MONDAY + timedelta(days=1)),
            run("c", "team-b", "root/eng/team-b", 5.0, None, wed - timedelta(hours=3)),
            run("old", "team-a", "root/eng/team-a", 1000.0, MONDAY - timedelta(days=1), MONDAY - timedelta(days=2)),
            run("p", "prod", "root/prod", 500.0, wed - timedelta(hours=1), MONDAY + timedelta(hours=2)),
        ])


def judged(engine: Engine, settings: Costs, now: datetime) -> dict[str, bool]:
    with Session(engine) as session:
        return {s.kind: s.active for s in BudgetDetector(settings).check(session, now)}


def test_period_bounds() -> None:
    assert period_bounds("week", MONDAY + timedelta(days=6, hours=23)) == (MONDAY, MONDAY + timedelta(days=7))
    assert period_bounds("month", datetime(2026, 12, 31, 23, tzinfo=UTC)) == (
        datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))


def test_forecast_then_exceeded_counting_the_children(engine: Engine) -> None:
    seed(engine)
    # eng's first run started Monday 01:00: 55 spent in 59 h, 155.7 projected over the week's other 108 h
    wed = MONDAY + timedelta(days=2, hours=12)
    assert judged(engine, costs(150), wed) == {"BudgetForecast": True, "BudgetExceeded": False}
    assert judged(engine, costs(160), wed) == {"BudgetForecast": False, "BudgetExceeded": False}
    assert judged(engine, costs(55), wed) == {"BudgetForecast": False, "BudgetExceeded": True}
    # the leaf alone: 25 spent since its first run started (Tuesday 00:00), 100 projected by Monday
    assert judged(engine, costs(90, queue="team-b"), wed) == {"BudgetForecast": True, "BudgetExceeded": False}
    assert judged(engine, costs(110, queue="team-b"), wed) == {"BudgetForecast": False, "BudgetExceeded": False}
    assert judged(engine, costs(10, queue="team-b"), wed) == {"BudgetForecast": False, "BudgetExceeded": True}
    # the root holds prod too
    assert judged(engine, costs(500, queue="root"), wed) == {"BudgetForecast": False, "BudgetExceeded": True}


def test_no_forecast_from_the_first_hour(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        session.add(run("burst", "eng", "root/eng", 10.0, MONDAY + timedelta(minutes=20), MONDAY))
    early = MONDAY + timedelta(minutes=30)
    assert judged(engine, costs(100), early) == {"BudgetForecast": False, "BudgetExceeded": False}
    assert judged(engine, costs(100, after=60), early) == {"BudgetForecast": True, "BudgetExceeded": False}


def test_a_queue_that_starts_spending_mid_period_is_forecast_at_its_own_rate(engine: Engine) -> None:
    """Spread over the four and a half days before it ran, an hour's 10 would project to 15 and never warn; at
    its own rate (10 an hour, 60 hours left) it passes 100 on Saturday."""
    friday = MONDAY + timedelta(days=4, hours=12)
    with Session(engine) as session, session.begin():
        session.add(run("late", "eng", "root/eng", 10.0, None, friday))
    now = friday + timedelta(hours=1)
    with Session(engine) as session:
        [_, forecast] = BudgetDetector(costs(100, after=600)).check(session, now)
    assert forecast.active and forecast.details["rate_since"] == friday.isoformat()
    assert forecast.details["projected"] == pytest.approx(10.0 * 60, rel=1e-6)
    assert forecast.details["passes_at"] == (friday + timedelta(hours=10)).isoformat()
    assert judged(engine, costs(100, after=2 * 3600), now)["BudgetForecast"] is False  # its rate is 1 h old


def test_each_period_is_its_own_episode(engine: Engine) -> None:
    seed(engine)
    settings = costs(55)
    book, detector = AlertBook(), BudgetDetector(settings)
    wed = MONDAY + timedelta(days=2, hours=12)
    with Session(engine) as session, session.begin():
        book.apply_round(detector.KINDS, detector.check(session, wed), session, wed)
    with Session(engine) as session:
        [alert] = session.query(Alert).all()
        assert (alert.kind, alert.state, alert.queue) == ("BudgetExceeded", "firing", "eng")
        assert alert.details["spent"] == pytest.approx(55.0) and alert.details["currency"] == "EUR"
    next_monday = MONDAY + timedelta(days=7, minutes=5)
    with Session(engine) as session, session.begin():
        book.apply_round(detector.KINDS, detector.check(session, next_monday), session, next_monday)
    with Session(engine) as session:
        assert [a.state for a in session.query(Alert).all()] == ["resolved"]


@pytest.mark.parametrize(("text", "message"), [
    ("costs: {budgets: [{queue: eng, period: week, amount: -5}]}", "costs.budgets.0.amount: a budget must be"),
    ("costs: {budgets: [{queue: eng, period: day, amount: 5}]}", "costs.budgets.0.period"),
    ("costs: {budgets: [{queue: eng, period: week, amount: 5}, {queue: eng, period: week, amount: 6}]}",
     "costs.budgets: queue 'eng' has two weekly budgets"),
])
def test_bad_budgets_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load(path, environ={})
    assert message in str(error.value) and "\n" not in str(error.value)
