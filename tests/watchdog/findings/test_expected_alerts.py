"""The expected start of a waiting job in GangUnschedulable and QueueStarved (issue 30): in the signal's
details and summary when the estimator has one, the reason when it has none; the fingerprint (and so the
alert episode) unchanged as the estimate moves; and the chat message showing it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.watchdog.findings.test_detectors import SETTINGS, T0
from tests.watchdog.findings.test_gang_queue import cluster, pending_group
from volcano_monitor.core.model import parse_podgroup
from volcano_monitor.watchdog.actions.notify.channels.slack import Slack
from volcano_monitor.watchdog.actions.notify.channels.webhook import JsonWebhook
from volcano_monitor.watchdog.actions.notify.describe import alert_item
from volcano_monitor.watchdog.actions.notify.message import Message
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.findings.detectors import GangDetector, QueueDetector
from volcano_monitor.watchdog.findings.estimates import Estimate
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.alerts import AlertBook
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import Alert

HOUR = 3600.0
# T0 is 2023-11-14 22:13:20 UTC: an estimate 1 h later is 23:13, its range 22:58-23:43.
SOON = Estimate(T0 + HOUR, T0 + HOUR - 900, T0 + HOUR + 1800, "when research/llama-pretrain ends")
NEVER = Estimate(None, None, None, "cluster: allocatable cpu below the request", "cluster_too_small")


def gang(estimates: dict[tuple[str, str], Estimate]) -> GangDetector:
    """A gang bigger than the cluster (GangUnschedulable), with the estimator's answers in `estimates`."""
    d = GangDetector(SETTINGS, blocked=cluster("90").blocked, expected=lambda ns, job: estimates.get((ns, job)))
    d.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "120"})))
    return d


def test_gang_unschedulable_carries_the_expected_start() -> None:
    estimates = {("ml", "train-abcd"): SOON}
    (signal,) = gang(estimates).check(T0)
    assert signal.kind == "GangUnschedulable"
    assert signal.details["expected_start"] == "2023-11-14T23:13:00Z"
    assert signal.details["expected_start_low"] == "2023-11-14T22:58:00Z"
    assert signal.details["expected_start_high"] == "2023-11-14T23:43:00Z"
    assert signal.details["waits_for"] == "when research/llama-pretrain ends"
    assert signal.summary.endswith(
        "; expected to start around 23:13 UTC (22:58-23:43), when research/llama-pretrain ends")


def test_gang_unschedulable_without_an_estimate_says_why() -> None:
    (signal,) = gang({("ml", "train-abcd"): NEVER}).check(T0)
    assert signal.details["expected_start"] is None and signal.details["no_estimate_reason"] == "cluster_too_small"
    assert signal.summary.endswith("; no expected start: cluster: allocatable cpu below the request")
    # Before the first round (or a job the round did not see): nothing is claimed either way.
    (signal,) = gang({}).check(T0)
    assert "expected_start" not in signal.details and "expected" not in signal.summary
    # Without an estimator at all, as before.
    d = GangDetector(SETTINGS, blocked=cluster("90").blocked)
    d.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "120"})))
    assert d.check(T0)[0].summary == signal.summary


def test_the_fingerprint_does_not_move_with_the_estimate() -> None:
    estimates = {("ml", "train-abcd"): SOON}
    d = gang(estimates)
    first = d.check(T0)[0]
    estimates[("ml", "train-abcd")] = Estimate(T0 + 5 * HOUR, T0 + 4 * HOUR, T0 + 6 * HOUR, "when ml/other ends")
    moved = d.check(T0 + 30)[0]
    estimates[("ml", "train-abcd")] = NEVER
    never = d.check(T0 + 60)[0]
    assert first.fingerprint == moved.fingerprint == never.fingerprint
    assert first.summary != moved.summary != never.summary


def starved(estimates: dict[tuple[str, str], Estimate]) -> QueueDetector:
    """Queue research starved by a full cluster, with two waiting jobs (train-abcd, then eval-x)."""
    queues = cluster("90")
    queues.expected = lambda ns, job: estimates.get((ns, job))
    queues.on_podgroup("ADDED", parse_podgroup(pending_group(min_resources={"cpu": "8"})))
    queues.on_podgroup("ADDED", parse_podgroup(pending_group(name="eval-x-job-uid-2", uid="pg-uid-2",
                                                             min_resources={"cpu": "4"})))
    return queues


