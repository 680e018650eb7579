"""The fleet watches itself (issue 32): each cluster's leader writes its heartbeat on its interval, and the
live cluster with the smallest name raises ClusterStale for every other cluster whose heartbeat grew
older than `cluster.stale_after_seconds`, resolved when it writes again. Several watchdogs (one per
cluster, each its engine scoped to its cluster) on one database, driven by a fake clock through the
writer's own path (`Watchdog.apply`: leadership, takeover, transaction, alert book)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import FakeClock, wait_for
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.findings.detectors.fleet import CLUSTER_STALE, ClusterStaleDetector
from volcano_monitor.watchdog.runtime.app import Intervals, Watchdog
from volcano_monitor.watchdog.runtime.tasks import ALERT_KINDS
from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.state.db.scope import fleet, scoped
from volcano_monitor.watchdog.state.fleet import Heartbeat, heartbeats

T0 = datetime(2026, 12, 6, 12, tzinfo=UTC).timestamp()
STALE = 300.0


class Fleet:
    """One watchdog per cluster on one database, all on one fake clock."""

    def __init__(self, engine: Engine, names: tuple[str, ...]) -> None:
        self.engine, self.clock = engine, FakeClock(T0)
        self.watchdogs = {name: Watchdog(
            load(None, environ={}, cluster={"name": name, "heartbeat_interval_seconds": 30,
                                             "stale_after_seconds": STALE}),
            scoped(engine, name), None, clock=self.clock, leader=AlwaysLeader(f"{name}-pod-0").start())
            for name in names}

    def beat(self, *names: str) -> None:
        """These clusters' leaders run their heartbeat pass now (and nothing else)."""
        for name in names:
            self.watchdogs[name].apply([], ["heartbeat"])

    def run(self, seconds: float, *names: str) -> None:
        """`seconds` go by, these clusters' leaders beating every 30 s (the others stopped)."""
        for _ in range(int(seconds // 30)):
            self.clock.t += 30
            self.beat(*names)

    def alerts(self) -> dict[tuple[str, str], str]:
        """(raiser, stale cluster) -> state of every ClusterStale alert in the database, across clusters."""
        with Session(self.engine) as session:
            rows = session.scalars(fleet(select(Alert).where(Alert.kind == CLUSTER_STALE))).all()
            return {(row.cluster, row.subject): row.state for row in rows}

    def firing(self) -> set[tuple[str, str]]:
        return {key for key, state in self.alerts().items() if state == "firing"}


@pytest.fixture
def two(engine: Engine) -> Iterator[Fleet]:
    yield Fleet(engine, ("alpha", "bravo"))


def test_a_cluster_that_stops_beating_is_raised_by_the_other_and_resolved_when_it_writes_again(two: Fleet) -> None:
    two.beat("alpha", "bravo")
    two.clock.t += STALE  # exactly stale_after: not yet
    two.beat("alpha")
    assert two.alerts() == {}
    two.clock.t += 30
    two.beat("alpha")
    assert two.firing() == {("alpha", "bravo")}
    with Session(two.engine) as session:
        alert = session.scalars(fleet(select(Alert).where(Alert.kind == CLUSTER_STALE))).one()
    assert alert.severity == "warning" and alert.subject == "bravo"
    assert "bravo" in alert.summary and "5 min" in alert.summary and "bravo-pod-0" in alert.summary
    assert alert.details["seconds_since_heartbeat"] == 330 and alert.details["raised_by"] == "alpha"
    two.clock.t += 600  # still stale: the same alert, its summary saying how long now
    two.beat("alpha")
    assert two.firing() == {("alpha", "bravo")}
    with Session(two.engine) as session:
        assert "15 min" in session.scalars(fleet(select(Alert).where(Alert.kind == CLUSTER_STALE))).one().summary
    two.beat("bravo")  # bravo's leader is back: it raises nothing (alpha is live and smaller) ...
    assert two.firing() == {("alpha", "bravo")}
    two.beat("alpha")  # ... and alpha's next pass resolves it
    assert two.alerts() == {("alpha", "bravo"): "resolved"}


def test_when_the_raiser_dies_the_next_live_cluster_raises_and_resolves_once_it_is_back(two: Fleet) -> None:
    two.beat("alpha", "bravo")
    two.clock.t += STALE + 30
    two.beat("bravo")
    assert two.firing() == {("bravo", "alpha")}
    two.clock.t += 30
    two.beat("alpha")  # alpha is back and is the raiser again; nothing is stale
    assert two.firing() == {("bravo", "alpha")}
    two.beat("bravo")  # the stand-in resolves what it no longer should hold
    assert two.alerts() == {("bravo", "alpha"): "resolved"}


def test_with_three_clusters_only_the_smallest_live_one_raises(engine: Engine) -> None:
    three = Fleet(engine, ("alpha", "bravo", "charlie"))
    three.run(STALE * 2, "charlie", "bravo", "alpha")
    assert three.alerts() == {}
    three.run(STALE + 30, "bravo", "alpha")  # charlie stopped: alpha raises it, bravo defers to alpha
    assert three.firing() == {("alpha", "charlie")}
    three.run(STALE + 30, "bravo")  # alpha stopped too: bravo, the smallest live one, takes over for both
    assert three.firing() == {("alpha", "charlie"), ("bravo", "alpha"), ("bravo", "charlie")}
    three.run(30, "alpha", "bravo")  # alpha is back: it still holds charlie's; bravo resolves its two
    assert three.firing() == {("alpha", "charlie")}
    assert three.alerts()[("bravo", "alpha")] == three.alerts()[("bravo", "charlie")] == "resolved"
    three.run(30, "charlie", "alpha", "bravo")  # charlie writes again: resolved by its raiser
    assert three.firing() == set()
    assert len(three.alerts()) == 3  # one alert per (raiser, stale cluster): nobody raised twice


def test_one_cluster_alone_raises_nothing(engine: Engine) -> None:
    alone = Fleet(engine, ("solo",))
    alone.beat("solo")
    alone.clock.t += 10 * STALE  # even its own heartbeat going old (a long restart) is no alert
    alone.beat("solo")
    assert alone.alerts() == {}
    with Session(engine) as session:
        assert [(h.cluster, h.seen_at.timestamp()) for h in heartbeats(session)] == [("solo", T0 + 10 * STALE)]


def test_the_raiser_is_computed_from_the_heartbeats_alone() -> None:
    now = datetime.fromtimestamp(T0, UTC)

    def beats(**ages: float) -> list[Heartbeat]:
        return [Heartbeat(name, f"{name}-0", now - timedelta(days=1), now - timedelta(seconds=age))
                for name, age in ages.items()]

    judge = ClusterStaleDetector("m", STALE).judge
    assert judge(beats(m=0), now) == []
    assert judge(beats(a=10, m=0, z=STALE + 1), now) == []  # a is live and smaller: a raises z
    stale = judge(beats(a=STALE + 1, m=STALE * 3, z=STALE + 1), now)  # m's own old beat still counts it live
    assert sorted(s.subject for s in stale) == ["a", "z"] and all(s.active for s in stale)
    assert len({s.fingerprint for s in stale}) == 2
    assert CLUSTER_STALE in ALERT_KINDS


def test_the_writer_beats_at_once_on_taking_over_then_on_its_interval(database_url: str, engine: Engine) -> None:
    class Switch:
        identity = "east-pod-1"
        leading = False

        def is_leader(self) -> bool:
            return self.leading

    clock, leader = FakeClock(T0), Switch()
    settings = load(None, environ={}, database_url=database_url,
                    cluster={"name": "east", "heartbeat_interval_seconds": 20, "stale_after_seconds": 60})
    watchdog = Watchdog(settings, scoped(engine, "east"), None, clock=clock, leader=leader)
    assert watchdog.intervals.heartbeat == 20

    def seen() -> float | None:
        with Session(engine) as session:
            return next((h.seen_at.timestamp() for h in heartbeats(session) if h.cluster == "east"), None)

    watchdog.start()
    try:
        clock.t += 1  # a follower's rounds store nothing
        wait_for(lambda: watchdog.writer.started.is_set(), timeout=10)
        time.sleep(0.5)  # a few of the writer's rounds (0.2 s each)
        assert seen() is None and not watchdog.writer.leading
        leader.leading = True
        clock.t += 2  # the next request pass makes it leader; that round beats, with no interval to wait
        wait_for(lambda: seen() == T0 + 3, timeout=10)
        with Session(engine) as session:
            assert [h.identity for h in heartbeats(session)] == ["east-pod-1"]
        batches = watchdog.stats.batches
        clock.t += 10  # half an interval: a round is stored (the request pass), with no beat
        wait_for(lambda: watchdog.stats.batches > batches, timeout=10)
        assert seen() == T0 + 3
        clock.t += 10  # T0 + 23: an interval after the first beat
        wait_for(lambda: seen() == T0 + 23, timeout=10)
    finally:
        watchdog.stop()


def test_the_default_intervals_come_from_the_cluster_settings(engine: Engine) -> None:
    default = Watchdog(load(None, environ={}), engine, None)
    assert default.intervals.heartbeat == 30 and default.detectors.fleet is not None
    assert default.detectors.fleet.stale_after_seconds == 300 and default.detectors.fleet.own == "default"
    assert Intervals().heartbeat == 30
