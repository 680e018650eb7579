"""The report against the ledger: rows inserted by the test, the expected numbers computed here from
those rows (not through the report's code), on SQLite and PostgreSQL, through `compute_report` and
through `volcano-watchdog report` (read-only: it never creates or migrates a database)."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from volcano_monitor.core.cron import parse_cron
from volcano_monitor.watchdog.runtime.cli import main
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.fleet import beat
from volcano_monitor.watchdog.views.report.compute import compute_report, parse_moment, percentile

# A Friday noon in the past (the digest tests schedule on it; messages are due by the real clock).
_FRIDAY = parse_cron("0 12 * * fri").previous(datetime.now(UTC) - timedelta(days=8))
assert _FRIDAY is not None
UNTIL = _FRIDAY
SINCE = UNTIL - timedelta(days=7)
PHASES = ("Completed", "Failed", "Aborted", "Terminated", "Running", "Pending")


def make_rows(seed: int = 7, count: int = 80) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        created = UNTIL - timedelta(hours=rng.uniform(-24, 24 * 12))
        started = created + timedelta(seconds=rng.uniform(0, 7200)) if rng.random() < 0.9 else None
        ended = started + timedelta(seconds=rng.uniform(60, 86400)) if started and rng.random() < 0.75 else None
        deleted = rng.random() < 0.2
        req = {r: rng.uniform(0, 1e6) * (rng.random() < 0.8) for r in ("cpu", "mem", "gpu")}
        rows.append({
            "uid": f"uid-{i}", "namespace": rng.choice(("ml", "etl")), "name": f"job-{i}", "workload": f"job-{i}",
            "queue": rng.choice(("research", "prod", "")), "created_at": created, "started_at": started,
            "finished_at": None if deleted else ended, "deleted_at": ended if deleted else None,
            "object_deleted": deleted, "phase": rng.choice(PHASES),
            "cpu_core_seconds_requested": req["cpu"], "cpu_core_seconds_used": req["cpu"] * rng.uniform(0, 1.3),
            "memory_byte_seconds_requested": req["mem"] * 2**30,
            "memory_byte_seconds_used": req["mem"] * 2**30 * rng.uniform(0, 1.1),
            "gpu_seconds_requested": req["gpu"], "gpu_seconds_used": req["gpu"] * rng.uniform(0, 1),
            "updated_at": UNTIL,
            **{f"cost_{r}_{b}": rng.uniform(0, 50) * (req[k] > 0)
               for r, k in (("cpu", "cpu"), ("memory", "mem"), ("gpu", "gpu")) for b in ("requested", "used")},
        })
    for row in rows[::9]:  # runs no usage sample saw: billed from their start, end and requests
        row.update({f"{c}_{b}": 0.0 for c in ("cpu_core_seconds", "memory_byte_seconds", "gpu_seconds", "cost_cpu",
                                               "cost_memory", "cost_gpu") for b in ("requested", "used")},
                   requested_cpu_cores=4.0, requested_memory_bytes=8 * 2**30, requested_gpus=1.0)
    return rows


PRICES = {"cpu": 0.04, "memory": 0.005, "nvidia.com/gpu": 2.5}


def row_cost(row: dict[str, Any]) -> dict[str, float]:
    """A run's cost on the three bases from the row as inserted (docs/cost.md's definition)."""
    used = {r: row[f"cost_{r}_used"] for r in ("cpu", "memory", "gpu")}
    requested = {r: row[f"cost_{r}_requested"] for r in ("cpu", "memory", "gpu")}
    if not any(row[f"{c}_{b}"] for c in ("cpu_core_seconds", "memory_byte_seconds", "gpu_seconds")
               for b in ("requested", "used")):
        end = row["finished_at"] or row["deleted_at"]
        held = (end - row["started_at"]).total_seconds() if end and row["started_at"] else 0.0
        requested = {"cpu": row.get("requested_cpu_cores", 0) * held / 3600 * PRICES["cpu"],
                     "memory": row.get("requested_memory_bytes", 0) / 2**30 * held / 3600 * PRICES["memory"],
                     "gpu": row.get("requested_gpus", 0) * held / 3600 * PRICES["nvidia.com/gpu"]}
    return {"requested": sum(requested.values()), "used": sum(used.values()),
            "idle": sum(max(0.0, requested[r] - used[r]) for r in requested)}


def make_alerts(seed: int = 3, count: int = 30) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"fingerprint": f"fp{i}", "kind": rng.choice(("JobFailed", "JobIdle")), "severity": "warning",
             "state": "resolved", "namespace": rng.choice(("ml", "etl")), "queue": rng.choice(("research", "prod")),
             "details": {}, "started_at": UNTIL - timedelta(days=9), "last_seen_at": UNTIL, "updated_at": UNTIL,
             "fired_at": UNTIL - timedelta(hours=rng.uniform(-10, 24 * 9)) if rng.random() < 0.9 else None,
             "resolved_at": UNTIL} for i in range(count)]


def insert(engine: Engine, rows: list[dict[str, Any]], alerts: list[dict[str, Any]]) -> None:
    with Session(engine) as session, session.begin():
        session.add_all(JobRun(**row) for row in rows)
        session.add_all(Alert(**alert) for alert in alerts)


def expected(rows: list[dict[str, Any]], alerts: list[dict[str, Any]], by: str) -> dict[str, dict[str, Any]]:
    """Per group and "(all)": the numbers the report must show, from the rows as inserted."""
    out: dict[str, dict[str, Any]] = {}

    def blank() -> dict[str, Any]:
        return {"runs": 0, "failed": 0, "succeeded": 0, "running": 0, "waits": [], "durations": [], "alerts": 0,
                **{f"{r}_{k}": 0.0 for r in ("cpu", "mem", "gpu") for k in ("req", "used", "waste")},
                **{f"cost_{b}": 0.0 for b in ("requested", "used", "idle")}}

    for row in rows:
        end = row["finished_at"] or row["deleted_at"]
        ref = row["started_at"] or row["created_at"]
        if not ((end is not None and SINCE <= end < UNTIL) or (end is None and ref is not None and ref < UNTIL)):
            continue
        for key in (row[by], "(all)"):
            e = out.setdefault(key, blank())
            e["runs"] += 1
            e["failed"] += row["phase"] in ("Failed", "Aborted", "Terminated")
            e["succeeded"] += row["phase"] == "Completed"
            e["running"] += end is None
            for basis, amount in row_cost(row).items():
                e[f"cost_{basis}"] += amount
            for short, column, unit in (("cpu", "cpu_core_seconds", 3600), ("mem", "memory_byte_seconds", 3600 * 2**30),
                                        ("gpu", "gpu_seconds", 3600)):
                req, used = row[f"{column}_requested"] / unit, row[f"{column}_used"] / unit
                e[f"{short}_req"] += req
                e[f"{short}_used"] += used
                e[f"{short}_waste"] += max(0.0, req - used)
            if row["started_at"]:
                e["waits"].append((row["started_at"] - row["created_at"]).total_seconds())
                if end:
                    e["durations"].append((end - row["started_at"]).total_seconds())
    for alert in alerts:
        if alert["fired_at"] is not None and SINCE <= alert["fired_at"] < UNTIL:
            for key in (alert[by], "(all)"):
                out.setdefault(key, blank())["alerts"] += 1
    return out


def quantile(values: list[float], p: int) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def check(found: dict[str, Any], want: dict[str, Any]) -> None:
    for key in ("runs", "failed", "succeeded", "running"):
        assert found[key] == want[key], key
    assert found["alerts_fired"] == want["alerts"]
    for basis in ("requested", "used", "idle"):
        assert found[f"cost_{basis}"] == pytest.approx(want[f"cost_{basis}"], rel=1e-9, abs=1e-9), basis
    assert found["currency"] == "EUR"
    for short, prefix in (("cpu", "cpu_core_hours"), ("mem", "memory_gib_hours"), ("gpu", "gpu_hours")):
        for k, name in (("req", "requested"), ("used", "used"), ("waste", "wasted")):
            assert found[f"{prefix}_{name}"] == pytest.approx(want[f"{short}_{k}"], rel=1e-9, abs=1e-9)
    for p in (50, 90, 99):
        assert found[f"wait_seconds_p{p}"] == pytest.approx(quantile(want["waits"], p), rel=1e-9)
        assert found[f"run_seconds_p{p}"] == pytest.approx(quantile(want["durations"], p), rel=1e-9)


@pytest.mark.parametrize("by", ["queue", "namespace"])
def test_report_matches_the_ledger(engine: Engine, database_url: str, by: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    rows, alerts = make_rows(), make_alerts()
    insert(engine, rows, alerts)
    want = expected(rows, alerts, by)
    assert len(want) >= 3 and want["(all)"]["runs"] >= 20 and want["(all)"]["failed"] > 0  # the data covers cases
    assert want["(all)"]["cost_requested"] > want["(all)"]["cost_idle"] > 0
    unsampled = [r for r in rows[::9] if r["started_at"] and (r["finished_at"] or r["deleted_at"])]
    assert any(row_cost(r)["requested"] > 0 for r in unsampled)  # the data bills runs no sample saw
    with Session(engine) as session:
        report = compute_report(session, SINCE, UNTIL, by)  # type: ignore[arg-type]
    assert {g.name for g in report.groups} == set(want) - {"(all)"}
    config = tmp_path / "watchdog.yaml"
    config.write_text(json.dumps({"costs": {"currency": "EUR", "prices": PRICES}}))
    code = main(["--config", str(config), "--database-url", database_url, "report", "--since", SINCE.isoformat(),
                 "--until", UNTIL.isoformat(), "--by", by, "-o", "json"])
    out = capsys.readouterr()
    assert code == 0 and "report of cluster default from" in out.err
    printed = json.loads(out.out)
    assert printed["currency"] == "EUR"
    for group in printed["groups"]:
        check(group, want[group["group"]])
    check(printed["total"], want["(all)"])
    # top wasters: ordered by unused GPU-, then core-hours, each the run's own request minus use
    wasters = printed["top_wasters"]
    assert len(wasters) == 10
    keys = [(w["gpu_hours"], w["cpu_core_hours"]) for w in wasters]
    assert keys == sorted(keys, reverse=True)
    by_name = {r["name"]: r for r in rows}
    for w in wasters:
        row = by_name[w["name"]]
        assert w["gpu_hours"] == pytest.approx(max(0, row["gpu_seconds_requested"] - row["gpu_seconds_used"]) / 3600)


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0, 0.0, 20.0], 90) == pytest.approx(18.0)


def test_parse_moment() -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    assert parse_moment("7d", now) == datetime(2026, 1, 3, tzinfo=UTC)
    assert parse_moment("1h30m", now) == now - timedelta(minutes=90)
    assert parse_moment("2026-01-02T03:04:05Z", now) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_moment("2026-01-02", now) == datetime(2026, 1, 2, tzinfo=UTC)
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_moment("last week", now)


def test_report_creates_no_database_and_names_the_one_it_read(tmp_path: Path, database_url: str) -> None:
    def run(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
                               "--database-url", url, "report",
                               "-o", "csv"],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    missing = tmp_path / "typo.db"
    done = run(f"sqlite:///{missing}")
    assert done.returncode == 1 and f"no database at {missing}" in done.stderr and not missing.exists()
    done = run(database_url)  # exists (PostgreSQL) or not (SQLite), but holds no schema
    assert done.returncode == 1 and ("volcano-watchdog migrate" in done.stderr or "no database" in done.stderr)
    engine = make_engine(database_url)
    migrate(engine)
    engine.dispose()
    done = run(database_url)
    assert done.returncode == 0, done.stderr
    assert "report of cluster default from" in done.stderr and "alembic" not in done.stderr
    assert done.stdout.splitlines()[0].startswith("group,runs,")
    assert not missing.exists()


def test_bad_period_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", "sqlite:///nowhere.db", "report", "--since", "yesterday"]) == 2
    assert "ISO 8601" in capsys.readouterr().err
    assert main(["report", "--since", "2026-01-02", "--until", "2026-01-01"]) == 2


def test_report_command_reads_the_named_clusters_runs(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`report` reads as `cluster.name` (else the kubeconfig's context), like the watchdog that wrote the rows:
    a report made as another cluster than the writer's would come out empty."""
    east = make_engine(database_url, cluster="east")
    migrate(east)
    rows = make_rows(count=12)
    insert(east, rows, [])
    east.dispose()
    totals = {}
    for name in ("east", "west"):
        code = main(["--cluster-name", name, "--database-url", database_url, "report", "--since", SINCE.isoformat(),
                     "--until", UNTIL.isoformat(), "-o", "json"])
        assert code == 0
        totals[name] = json.loads(capsys.readouterr().out)["total"]["runs"]
    assert totals == {"east": expected(rows, [], "queue")["(all)"]["runs"], "west": 0}
    assert totals["east"] > 0
    east = make_engine(database_url, cluster="east")
    with Session(east) as session, session.begin():
        beat(session, "east", "wd-east", UNTIL)  # east's watchdog has written: the database is a fleet's
    east.dispose()
    period = ["--since", SINCE.isoformat(), "--until", UNTIL.isoformat(), "-o", "json"]
    assert main(["--database-url", database_url, "report", *period]) == 2  # a guessed name would read nothing
    refused = capsys.readouterr()
    assert refused.out == "" and "holds clusters east; set cluster.name" in refused.err
    assert len(refused.err.strip().splitlines()) == 1
    assert main(["--database-url", database_url, "report", "--by", "cluster", *period]) == 0  # reads the fleet
    fleet = capsys.readouterr()
    assert json.loads(fleet.out)["total"]["runs"] == totals["east"] and "report of every cluster" in fleet.err
