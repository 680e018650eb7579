"""Cost in the report: a parent queue includes its children, by workload, the FOCUS export and the API,
each against the ledger rows the test inserted."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.watchdog.views.report.test_compute import PRICES, SINCE, UNTIL, insert, make_alerts, make_rows, row_cost
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health
from volcano_monitor.watchdog.views.report.compute import compute_report
from volcano_monitor.watchdog.views.report.render import COLUMNS, FOCUS_COLUMNS, render

COSTS = Costs.model_validate({"currency": "EUR", "prices": PRICES})
TREE = {"team-a": "root/eng/team-a", "team-b": "root/eng/team-b", "prod": "root/prod", "eng": "root/eng"}
BASES = ("requested", "used", "idle")


def tree_rows() -> list[dict[str, Any]]:
    """The report test's runs, spread over a queue tree: root > eng > (team-a, team-b), root > prod; eng runs
    nothing of its own, root neither."""
    rows = make_rows(seed=11, count=90)
    for i, row in enumerate(rows):
        row["queue"] = ("team-a", "team-b", "prod")[i % 3]
        row["queue_path"] = TREE[row["queue"]]
    return rows


def in_period(row: dict[str, Any]) -> bool:
    end = row["finished_at"] or row["deleted_at"]
    ref = row["started_at"] or row["created_at"]
    return (end is not None and SINCE <= end < UNTIL) or (end is None and ref is not None and ref < UNTIL)


def by_group(report_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in report_json["groups"]} | {"(all)": report_json["total"]}


def test_a_parent_queues_cost_is_the_sum_of_its_childrens(engine: Engine) -> None:
    rows = tree_rows()
    insert(engine, rows, [])
    with Session(engine) as session:
        groups = by_group(json.loads(render(compute_report(session, SINCE, UNTIL, "queue", costs=COSTS), "json")))
    assert set(groups) == {"root", "eng", "team-a", "team-b", "prod", "(all)"}
    for basis in BASES:
        key = f"cost_{basis}"
        assert groups["team-a"][key] > 0 and groups["team-b"][key] > 0
        assert groups["eng"][key] == pytest.approx(groups["team-a"][key] + groups["team-b"][key], rel=1e-12)
        assert groups["root"][key] == pytest.approx(groups["eng"][key] + groups["prod"][key], rel=1e-12)
        assert groups["root"][key] == pytest.approx(groups["(all)"][key], rel=1e-12)
        # and each leaf is its own runs, from the rows as inserted
        for leaf in ("team-a", "team-b", "prod"):
            want = sum(row_cost(r)[basis] for r in rows if r["queue"] == leaf and in_period(r))
            assert groups[leaf][key] == pytest.approx(want, rel=1e-9)
    assert groups["eng"]["runs"] == groups["team-a"]["runs"] + groups["team-b"]["runs"]
    assert groups["eng"]["gpu_hours_requested"] == pytest.approx(
        groups["team-a"]["gpu_hours_requested"] + groups["team-b"]["gpu_hours_requested"])


def test_child_queue_alerts_count_in_the_parent(engine: Engine) -> None:
    rows = tree_rows()
    alerts = make_alerts()
    for i, alert in enumerate(alerts):
        alert["queue"] = ("team-a", "team-b")[i % 2]
    insert(engine, rows, alerts)
    with Session(engine) as session:
        report = compute_report(session, SINCE, UNTIL, "queue", costs=COSTS)
    groups = {g.name: g for g in report.groups}
    fired = sum(groups["eng"].alerts.values())
    assert fired > 0 and fired == sum(groups["team-a"].alerts.values()) + sum(groups["team-b"].alerts.values())
    assert sum(report.total.alerts.values()) == fired


def test_by_workload_and_totals_equal_the_ledgers(engine: Engine) -> None:
    rows = make_rows(seed=5)
    for i, row in enumerate(rows):
        row["workload"] = ("train", "etl")[i % 2]
    insert(engine, rows, [])
    with Session(engine) as session:
        groups = by_group(json.loads(render(compute_report(session, SINCE, UNTIL, "workload", costs=COSTS), "json")))
    for basis in BASES:
        for name, group in groups.items():
            want = sum(row_cost(r)[basis] for r in rows if in_period(r)
                       and name in ("(all)", f"{r['namespace']}/{r['workload']}"))
            assert group[f"cost_{basis}"] == pytest.approx(want, rel=1e-9), (name, basis)
    assert set(groups) == {"ml/train", "ml/etl", "etl/train", "etl/etl", "(all)"}


def test_focus_export_bills_the_reports_total(engine: Engine) -> None:
    rows = make_rows(seed=3)
    rows[0].update(queue="q\"uote", namespace="ml")
    insert(engine, rows, [])
    with Session(engine) as session:
        report = compute_report(session, SINCE, UNTIL, "queue", costs=COSTS)
    out = render(report, "focus")
    lines = list(csv.DictReader(io.StringIO(out)))
    assert list(lines[0]) == list(FOCUS_COLUMNS)
    assert sum(float(line["BilledCost"]) for line in lines) == pytest.approx(report.total.cost.requested, rel=1e-9)
    assert {line["BillingCurrency"] for line in lines} == {"EUR"}
    assert {line["ConsumedUnit"] for line in lines} == {"Core-Hours", "GiB-Hours", "GPU-Hours"}
    assert {line["ChargePeriodStart"] for line in lines} == {SINCE.isoformat()}
    cpu_hours = sum(float(line["ConsumedQuantity"]) for line in lines if line["ConsumedUnit"] == "Core-Hours")
    unsampled = sum(r["requested_cpu_cores"] * ((r["finished_at"] or r["deleted_at"]) - r["started_at"]).total_seconds()
                    for r in rows if in_period(r) and "requested_cpu_cores" in r and r["started_at"]
                    and (r["finished_at"] or r["deleted_at"])) / 3600
    assert cpu_hours == pytest.approx(report.total.cpu.requested + unsampled, rel=1e-9)
    tags = [json.loads(line["Tags"]) for line in lines]
    assert {"queue", "namespace"} <= set(tags[0])
    assert any(t["queue"] == "q\"uote" for t in tags)
    assert {line["ResourceId"] for line in lines} <= {r["uid"] for r in rows}


def test_the_api_serves_the_reports_cost(engine: Engine) -> None:
    rows = tree_rows()
    insert(engine, rows, [])
    settings = Settings(costs=COSTS)
    client = TestClient(create_app(engine, settings, Health(ready=lambda: True, collectors=dict), clock=lambda: UNTIL))
    body = client.get("/api/v1/reports", params={"since": "7d", "by": "queue"}).json()
    with Session(engine) as session:
        report = compute_report(session, SINCE, UNTIL, "queue", costs=COSTS)
    assert body["currency"] == "EUR" and body["total"]["cost_requested"] == pytest.approx(report.total.cost.requested)
    assert by_group(body)["eng"]["cost_idle"] == pytest.approx({g.name: g for g in report.groups}["eng"].cost.idle)
    page = client.get("/api/v1/reports", params={"format": "focus", "since": (UNTIL - SINCE).days * 86400})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/csv")
    assert page.text.splitlines()[0] == ",".join(FOCUS_COLUMNS)
    workloads = client.get("/api/v1/reports", params={"by": "workload", "format": "csv"})
    assert workloads.status_code == 200 and workloads.text.splitlines()[0] == ",".join(COLUMNS)


def test_every_format_carries_the_cost_columns(engine: Engine) -> None:
    insert(engine, tree_rows(), [])
    with Session(engine) as session:
        report = compute_report(session, SINCE, UNTIL, "queue", costs=COSTS)
    for fmt in ("table", "md", "html", "csv"):
        text = render(report, fmt)
        assert "cost requested" in text or "cost_requested" in text, fmt
        assert "EUR" in text, fmt
