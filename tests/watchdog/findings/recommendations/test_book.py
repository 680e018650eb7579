from __future__ import annotations

import csv
import io
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.orm import Session

from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.watchdog.findings.recommendations.book import (
    ContainerSpec,
    HistogramBook,
    Recommendation,
    compute_recommendations,
)
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.state.db.models import WorkloadHistogram
from volcano_monitor.watchdog.state.histogram import RATIO

GiB, MiB = 2**30, 2**20
DAY = 86400.0
T0 = datetime(2024, 5, 1, tzinfo=UTC)
TS0 = T0.timestamp()
SETTINGS = Recommendations()
KEY = ("team-a", "train", "worker", "main")


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(TS0 + seconds, UTC)


def rec(book: HistogramBook, seconds: float, key: tuple[str, str, str, str] = KEY) -> Recommendation:
    result = book.recommendation(*key, now=at(seconds))
    assert result is not None
    return result


def feed(book: HistogramBook, days: float, cpu: float | None = None, memory: float = 500 * MiB, step: float = 60,
         start: float = 0.0, seed: int = 1, count: int = 1) -> float:
    """Samples every `step` seconds for `days` from `start`; CPU uniform 0.5..1.5 unless fixed."""
    rng = random.Random(seed)
    t = start
    while t < start + days * DAY:
        book.add_usage(*KEY, TS0 + t, rng.uniform(0.5, 1.5) if cpu is None else cpu, memory, count=count)
        t += step
    return t


def test_cpu_uniform_for_three_days_targets_p90_plus_margin() -> None:
    book = HistogramBook(SETTINGS)
    end = feed(book, 3)
    r = rec(book, end)
    assert 1.4 * 0.98 * 1.15 <= r.cpu_target_cores <= (1.4 * 1.02 * RATIO + 0.01) * 1.15 + 0.001
    assert 1.0 * 0.97 * 1.15 <= r.cpu_lower_cores <= 1.0 * 1.03 * RATIO * 1.15
    # upper: p95 x margin x (1 + 1/3 days)
    assert 1.45 * 0.98 * 1.15 * (4 / 3) <= r.cpu_upper_cores <= 1.45 * 1.02 * RATIO * 1.15 * (4 / 3) + 0.02
    assert r.samples == 3 * 1440 and r.confidence == pytest.approx(3 / 7, abs=0.01)
    assert r.first_sample_at == T0 and r.last_sample_at == at(end - 60) and not r.oom_bumped


def daily_peaks(book: HistogramBook, peaks: list[float], seed: int = 5) -> None:
    """Each day: a sample every 10 minutes around 0.5 GiB, and that day's peak once, at a random time."""
    rng = random.Random(seed)
    for day, peak in enumerate(peaks):
        peak_at = rng.randrange(144)
        for i in range(144):
            memory = peak if i == peak_at else rng.uniform(0.4, 0.6) * GiB
            book.add_usage(*KEY, TS0 + day * DAY + i * 600, 1.0, memory)


@pytest.mark.parametrize("peaks", [[1 * GiB, 2 * GiB, 3 * GiB], [3 * GiB, 2 * GiB, 1 * GiB]])
def test_memory_targets_p90_of_daily_peaks(peaks: list[float]) -> None:
    book = HistogramBook(SETTINGS)
    daily_peaks(book, peaks)
    r = rec(book, 3 * DAY)
    # Only peaks count (the ~430 samples a day around 0.5 GiB do not): peak weights 1, 2, 4 (newest).
    # p90 is 3 GiB either way; the lower bound (p50) follows the newest day's peak.
    assert 3 * GiB * 1.15 <= r.memory_target_bytes <= (3 * GiB * RATIO + 10 * MiB) * 1.15 + 1
    newest = peaks[-1]
    assert newest * 1.15 * 0.99 <= r.memory_lower_bytes <= (newest * RATIO + 10 * MiB) * 1.15


