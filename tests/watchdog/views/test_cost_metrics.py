"""`volcano_watchdog_queue_cost_total`: the report's cost per queue over the whole ledger, and a counter:
retention (both the one-statement and the chunked kind) moves the cost of the rows it removes aside, so
the series never go down."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from tests.watchdog.views.report.test_compute import PRICES, UNTIL, insert, make_rows
from tests.watchdog.views.test_metrics import parse, pick
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.runtime.retention import run_retention
from volcano_monitor.watchdog.runtime.settings import Retention
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.state.ledger import enforce_retention
from volcano_monitor.watchdog.state.prices import queue_cost_totals
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health
from volcano_monitor.watchdog.views.metrics import EMPTY_TTL_SECONDS, TtlCache, render_metrics
from volcano_monitor.watchdog.views.report.compute import compute_report

COSTS = Costs.model_validate({"currency": "EUR", "prices": PRICES})
FAR = timedelta(days=3650)


def counters(engine: Engine) -> dict[tuple[str, str], float]:
    with Session(engine) as session:
        body = render_metrics(session, Health(ready=lambda: True, collectors=dict), UNTIL, costs=COSTS).decode()
    found = pick(parse(body), "volcano_watchdog_queue_cost_total")
    assert all(dict(key)["currency"] == "EUR" for key in found)
    return {(dict(key)["queue"], dict(key)["basis"]): value for key, value in found.items()}


def test_the_counters_are_the_reports_cost_over_the_whole_ledger(engine: Engine) -> None:
    insert(engine, make_rows(), [])
    with Session(engine) as session:
        report = compute_report(session, UNTIL - FAR, UNTIL + FAR, "queue", costs=COSTS)
    found = counters(engine)
    assert report.total.runs == 80  # the period holds every run, as the counters do
    for group in report.groups:
        for basis in ("requested", "used", "idle"):
            want = getattr(group.cost, basis)
            assert found[(group.name, basis)] == pytest.approx(want, rel=1e-9), (group.name, basis)
    assert sum(v for (_, b), v in found.items() if b == "idle") == pytest.approx(report.total.cost.idle, rel=1e-9)


@pytest.mark.parametrize("chunked", [False, True])
def test_retention_never_lowers_a_counter(engine: Engine, chunked: bool) -> None:
    insert(engine, make_rows(), [])
    before = counters(engine)
    small_chunks = Retention.model_construct(**{**Retention().model_dump(), "jobs_days": 2, "chunk_rows": 7})
    settings = Settings(costs=COSTS, retention=small_chunks)  # chunks of 7 rows: several per pass
    now = UNTIL + timedelta(days=3)
    if chunked:
        removed = run_retention(engine, settings, now, pace=False)["job_runs"]
    else:
        with Session(engine) as session, session.begin():
            removed = enforce_retention(session, settings.retention, now, COSTS)["job_runs"]
    with Session(engine) as session:
        left = session.scalar(select(func.count()).select_from(JobRun))
    assert removed > 20 and left is not None and left > 0  # some runs went, some stayed
    after = counters(engine)
    assert set(after) == set(before)
    for key, value in before.items():
        assert after[key] == pytest.approx(value, rel=1e-9), key


def test_the_metrics_endpoint_uses_the_configured_prices(engine: Engine) -> None:
    insert(engine, make_rows(), [])
    client = TestClient(create_app(engine, Settings(costs=COSTS), Health(ready=lambda: True, collectors=dict),
                                   clock=lambda: UNTIL))
    found = pick(parse(client.get("/metrics").text), "volcano_watchdog_queue_cost_total")
    assert {dict(k)["currency"] for k in found} == {"EUR"}
    assert found and any(v > 0 for v in found.values())


def test_a_run_is_retired_once_however_many_passes_delete_it(engine: Engine) -> None:
    """Two retention passes picking the same ids (a leader handing over mid-pass): the second deletes
    nothing, so it retires nothing."""
    from volcano_monitor.watchdog.state.prices import delete_runs

    insert(engine, make_rows(), [])
    before = counters(engine)
    with Session(engine) as session:
        ids = list(session.scalars(select(JobRun.id).order_by(JobRun.id).limit(30)))
    for expected_deleted in (30, 0):
        with Session(engine) as session, session.begin():
            assert delete_runs(session, ids, COSTS) == expected_deleted
    after = counters(engine)
    for key, value in before.items():
        assert after[key] == pytest.approx(value, rel=1e-9), key


def test_the_whole_ledger_is_summed_once_per_ttl_not_once_per_scrape(engine: Engine) -> None:
    """The totals group every ledger row (seconds on a long history): /metrics reads them through a TTL cache
    that keeps the last good value when the database fails, and looks again soon while there is nothing."""
    insert(engine, make_rows(), [])
    calls: list[int] = []

    def compute(session: Session, now: object) -> dict[str, tuple[float, float, float]]:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("database gone")
        return queue_cost_totals(session, COSTS)

    cache = TtlCache(compute, ttl_seconds=300, what="cost totals")
    with Session(engine) as session:
        first = cache.get(session, UNTIL)
        assert first and cache.get(session, UNTIL + timedelta(seconds=299)) is first and len(calls) == 1
        assert cache.get(session, UNTIL + timedelta(seconds=300)) == first and len(calls) == 2
        assert cache.get(session, UNTIL + timedelta(seconds=600)) == first and len(calls) == 3  # failed: kept
        body = render_metrics(session, Health(ready=lambda: True, collectors=dict), UNTIL, costs=COSTS,
                              cost_totals=first).decode()
    assert body == render_metrics_direct(engine)
    empty: TtlCache[dict[str, tuple[float, float, float]]] = TtlCache(lambda s, n: {}, 300, "cost totals")
    with Session(engine) as session:
        empty.get(session, UNTIL)
        assert empty.computed_at == UNTIL
        empty.get(session, UNTIL + timedelta(seconds=EMPTY_TTL_SECONDS))
        assert empty.computed_at == UNTIL + timedelta(seconds=EMPTY_TTL_SECONDS)


def render_metrics_direct(engine: Engine) -> str:
    with Session(engine) as session:
        return render_metrics(session, Health(ready=lambda: True, collectors=dict), UNTIL, costs=COSTS).decode()
