"""`GET /api/v1/reports` serves the CLI's report in every format, over the period asked for, and
answers 422 to a period it cannot read."""

from __future__ import annotations

import csv
import io

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.watchdog.views.report.test_compute import SINCE, UNTIL, expected, insert, make_alerts, make_rows
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health
from volcano_monitor.watchdog.views.report.render import COLUMNS


def client_for(engine: Engine) -> TestClient:
    return TestClient(create_app(engine, Settings(), Health(ready=lambda: True, collectors=dict),
                                 clock=lambda: UNTIL))


def test_formats_and_period(engine: Engine) -> None:
    rows, alerts = make_rows(), make_alerts()
    insert(engine, rows, alerts)
    want = expected(rows, alerts, "namespace")
    client = client_for(engine)
    body = client.get("/api/v1/reports", params={"since": "7d", "by": "namespace"}).json()  # until: the clock
    assert body["since"] == SINCE.isoformat() and body["total"]["runs"] == want["(all)"]["runs"]
    failed = {k: v["failed"] for k, v in want.items() if k != "(all)"}
    assert {g["group"]: g["failed"] for g in body["groups"]} == failed
    page = client.get("/api/v1/reports", params={"since": SINCE.isoformat(), "until": UNTIL.isoformat(),
                                                 "by": "namespace", "format": "csv"})
    assert page.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(page.text)))
    assert [r["group"] for r in table] == [*sorted(k for k in want if k != "(all)"), "(all)"]
    assert int(table[-1]["runs"]) == want["(all)"]["runs"] and list(table[0]) == list(COLUMNS)
    for fmt, media in (("html", "text/html"), ("md", "text/markdown"), ("table", "text/plain")):
        answer = client.get("/api/v1/reports", params={"format": fmt})
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(media)


def test_bad_periods_are_422(engine: Engine) -> None:
    client = client_for(engine)
    backwards = {"since": UNTIL.isoformat(), "until": SINCE.isoformat()}
    for params in ({"since": "last-week"}, backwards, {"format": "pdf"}, {"by": "pod"}, {"since": "7d\x00"},
                   {"since": "99999999999d"}, {"until": "0001-01-01T00:00:00+01:00"}):  # were 500s (OverflowError)
        answer = client.get("/api/v1/reports", params=params)
        assert answer.status_code == 422, params
        # FastAPI's validation error, as the schema declares the 422, naming the parameter
        detail = answer.json()["detail"]
        assert isinstance(detail, list) and detail[0]["loc"][0] == "query", (params, detail)
    assert client.get("/api/v1/reports", params=backwards).json()["detail"][0]["loc"] == ["query", "since"]