def test_a_higher_sample_replaces_the_open_intervals_peak() -> None:
    book = HistogramBook(SETTINGS)
    for i, memory in enumerate((1 * GiB, 2 * GiB, 1.5 * GiB, 4 * GiB, 1 * GiB)):
        book.add_usage(*KEY, TS0 + 3600 * i, 1.0, memory)
    r = rec(book, 5 * 3600)
    # one sample (4 GiB), not five: even the lower bound (p50) is at 4 GiB
    assert r.memory_lower_bytes >= 4 * GiB and r.memory_target_bytes <= (4 * GiB * RATIO + 10 * MiB) * 1.15 + 1
    book.add_usage(*KEY, TS0 - DAY, 1.0, 8 * GiB)  # an older, closed interval: skipped, counted
    assert book.skipped["memory_out_of_order"] == 1
    assert rec(book, 5 * 3600).memory_target_bytes == r.memory_target_bytes


def test_older_usage_fades_a_week_after_a_drop() -> None:
    def after_drop(settings: Recommendations) -> Recommendation:
        book = HistogramBook(settings)
        end = feed(book, 7, cpu=4.0, memory=4 * GiB, step=600, count=10)
        end = feed(book, 7, cpu=1.0, memory=1 * GiB, step=600, start=end, count=10)
        return rec(book, end)

    r = after_drop(SETTINGS)
    assert 1.15 <= r.cpu_target_cores <= (RATIO + 0.01) * 1.15 + 0.001
    assert 1 * GiB * 1.15 <= r.memory_target_bytes <= (GiB * RATIO + 10 * MiB) * 1.15 + 1
    # the same history without decay would still recommend the old size: the test can tell them apart
    r = after_drop(Recommendations(half_life_hours=1e6))
    assert r.cpu_target_cores > 4 * 1.15 and r.memory_target_bytes > 4 * GiB * 1.15


def test_oom_bumps_memory_by_ratio_for_large_peaks() -> None:
    book = HistogramBook(SETTINGS)
    end = feed(book, 3, cpu=1.0, memory=1 * GiB, step=600)
    before = rec(book, end).memory_target_bytes
    assert before < 1.2 * GiB * 1.15
    book.add_oom(*KEY, TS0 + end, 1 * GiB)
    r = rec(book, end + 60)
    assert r.oom_bumped and r.memory_target_bytes >= 1.2 * GiB * 1.15 > before  # the bump, plus the margin
    later = rec(book, end + 2 * DAY)  # an interval later the histogram still carries the bump
    assert not later.oom_bumped and later.memory_target_bytes >= 1.2 * GiB


def test_oom_bumps_small_peaks_by_at_least_100mi() -> None:
    book = HistogramBook(Recommendations(min_memory_bytes=0))
    end = feed(book, 1, cpu=0.1, memory=50 * MiB, step=600)
    book.add_oom(*KEY, TS0 + end, 50 * MiB)
    r = rec(book, end)
    assert r.oom_bumped and r.memory_target_bytes >= 150 * MiB
    fresh = HistogramBook(Recommendations(min_memory_bytes=0))  # an OOM is all we know: still bumped
    fresh.add_oom(*KEY, TS0, 50 * MiB)
    assert rec(fresh, 60).memory_target_bytes >= 150 * MiB


def test_minimums_apply_to_target_and_bounds() -> None:
    book = HistogramBook(SETTINGS)
    end = feed(book, 2, cpu=0.001, memory=1 * MiB, step=600)
    r = rec(book, end)
    assert r.cpu_target_cores == SETTINGS.min_cpu_cores and r.memory_target_bytes == SETTINGS.min_memory_bytes
    assert r.cpu_lower_cores == SETTINGS.min_cpu_cores and r.memory_lower_bytes == SETTINGS.min_memory_bytes
    assert r.cpu_upper_cores >= SETTINGS.min_cpu_cores and r.memory_upper_bytes >= SETTINGS.min_memory_bytes


def test_confidence_grows_with_days_and_the_bounds_narrow() -> None:
    book = HistogramBook(SETTINGS)
    seen = []
    end = 0.0
    for _ in range(10):
        end = feed(book, 1, cpu=1.0, step=60, start=end)
        r = rec(book, end)
        seen.append((r.confidence, r.cpu_upper_cores / r.cpu_target_cores))
    confidences = [c for c, _ in seen]
    assert confidences == sorted(confidences) and confidences[0] == pytest.approx(1 / 7, abs=0.01)
    assert confidences[-1] == 1.0
    widths = [w for _, w in seen]
    assert widths == sorted(widths, reverse=True) and widths[0] > 1.9 and widths[-1] < 1.15
    sparse = HistogramBook(SETTINGS)  # three days but a sample every 6 hours: little to go on
    end = feed(sparse, 3, cpu=1.0, step=6 * 3600)
    assert rec(sparse, end).confidence < 0.01


