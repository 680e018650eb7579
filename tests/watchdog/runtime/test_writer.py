"""The writer's judging passes (gang, queue and GPU-idle checks, waste) wait until every feed's first list is
observed: a restarted watchdog whose informers are still listing must not resolve the open alerts its half
of a view no longer shows, and fire them again a moment later as new episodes (each change a chat message).
Seen in the clean-clone run of test_crash: both open GangUnschedulable alerts resolved 330 ms after the
restart's takeover, one fired again 150 ms later."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import wait_for
from tests.watchdog.findings.test_gang_queue import pending_group
from volcano_monitor.core.model import parse_podgroup
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.runtime.app import Intervals, Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import Alert


class ListingInformer:
    """An informer whose first list has not come back yet (`synced` is set by the test)."""

    kind = "podgroups"

    def __init__(self) -> None:
        self.synced = threading.Event()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def started(url: str, informer: ListingInformer | None = None, judge_wait_seconds: float | None = None) -> Watchdog:
    settings = load(None, environ={}, database_url=url, detectors={"gang_unschedulable_seconds": 1},
                    sources={"metrics_api": {"enabled": False}})
    watchdog = Watchdog(settings, make_engine(url), None, Intervals(checks=0.05, waste=0.05, flush=0.2))
    if informer is not None:
        watchdog.informers = [informer]  # type: ignore[list-item]
    if judge_wait_seconds is not None:
        watchdog.writer.judge_wait_seconds = judge_wait_seconds
    return watchdog.start()


def gang_alerts(engine: Engine) -> list[tuple[int, str]]:
    with Session(engine) as session:
        return [(row.id, row.state) for row in session.scalars(
            select(Alert).where(Alert.kind == "GangUnschedulable").order_by(Alert.id))]


def test_a_restart_keeps_open_alerts_while_its_informers_list(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    group = parse_podgroup(pending_group(created=time.time() - 600))  # waiting for ten minutes
    first = started(url)  # fed by hand: judges at once
    try:
        first.enqueue("podgroups", "ADDED", group)
        wait_for(lambda: [state for _, state in gang_alerts(first.engine)] == ["firing"], timeout=10)
        [(alert_id, _)] = gang_alerts(first.engine)
    finally:
        first.stop()
    informer = ListingInformer()
    second = started(url, informer)
    try:
        time.sleep(0.5)  # ten check intervals with the list still out
        assert gang_alerts(second.engine) == [(alert_id, "firing")]
        assert not second.index_synced()
        second.enqueue("podgroups", "ADDED", group)  # the first list, then the informer says it is synced
        informer.synced.set()
        wait_for(second.index_synced, timeout=10)
        time.sleep(0.3)
        assert gang_alerts(second.engine) == [(alert_id, "firing")]  # the same episode, never resolved
        second.enqueue("podgroups", "DELETED", group)  # and the rounds do judge once synced
        wait_for(lambda: gang_alerts(second.engine) == [(alert_id, "resolved")], timeout=10)
    finally:
        second.stop()
        second.engine.dispose()


def test_a_queue_never_empty_does_not_hold_back_the_first_lists(tmp_path: Path) -> None:
    """A busy cluster's events keep coming faster than one batch is stored: the writer still learns that the
    first lists are observed (a marker queued behind them), so it reconciles and judges."""
    informer = ListingInformer()
    watchdog = started(f"sqlite:///{tmp_path / 'w.db'}", informer)
    group = parse_podgroup(pending_group(created=time.time() - 600))
    stop = threading.Event()
    lowest: list[int] = []

    def feed() -> None:  # keeps a few thousand events queued, never none
        while not stop.is_set():
            queued = watchdog.writer.work.qsize()
            if informer.synced.is_set():
                lowest.append(queued)
            if queued < 3000:
                for _ in range(500):
                    watchdog.enqueue("podgroups", "MODIFIED", group)
            else:
                time.sleep(0.001)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(0.3)
        informer.synced.set()
        wait_for(watchdog.index_synced, timeout=10)
        wait_for(lambda: watchdog.writer.reconciled, timeout=10)
        wait_for(lambda: [state for _, state in gang_alerts(watchdog.engine)] == ["firing"], timeout=10)
        assert min(lowest) > 0  # the queue was never empty
    finally:
        stop.set()
        feeder.join(10)
        watchdog.stop()
        watchdog.engine.dispose()


def test_an_informer_that_never_syncs_holds_judging_back_only_so_long(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """RBAC refusing one kind keeps its informer from ever syncing: the periodic alerts must not stay silent
    for good. After the wait the rounds judge what is listed, and the log says so once."""
    caplog.set_level(logging.WARNING, logger="volcano_monitor.watchdog.runtime.writer")
    watchdog = started(f"sqlite:///{tmp_path / 'w.db'}", ListingInformer(), judge_wait_seconds=1.0)
    try:
        watchdog.enqueue("podgroups", "ADDED", parse_podgroup(pending_group(created=time.time() - 600)))
        time.sleep(0.5)
        assert gang_alerts(watchdog.engine) == []  # still waiting for the lists
        wait_for(lambda: [state for _, state in gang_alerts(watchdog.engine)] == ["firing"], timeout=10)
        time.sleep(0.3)
        said = [r.getMessage() for r in caplog.records if "first lists are not all in" in r.getMessage()]
        assert len(said) == 1 and "after 1 s" in said[0] and not watchdog.index_synced()
    finally:
        watchdog.stop()
        watchdog.engine.dispose()
