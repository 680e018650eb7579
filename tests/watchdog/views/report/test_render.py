"""Every format carries the same numbers: CSV and JSON read back equal the rows, the table, Markdown
and HTML show each row, and a name with markup is escaped, not interpreted."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

from volcano_monitor.watchdog.views.report.compute import Group, Hours, Report, Waster
from volcano_monitor.watchdog.views.report.render import COLUMNS, render, rows

SINCE, UNTIL = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 8, tzinfo=UTC)


def sample() -> Report:
    evil = Group(name="<b>x</b>|y", runs=3, failed=1, succeeded=2, cpu=Hours(10.0, 2.5, 7.5),
                 memory=Hours(4.0, 1.0, 3.0), gpu=Hours(2.0, 0.5, 1.5), alerts={"JobFailed": 2},
                 wait_seconds={50: 12.0, 90: 30.0, 99: 33.0}, run_seconds={50: None, 90: None, 99: None})
    total = Group(name="(all)", runs=3, failed=1, succeeded=2, cpu=Hours(10.0, 2.5, 7.5),
                  memory=Hours(4.0, 1.0, 3.0), gpu=Hours(2.0, 0.5, 1.5), alerts={"JobFailed": 2})
    return Report(SINCE, UNTIL, "queue", [evil], total, [Waster("east", "ml", "<script>", "q", 7.5, 3.0, 1.5)])


def test_csv_and_json_read_back_equal_the_rows() -> None:
    report = sample()
    parsed = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert [list(r) for r in parsed] == [list(COLUMNS)] * 2
    assert parsed[0]["group"] == "<b>x</b>|y" and float(parsed[0]["cpu_core_hours_wasted"]) == 7.5
    assert parsed[0]["run_seconds_p50"] == ""
    data = json.loads(render(report, "json"))
    assert data["groups"] == rows(report)[:1] and data["total"] == rows(report)[1]
    assert data["top_wasters"][0]["name"] == "<script>" and data["alerts"] == {"<b>x</b>|y": {"JobFailed": 2}}


def test_table_markdown_and_html_show_every_row_escaped() -> None:
    report = sample()
    table = render(report, "table")
    assert "<b>x</b>|y" in table and "7.50" in table and "ml/<script>" in table
    md = render(report, "md")
    assert "<b>x</b>\\|y" in md and md.count("\n| ") >= 4
    page = render(report, "html")
    assert "<b>x" not in page and "&lt;b&gt;x&lt;/b&gt;|y" in page and "<script>" not in page
    assert page.startswith("<!DOCTYPE html>") and "<td>7.50</td>" in page and "<td>JobFailed</td>" in page


def test_runs_without_a_queue_show_as_a_dash() -> None:
    report = sample()
    report.groups.append(Group(name=""))
    assert render(report, "table").splitlines()[4].startswith("-  ")
    assert "<tr><td>-</td>" in render(report, "html") and "\n| - |" in render(report, "md")
    assert json.loads(render(report, "json"))["groups"][1]["group"] == ""