def test_bad_samples_are_counted_and_skipped() -> None:
    book = HistogramBook(SETTINGS)
    book.add_usage(*KEY, TS0, float("nan"), float("inf"))
    book.add_usage(*KEY, float("nan"), 1.0, GiB)
    book.add_usage(*KEY, 1e20, 1.0, GiB)
    book.add_usage("ns", "x" * 300, "t", "c", TS0, 1.0, GiB)
    book.add_usage("", "w", "t", "c", TS0, 1.0, GiB)
    book.add_usage(*KEY, TS0, "1", 10**400)  # type: ignore[arg-type]
    book.add_usage(None, ["w"], "t", "c", TS0, 1.0, GiB)  # type: ignore[arg-type]
    book.add_oom(*KEY, TS0, -5)
    book.add_oom(*KEY, 10**400, GiB)
    assert book.recommendation(*KEY, now=T0) is None
    assert book.skipped == {"bad_cpu": 2, "bad_memory": 2, "bad_timestamp": 3, "bad_key": 3, "bad_oom_memory": 1}
    book.add_usage(*KEY, TS0, -1.0, 1e300)  # negative CPU skipped, huge memory lands in the last bucket
    r = rec(book, 0)
    assert r.cpu_target_cores == SETTINGS.min_cpu_cores and r.memory_target_bytes > 2**40 and r.samples == 1


def flush(engine: Engine, book: HistogramBook, seconds: float = 0.0) -> int:
    with Session(engine) as session, session.begin():
        return book.flush(session, at(seconds))


def test_flush_and_load_round_trip(engine: Engine) -> None:
    book = HistogramBook(SETTINGS)
    end = feed(book, 2, step=300)
    book.add_oom(*KEY, TS0 + end, 3 * GiB)
    other = ("ünïcode-ns", "etl", "", "sidecar")
    book.add_usage(*other, TS0, 0.2, 300 * MiB)
    assert flush(engine, book) == 2 and flush(engine, book) == 0
    loaded = HistogramBook(SETTINGS)
    with Session(engine) as session:
        loaded.load(session)
    assert len(loaded) == 2
    assert rec(loaded, end) == rec(book, end) and rec(loaded, 0, other) == rec(book, 0, other)
    with Session(engine) as session:
        stored = compute_recommendations(session, SETTINGS, at(end))
        only = compute_recommendations(session, SETTINGS, at(end), namespace="team-a")
    assert stored == [rec(book, end), rec(book, end, other)]  # sorted by key
    assert only == [rec(book, end)] and only[0].oom_bumped

    book.add_usage(*other, TS0 + 60, 0.3, 300 * MiB)  # only the changed key is written, as an update
    assert flush(engine, book, 60) == 1
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(WorkloadHistogram)) == 2
        row = session.execute(select(WorkloadHistogram).filter_by(namespace=other[0])).scalar_one()
        assert row.samples == 2 and row.updated_at == at(60) and row.last_sample_at == at(60)


def test_the_open_intervals_peak_survives_a_restart(engine: Engine) -> None:
    book = HistogramBook(SETTINGS)
    book.add_usage(*KEY, TS0, 1.0, 2 * GiB)
    flush(engine, book)
    restarted = HistogramBook(SETTINGS)
    with Session(engine) as session:
        restarted.load(session)
    restarted.add_usage(*KEY, TS0 + 3600, 1.0, 3 * GiB)  # same interval: replaces the 2 GiB peak
    assert rec(restarted, 3600).memory_lower_bytes >= 3 * GiB


def test_a_rolled_back_flush_is_written_again(engine: Engine) -> None:
    book = HistogramBook(SETTINGS)
    book.add_usage(*KEY, TS0, 1.0, GiB)
    with Session(engine) as session:
        assert book.flush(session, T0) == 1
        session.rollback()
    book.flush_failed()
    assert book.dirty_count() == 1 and flush(engine, book) == 1
    with Session(engine) as session:
        assert len(compute_recommendations(session, SETTINGS, T0)) == 1


