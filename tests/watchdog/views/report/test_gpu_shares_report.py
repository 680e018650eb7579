"""Reports in physical GPU-hours (issue 31): a week holding a HAMi job of four quarter pods and a whole-GPU
job of four cards, each for an hour, reports 5 GPU-hours requested (1 + 4), not 8, with the cost of five
card-hours, on SQLite and PostgreSQL; the rendered report says the same."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.watchdog.state.test_gpu_shares import COSTS, run_for_an_hour
from volcano_monitor.watchdog.views.report.compute import compute_report
from volcano_monitor.watchdog.views.report.render import to_csv

SINCE = datetime(2023, 11, 13, tzinfo=UTC)
UNTIL = datetime(2023, 11, 20, tzinfo=UTC)


def test_a_week_of_shared_and_whole_gpus_in_physical_gpu_hours(engine: Engine) -> None:
    run_for_an_hour(engine, "hami")
    run_for_an_hour(engine, "whole", node_name="gpu-b")
    with Session(engine) as session:
        report = compute_report(session, SINCE, UNTIL, "workload", costs=COSTS)
    assert report.total.gpu.requested == pytest.approx(5.0)
    assert report.total.gpu.used == pytest.approx(3.0)  # 60 % of each share
    assert report.total.cost.requested == pytest.approx(10.0)  # five card-hours at 2.0 (cpu and memory free)
    by_name = {g.name: g for g in report.groups}
    assert by_name["ml/run-hami"].gpu.requested == pytest.approx(1.0)
    assert by_name["ml/run-whole"].gpu.requested == pytest.approx(4.0)
    rows = [line.split(",") for line in to_csv(report).splitlines()]
    column = rows[0].index("gpu_hours_requested")
    assert {row[0]: float(row[column]) for row in rows[1:]}["ml/run-hami"] == pytest.approx(1.0)