def test_queue_starved_names_the_earliest_expected_start_of_its_jobs() -> None:
    later = Estimate(T0 + 2 * HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR, "when research/big ends")
    (signal,) = starved({("ml", "train-abcd"): later, ("ml", "eval-x"): SOON}).check(T0)
    assert signal.kind == "QueueStarved" and signal.details["waiting"] == 2
    assert signal.details["expected_job"] == "ml/eval-x"
    assert signal.details["expected_start"] == "2023-11-14T23:13:00Z"
    assert signal.details["waits_for"] == "when research/llama-pretrain ends"
    assert signal.summary.endswith("allocated); ml/eval-x expected to start around 23:13 UTC (22:58-23:43), "
                                   "when research/llama-pretrain ends")
    # A job without an estimate does not hide one that has it.
    (signal,) = starved({("ml", "train-abcd"): NEVER, ("ml", "eval-x"): later}).check(T0)
    assert signal.details["expected_job"] == "ml/eval-x" and "expected to start around 00:13 UTC" not in \
        signal.summary and "expected to start around Nov 15 00:13 UTC" in signal.summary


def test_queue_starved_without_any_estimate_says_why() -> None:
    (signal,) = starved({("ml", "train-abcd"): NEVER}).check(T0)
    assert signal.details["expected_job"] == "ml/train-abcd" and signal.details["expected_start"] is None
    assert signal.summary.endswith("; ml/train-abcd: no expected start: cluster: allocatable cpu below the request")
    assert starved({}).check(T0)[0].fingerprint == signal.fingerprint


def test_the_message_shows_the_estimate_and_a_new_estimate_opens_no_episode(engine: Engine) -> None:
    estimates = {("ml", "train-abcd"): SOON}
    d, book = gang(estimates), AlertBook()
    now = datetime.fromtimestamp(T0 + SETTINGS.gang_unschedulable_seconds + 200, UTC)
    with Session(engine) as session, session.begin():
        (opened,) = book.apply_round(GangDetector.KINDS, d.check(now.timestamp()), session, now)
    assert opened.new_state == "firing"
    estimates[("ml", "train-abcd")] = Estimate(T0 + 2 * HOUR, T0 + 2 * HOUR, T0 + 2 * HOUR, "when ml/x ends")
    for step in (30, 60, 90):  # rounds with the estimate moving: no transition, so no message of its own
        later = datetime.fromtimestamp(now.timestamp() + step, UTC)
        with Session(engine) as session, session.begin():
            assert book.apply_round(GangDetector.KINDS, d.check(later.timestamp()), session, later) == []
    with Session(engine) as session:
        (row,) = session.scalars(select(Alert)).all()
    assert row.id == opened.alert_id and row.details["expected_start"] == "2023-11-15T00:13:00Z"
    assert "expected to start around Nov 15 00:13 UTC, when ml/x ends" in row.summary
    item = alert_item(row, "firing")
    message = Message(receiver="ml", group_key="{}", group_labels={}, status="firing", alerts=(item,))
    slack = Slack("https://hooks.slack.example/T/B/x").payload(message, T0)
    sections = [b["text"]["text"] for b in slack["attachments"][0]["blocks"] if b["type"] == "section"]
    assert "expected to start around Nov 15 00:13 UTC, when ml/x ends" in sections[0]
    webhook = JsonWebhook("https://hooks.example/x").payload(message, T0)
    assert "expected to start around Nov 15 00:13 UTC" in webhook["alerts"][0]["summary"]


def test_the_watchdog_hands_its_estimates_to_both_detectors(tmp_path: Path) -> None:
    """The wiring: the detectors the writer runs ask the same ExpectedStarts whose thread the CLI starts."""
    settings = load(None, environ={}, database_url=f"sqlite:///{tmp_path / 'w.db'}")
    engine = make_engine(settings.database_url)
    try:
        watchdog = Watchdog(settings, engine, None)
        watchdog.expected.estimates[("ml", "train-abcd")] = ("research", SOON)
        for detector in (watchdog.detectors.gangs, watchdog.detectors.queues):
            assert detector.expected is not None and detector.expected("ml", "train-abcd") is SOON
    finally:
        engine.dispose()