def test_idle_workloads_are_forgotten_after_retention(engine: Engine) -> None:
    """Months of uptime: histograms of workloads that stopped running go (issue 12, no leaks)."""
    book = HistogramBook(SETTINGS)
    retired, active = ("team-a", "retired", "worker", "main"), KEY
    book.add_usage(*retired, TS0, 1.0, GiB)
    book.add_usage(*active, TS0, 1.0, GiB)
    flush(engine, book)
    book.add_usage(*active, TS0 + 40 * DAY, 1.0, GiB)
    now = T0 + timedelta(days=40)
    flush(engine, book, 40 * DAY)
    with Session(engine) as session, session.begin():
        assert book.forget_idle(session, now - timedelta(days=30)) == 1
    assert book.recommendation(*retired, now=now) is None
    assert book.recommendation(*active, now=now) is not None
    with Session(engine) as session:
        assert [r.workload for r in compute_recommendations(session, SETTINGS, now)] == [active[1]]
    reloaded = HistogramBook(SETTINGS)
    with Session(engine) as session:
        reloaded.load(session)
    assert len(reloaded) == 1


def test_the_containers_spec_is_stored_kept_and_replaced(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    """A spec goes out with the histograms and comes back with them; a book that never saw the pods (a
    back-fill, a replica just started) keeps the stored one; a changed spec replaces it; a malformed
    stored spec is ignored (counted, logged), the recommendation then has no limit."""
    book = HistogramBook(SETTINGS)
    book.note_spec(*KEY, ContainerSpec("q", {"memory": 2 * GiB}, {"memory": 4 * GiB}))
    feed(book, 8, step=600)
    assert flush(engine, book) == 1

    def stored() -> Recommendation:
        with Session(engine) as session:
            (found,) = compute_recommendations(session, SETTINGS, at(8 * DAY))
        return found

    assert stored().current_limits == {"memory": 4 * GiB} and stored().memory_limit_bytes == pytest.approx(
        2 * stored().memory_target_bytes, abs=1)
    blind = HistogramBook(SETTINGS)  # no spec noted: its flush must not erase the stored one
    blind.add_usage(*KEY, TS0 + 8 * DAY, 1.0, GiB)
    assert flush(engine, blind, 8 * DAY) == 1 and stored().current_limits == {"memory": 4 * GiB}
    book.note_spec(*KEY, ContainerSpec("q", {"memory": 2 * GiB}, {}))  # the limit was dropped
    assert book.dirty_count() == 1 and flush(engine, book, 8 * DAY) == 1
    assert stored().current_limits == {} and stored().memory_limit_bytes is None
    loaded = HistogramBook(SETTINGS)
    with Session(engine) as session:
        loaded.load(session)
    assert loaded.spec(KEY) == ContainerSpec("q", {"memory": 2 * GiB}, {})
    with Session(engine) as session, session.begin():
        session.execute(update(WorkloadHistogram).values(spec={"requests": {"memory": "lots"}}))
    garbage = HistogramBook(SETTINGS)
    with Session(engine) as session:
        garbage.load(session)
    assert garbage.skipped["bad_stored_spec"] == 1 and "malformed container spec" in caplog.text
    assert stored().current_limits is None and stored().memory_limit_bytes is None


def test_garbage_rows_are_skipped_and_counted(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    now = T0
    with Session(engine) as session, session.begin():
        session.add(WorkloadHistogram(namespace="n", workload="w", task="", container="c", cpu={"v": 99},
                                      memory={"i": "junk"}, samples=5, updated_at=now))
        session.add(WorkloadHistogram(namespace="n", workload="w2", task="", container="c", cpu=["x"],
                                      memory={}, samples=-1, updated_at=now))
    if engine.dialect.name == "sqlite":  # SQLite stores any text: not even JSON
        with engine.begin() as connection:
            connection.execute(text("UPDATE workload_histograms SET memory = '{not json' WHERE workload = 'w2'"))
    book = HistogramBook(SETTINGS)
    with Session(engine) as session:
        book.load(session)
        assert compute_recommendations(session, SETTINGS, now) == []
    assert book.skipped["bad_stored_histogram"] == 4 and "malformed" in caplog.text
    book.add_usage("n", "w", "", "c", TS0, 0.5, GiB)  # the workload relearns
    assert book.recommendation("n", "w", "", "c", now=T0) is not None and flush(engine, book) == 1


def recommend_cli(database_url: str, *args: str) -> str:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
                             "--database-url", database_url,
                             "recommend", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_recommend_command_prints_what_the_database_holds(database_url: str) -> None:
    """`volcano-watchdog recommend` as a user runs it, on both databases: table, csv, json, yaml, namespace
    filter. The must-show pair: an hour of history gets no patch (and a ratio-kept limit in the numbers,
    never the upper bound), a week gets a patch whose limit/request ratio is the container's own."""
    from volcano_monitor.watchdog.state.db.engine import make_engine, migrate

    engine = make_engine(database_url)
    migrate(engine)
    book = HistogramBook(Recommendations())
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    # train: request 2 cores / 4Gi, limits 3 cores / 6Gi (ratio 1.5); daily: 6Gi memory limit for 2Gi (3x)
    book.note_spec("ml", "train", "worker", "main", ContainerSpec("q", {"cpu": 2.0, "memory": 4 * GiB},
                                                                 {"cpu": 3.0, "memory": 6 * GiB}))
    book.note_spec("etl", "daily", "", "main", ContainerSpec("q", {"memory": 2 * GiB}, {"memory": 6 * GiB}))
    for minute in range(7 * 1440):
        ts = start + minute * 60
        book.add_usage("ml", "train", "worker", "main", ts, 1.0 + (minute % 10) / 10, 2 * 2**30)
        if minute >= 7 * 1440 - 60:  # the last hour only
            book.add_usage("etl", "daily", "", "main", ts, 0.2, 2**29)
    with Session(engine) as session, session.begin():
        book.flush(session, datetime.fromtimestamp(start + 7 * 86400, UTC))
    engine.dispose()

    rows = {r["workload"]: r for r in json.loads(recommend_cli(database_url, "-o", "json"))}
    assert set(rows) == {"train", "daily"}
    train, daily = rows["train"], rows["daily"]
    assert 1.9 * 1.15 * 0.95 <= train["cpu_target_cores"] <= 2.0 * 1.15 * 1.06 and train["status"] == "ok"
    assert train["cpu_limit_cores"] == pytest.approx(train["cpu_target_cores"] * 1.5, abs=0.001)
    assert train["memory_limit_bytes"] == pytest.approx(train["memory_target_bytes"] * 1.5, abs=1)
    assert daily["status"] == "not_enough_history" and daily["confidence"] < 0.01
    assert daily["message"] == "not enough history (60 samples over 59m)"
    assert daily["memory_limit_bytes"] == pytest.approx(daily["memory_target_bytes"] * 3, abs=1)
    assert daily["memory_upper_bytes"] > 10 * daily["memory_target_bytes"] and daily["cpu_limit_cores"] is None

    docs = list(yaml.safe_load_all(recommend_cli(database_url, "-o", "yaml")))
    assert [d["workload"] for d in docs] == ["daily", "train"]
    assert "patch" not in docs[0] and docs[0]["not_patched"] == {"/main": daily["message"]}
    container = docs[1]["patch"]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert docs[1]["patch"]["spec"]["tasks"][0]["name"] == "worker" and container["name"] == "main"
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert parse_quantity(limits["cpu"]) / parse_quantity(requests["cpu"]) == pytest.approx(1.5, rel=0.002)
    assert parse_quantity(limits["memory"]) / parse_quantity(requests["memory"]) == pytest.approx(1.5, rel=0.002)

    table = recommend_cli(database_url, "--namespace", "ml")
    assert "train" in table and "daily" not in table
    csv_rows = list(csv.DictReader(io.StringIO(recommend_cli(database_url, "-o", "csv", "--namespace", "etl"))))
    assert len(csv_rows) == 1 and csv_rows[0]["memory"] == "-" and "not enough history" in csv_rows[0]["note"]


def test_recommend_creates_no_database_and_names_the_one_it_read(tmp_path: Path, database_url: str) -> None:
    """A read-only command: a mistyped SQLite path is an error (no file appears), an unmigrated
    database is named with the way out, and the output says which database it read."""
    import subprocess
    import sys

    from volcano_monitor.watchdog.state.db.engine import make_engine, migrate

    def run(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli", "--database-url", url,
                               "recommend"],
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
    assert "recommendations of cluster default from" in done.stderr and "alembic" not in done.stderr
    assert not missing.exists()
