"""The alert state machine on SQLite and PostgreSQL: pending -> firing -> resolved with a controlled
clock, once-per-run kinds, and restarts (a new AlertBook on the same database replaying the same
signals creates no second row and no second firing transition)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.watchdog.findings.test_detectors import job, oom, pod
from volcano_monitor.core.model import parse_job, parse_pod
from volcano_monitor.watchdog.findings.detectors import FailureDetector, Signal, WasteDetector, fingerprint
from volcano_monitor.watchdog.findings.detectors.settings import Detectors
from volcano_monitor.watchdog.state import alerts as alerts_module
from volcano_monitor.watchdog.state.alerts import AlertBook, Transition
from volcano_monitor.watchdog.state.db.models import Alert, JobRun

T = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def sig(kind: str = "GangUnschedulable", key: str = "a", active: bool = True, for_seconds: float = 0,
        **kw: Any) -> Signal:
    return Signal(kind=kind, fingerprint=fingerprint(kind, key), active=active, severity=kw.pop("severity", "warning"),
                  namespace="ml", job_name="train", subject=key, summary=kw.pop("summary", f"{kind} {key}"),
                  details=kw.pop("details", {"n": 1}), for_seconds=for_seconds, **kw)


def apply(engine: Engine, book: AlertBook, signals: list[Signal], now: datetime) -> list[tuple[str | None, str]]:
    with Session(engine) as session, session.begin():
        return [(t.old_state, t.new_state) for t in book.apply(signals, session, now)]


def rows(engine: Engine) -> list[Alert]:
    with Session(engine) as session:
        return list(session.scalars(select(Alert).order_by(Alert.id)))


def loaded(engine: Engine) -> AlertBook:
    book = AlertBook()
    with Session(engine) as session:
        book.load(session)
    return book


def test_no_delay_fires_at_once_and_resolves(engine: Engine) -> None:
    book = AlertBook()
    with Session(engine) as session, session.begin():
        (t,) = book.apply([sig("JobFailed", severity="critical")], session, at(0))
    assert isinstance(t, Transition) and (t.kind, t.old_state, t.new_state) == ("JobFailed", None, "firing")
    (row,) = rows(engine)
    assert (row.id, row.state, row.severity, row.fired_at, row.started_at) == (t.alert_id, "firing", "critical",
                                                                               at(0), at(0))
    assert row.details == {"n": 1} and row.summary == "JobFailed a" and row.subject == "a"
    assert book.state(t.fingerprint) == "firing" and book.open_counts() == {("JobFailed", "critical", "firing"): 1}
    assert apply(engine, book, [sig("JobFailed", active=False)], at(5)) == [("firing", "resolved")]
    (row,) = rows(engine)
    assert (row.state, row.resolved_at, row.fired_at) == ("resolved", at(5), at(0))
    assert book.state(t.fingerprint) is None
    # An inactive signal for something never opened is a no-op.
    assert apply(engine, book, [sig("JobFailed", key="zzz", active=False)], at(6)) == []


def test_pending_fires_after_for_seconds_with_a_controlled_clock(engine: Engine) -> None:
    book = AlertBook()
    s = sig(for_seconds=600)
    assert apply(engine, book, [s], at(0)) == [(None, "pending")]
    assert apply(engine, book, [s], at(599)) == []
    assert rows(engine)[0].state == "pending"
    assert apply(engine, book, [s], at(600)) == [("pending", "firing")]
    assert apply(engine, book, [s], at(700)) == []
    (row,) = rows(engine)
    assert (row.state, row.started_at, row.fired_at) == ("firing", at(0), at(600))


def test_pending_that_never_fired_is_deleted_quietly(engine: Engine) -> None:
    book = AlertBook()
    assert apply(engine, book, [sig(for_seconds=600), sig(key="b", for_seconds=600)], at(0)) == [
        (None, "pending"), (None, "pending")]
    assert apply(engine, book, [sig(active=False)], at(10)) == []  # no transition: nobody heard of it
    with Session(engine) as session, session.begin():
        assert book.resolve_missing({"GangUnschedulable"}, set(), session, at(20)) == []
    assert rows(engine) == [] and book.open_counts() == {}


def test_since_counts_from_when_the_condition_began(engine: Engine) -> None:
    book = AlertBook()
    assert apply(engine, book, [sig(for_seconds=600, since=at(-700))], at(0)) == [(None, "firing")]
    assert apply(engine, book, [sig(key="b", for_seconds=600, since=at(-100))], at(0)) == [(None, "pending")]
    assert apply(engine, book, [sig(key="b", for_seconds=600, since=at(-100))], at(500)) == [("pending", "firing")]
    assert {r.subject: r.started_at for r in rows(engine)} == {"a": at(-700), "b": at(-100)}
    # A `since` in the future (clock skew) is ignored.
    assert apply(engine, book, [sig(key="c", since=at(99))], at(0)) == [(None, "firing")]
    assert rows(engine)[-1].started_at == at(0)


def test_a_condition_that_comes_back_is_a_new_episode(engine: Engine) -> None:
    book = AlertBook()
    apply(engine, book, [sig()], at(0))
    apply(engine, book, [sig(active=False)], at(10))
    assert apply(engine, book, [sig()], at(20)) == [(None, "firing")]
    assert [(r.fingerprint, r.state) for r in rows(engine)] == [(sig().fingerprint, "resolved"),
                                                                 (sig().fingerprint, "firing")]


def test_once_per_run_kinds_never_fire_twice_even_after_a_restart(engine: Engine) -> None:
    book = AlertBook()
    for kind in ("JobFailed", "PodOOMKilled", "OverRequested"):
        assert apply(engine, book, [sig(kind)], at(0)) == [(None, "firing")]
        assert apply(engine, book, [sig(kind, active=False)], at(1)) == [("firing", "resolved")]
        assert apply(engine, book, [sig(kind)], at(2)) == []
        assert apply(engine, loaded(engine), [sig(kind)], at(3)) == []  # a new process, same database
    assert [r.state for r in rows(engine)] == ["resolved"] * 3


def test_a_once_per_run_fingerprint_forgotten_by_the_cache_still_never_fires_twice(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # The remembered fingerprints are a bounded cache in front of the database: past the cap the oldest
    # are forgotten (memory stays flat over months), and the database still answers for them.
    monkeypatch.setattr(alerts_module, "KNOWN_MAX", 3)
    book = AlertBook()
    keys = [f"run-{i}" for i in range(5)]
    for i, key in enumerate(keys):
        assert apply(engine, book, [sig("JobFailed", key)], at(i)) == [(None, "firing")]
        assert apply(engine, book, [sig("JobFailed", key, active=False)], at(i + 0.5)) == [("firing", "resolved")]
    assert list(book._known) == [sig("JobFailed", k).fingerprint for k in keys[-3:]]
    assert apply(engine, book, [sig("JobFailed", k) for k in keys], at(10)) == []
    assert len(book._known) == 3 and [r.state for r in rows(engine)] == ["resolved"] * 5


def test_restart_replaying_the_same_signals_is_idempotent(engine: Engine) -> None:
    book = AlertBook()
    firing, pending = sig("JobFailed"), sig("PartialGang", for_seconds=600)
    assert apply(engine, book, [firing, pending], at(0)) == [(None, "firing"), (None, "pending")]
    # kill -9; a new process loads the open alerts and replays what the informers relist.
    book = loaded(engine)
    assert book.state(firing.fingerprint) == "firing" and book.state(pending.fingerprint) == "pending"
    assert apply(engine, book, [firing, pending, firing], at(300)) == []
    assert apply(engine, book, [pending], at(600)) == [("pending", "firing")]  # the clock kept running
    assert len(rows(engine)) == 2
    book = loaded(engine)
    assert apply(engine, book, [firing, pending], at(900)) == []
    assert [(r.kind, r.state, r.fired_at) for r in rows(engine)] == [("JobFailed", "firing", at(0)),
                                                                      ("PartialGang", "firing", at(600))]


def test_apply_round_resolves_only_its_own_kinds(engine: Engine) -> None:
    book = AlertBook()
    apply(engine, book, [sig("JobFailed"), sig("GangUnschedulable"), sig("PartialGang")], at(0))
    with Session(engine) as session, session.begin():
        out = book.apply_round(frozenset({"GangUnschedulable", "PartialGang"}), [sig("PartialGang")], session, at(5))
    assert [(t.kind, t.new_state) for t in out] == [("GangUnschedulable", "resolved")]
    assert sorted((r.kind, r.state) for r in rows(engine)) == [
        ("GangUnschedulable", "resolved"), ("JobFailed", "firing"), ("PartialGang", "firing")]


def test_updates_and_throttled_last_seen(engine: Engine) -> None:
    book = AlertBook()
    apply(engine, book, [sig()], at(0))
    apply(engine, book, [sig()], at(30))
    assert rows(engine)[0].last_seen_at == at(0)  # not written again within TOUCH_SECONDS
    apply(engine, book, [sig()], at(61))
    assert rows(engine)[0].last_seen_at == at(61)
    apply(engine, book, [sig(details={"n": 2}, summary="new", severity="critical")], at(62))
    (row,) = rows(engine)
    assert (row.details, row.summary, row.severity, row.last_seen_at) == ({"n": 2}, "new", "critical", at(62))
    # After a restart the stored details compare equal: no write for an unchanged signal.
    book = loaded(engine)
    apply(engine, book, [sig(details={"n": 2}, summary="new", severity="critical")], at(70))
    assert rows(engine)[0].updated_at == at(62)


def test_awkward_values_are_stored_on_both_databases(engine: Engine) -> None:
    book = AlertBook()
    details: dict[Any, Any] = {"inf": math.inf, "nan": math.nan, "t": (1, 2), "s": {3}, 5: "int key", "nul": "a\x00b",
                               "bad": "\ud800", "obj": object, "deep": {"x": [{"y": "ü" * 10}]}}
    s = Signal(kind="JobFailed", fingerprint=fingerprint("JobFailed", "x"), active=True, severity="bogus",
               namespace="n" * 1000, queue="q\x00", job_name="\U0001f600" * 300, subject="s",
               summary="x\x00y" * 5000, details=details)
    assert apply(engine, book, [s], at(0)) == [(None, "firing")]
    (row,) = rows(engine)
    assert row.severity == "warning" and len(row.namespace) == 253 and row.queue == "q\ufffd"
    assert len(row.summary) == 4000 and "\x00" not in row.summary and row.job_name == "\U0001f600" * 253
    assert row.details["inf"] is None and row.details["nan"] is None and row.details["t"] == [1, 2]
    assert row.details["5"] == "int key" and row.details["nul"] == "a\ufffdb" and row.details["bad"] == "?"
    assert row.details["deep"] == {"x": [{"y": "ü" * 10}]}
    # The same signal again: equal to what was stored, no change.
    assert apply(engine, loaded(engine), [s], at(1)) == []
    # A fingerprint too long for its column is hashed to fit, the same way every time.
    long = Signal(kind="GangUnschedulable", fingerprint="x" * 100, active=True)
    book = AlertBook()
    assert apply(engine, book, [long], at(2)) == [(None, "firing")]
    assert apply(engine, loaded(engine), [long], at(3)) == []
    assert len(rows(engine)[-1].fingerprint) == 32 and len(rows(engine)) == 2


def test_memory_behind_the_database_adopts_the_open_row(engine: Engine) -> None:
    other, book = AlertBook(), AlertBook()
    apply(engine, other, [sig(), sig(key="p", for_seconds=60)], at(0))
    # `book` never loaded: it finds the rows instead of breaking the one-open-row rule.
    assert apply(engine, book, [sig(), sig(key="p", for_seconds=60)], at(60)) == [("pending", "firing")]
    assert len(rows(engine)) == 2


def test_rolled_back_transaction_then_load(engine: Engine) -> None:
    book = AlertBook()
    with Session(engine) as session:
        session.begin()
        assert [t.new_state for t in book.apply([sig()], session, at(0))] == ["firing"]
        session.rollback()
    assert rows(engine) == []
    with Session(engine) as session:
        book.load(session)
    assert book.state(sig().fingerprint) is None
    assert apply(engine, book, [sig()], at(1)) == [(None, "firing")]


def test_failure_detector_and_book_across_a_crash(engine: Engine) -> None:
    """The event path end to end: a job fails, the process dies, the relist replays the objects."""
    settings = Detectors()
    failed_job = parse_job(job(phase="Failed", retry=3, reason="MaxRetryExceeded"))
    oom_pod = parse_pod(pod(phase="Failed", state=oom()))
    detector, book = FailureDetector(settings), AlertBook()
    signals = detector.on_pod("MODIFIED", oom_pod) + detector.on_job("MODIFIED", failed_job)
    first = apply(engine, book, signals, at(0))
    assert sorted(first) == [(None, "firing")] * 3  # PodOOMKilled, JobFailed, RetryExhausted
    detector, book = FailureDetector(settings), loaded(engine)  # kill -9 and restart
    replay = detector.on_job("ADDED", failed_job) + detector.on_pod("ADDED", oom_pod)
    assert apply(engine, book, replay, at(60)) == []
    with Session(engine) as session, session.begin():  # after the initial sync: nothing missing
        assert book.resolve_missing(FailureDetector.KINDS, detector.active(), session, at(61)) == []
    gone = detector.on_pod("DELETED", oom_pod) + detector.on_job("DELETED", failed_job)
    assert sorted(apply(engine, book, gone, at(120))) == [("firing", "resolved")] * 3
    # Another restart replaying old events (the job object came back in a stale relist): nothing fires.
    detector, book = FailureDetector(settings), loaded(engine)
    assert apply(engine, book, detector.on_job("ADDED", failed_job) + detector.on_pod("ADDED", oom_pod), at(200)) == []
    assert len(rows(engine)) == 3


def test_alerts_whose_object_vanished_during_downtime_resolve_after_sync(engine: Engine) -> None:
    detector, book = FailureDetector(Detectors()), AlertBook()
    apply(engine, book, detector.on_job("MODIFIED", parse_job(job(phase="Failed"))), at(0))
    detector, book = FailureDetector(Detectors()), loaded(engine)  # restart; the job was deleted meanwhile
    with Session(engine) as session, session.begin():
        out = book.resolve_missing(FailureDetector.KINDS, detector.active(), session, at(10))
    assert [(t.kind, t.new_state) for t in out] == [("JobFailed", "resolved")]


@pytest.mark.parametrize("restart", [False, True])
def test_over_requested_fires_once_per_run(engine: Engine, restart: bool) -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    with Session(engine) as session, session.begin():
        session.add(JobRun(uid="u1", namespace="team-a", name="batch-score-x", workload="batch-score",
                           started_at=now - timedelta(seconds=1800), finished_at=now - timedelta(seconds=600),
                           cpu_core_seconds_requested=16 * 1200.0, cpu_core_seconds_used=1200.0, updated_at=now))
    detector, book = WasteDetector(Detectors()), AlertBook()

    def round_at(t: datetime) -> list[str]:
        nonlocal detector, book
        if restart:
            detector, book = WasteDetector(Detectors()), loaded(engine)
        with Session(engine) as session, session.begin():
            return [t.new_state for t in book.apply_round(detector.KINDS, detector.check(session, t), session, t)]

    assert round_at(now) == ["firing"]
    assert round_at(now + timedelta(hours=1)) == []
    assert round_at(now + timedelta(days=2)) == ["resolved"]  # out of the report window
    assert round_at(now + timedelta(days=2, hours=1)) == []
    assert [(r.kind, r.state, r.job_name) for r in rows(engine)] == [("OverRequested", "resolved", "batch-score-x")]
