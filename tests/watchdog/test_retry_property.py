"""Database failures at random points of random batches store the same alerts as a run without any
(issue 12, defect 2: a retried batch re-ran the detectors and lost PodOOMKilled).

The events are the watch streams recorded from real Volcano v1.12.4, cut into batches of random sizes.
A statement listener makes the database fail (OperationalError, as when the connection drops) at
random statements — inside a batch's transaction, inside the reload after a rollback, anywhere. The
worker waits, retries and must end with exactly the alerts (kind, fingerprint, state) of the fault-free
run. Both databases.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, event, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from tests.recorded import load
from tests.watchdog.findings.test_detectors import T0, oom, pod
from tests.watchdog.harness import fast_settings
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.state.events import about_podgroup

CRASH_LOOP = "synthetic: a container OOM-killed, running again, killed again"
SCENARIOS = (CRASH_LOOP, "pod-oomkilled-job-fails", "pod-oomkilled-gang2-restart-stuck", "pod-rejected-outofcpu",
             "pod-error-abort", "gang-too-big", "queue-capability-wait")
DETECTORS = {"gang_unschedulable_seconds": 5, "partial_gang_seconds": 5, "queue_starved_seconds": 5}


class Faults:
    """Fails the statements whose running numbers are in `at` (counted over the whole run)."""

    def __init__(self, at: set[int]) -> None:
        self.at = at
        self.count = 0
        self.injected = 0
        self.stopped_at = 0  # statements made before the injection was switched off

    def __call__(self, *args: Any) -> None:
        self.count += 1
        if self.count in self.at:
            self.injected += 1
            raise OperationalError("injected failure", None, ConnectionError("the database went away"))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def crash_loop(wd: Watchdog) -> list[tuple[float, tuple[str, str, Any]]]:
    """A pod whose container is OOM-killed and restarted (restartPolicy OnFailure): PodOOMKilled fires
    on the kill and resolves when the container runs again; the second kill is not news."""
    states = [({"running": {}}, None, 0), (oom(), None, 1), ({"running": {}}, oom(), 1), (oom(), oom(), 2),
              ({"running": {}}, oom(), 2)]
    return [(T0 + i, ("pods", "ADDED" if i == 0 else "MODIFIED",
                      wd.pod_view(pod(state=state, last_state=last, restarts=restarts, limits={"memory": "1Gi"}))))
            for i, (state, last, restarts) in enumerate(states)]


def run(engine: Engine, database_url: str, name: str, cuts: list[int],
        faults: Faults | None = None) -> set[tuple[str, str, str]]:
    """Replay a scenario in batches (sizes cycling through `cuts`), with checks once a second; `faults`
    stop before the alerts are read back."""
    scenario = load(name) if name != CRASH_LOOP else None
    clock = Clock(scenario.start if scenario else T0)
    wd = Watchdog(fast_settings(database_url, detectors=DETECTORS), engine, api=None, clock=clock)
    wd.writer.db_retry_backoff = (0.0001, 0.001)
    parse = {"jobs": parse_job, "podgroups": parse_podgroup, "queues": parse_queue, "pods": wd.pod_view}
    items: list[tuple[float, tuple[str, str, Any]]] = []
    if scenario is None:
        items = crash_loop(wd)
    else:
        wd.apply([("queues", "ADDED", parse_queue(q)) for q in scenario.queues], [])
    for recorded in scenario.events if scenario else ():
        if recorded.what == "events":
            view = wd.notes.parse(recorded.object) if about_podgroup(recorded.object) else None
            if view is None:
                continue
            items.append((recorded.received, (recorded.what, recorded.type, view)))
        else:
            items.append((recorded.received, (recorded.what, recorded.type, parse[recorded.what](recorded.object))))
    i = cut = 0
    while i < len(items):
        size = cuts[cut % len(cuts)]
        cut += 1
        batch = items[i:i + size]
        i += size
        clock.now = batch[-1][0]
        wd.apply([item for _, item in batch], ["checks"])
    for _ in range(8):  # let the thresholds pass after the last event
        clock.now += 1
        wd.apply([], ["checks"])
    if faults is not None:
        faults.at, faults.stopped_at = set(), faults.count
    with Session(engine) as session:
        return {(a.kind, a.fingerprint, a.state) for a in session.scalars(select(Alert))}


@pytest.fixture(scope="module")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "watchdog.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    return path


Expected = dict[str, tuple[set[tuple[str, str, str]], int]]


@pytest.fixture(scope="module")
def expected(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Expected:
    """The fault-free runs, one batch per event: the alerts, and how many statements that took."""
    out = {}
    for name in SCENARIOS:
        path = tmp_path_factory.mktemp("clean") / "watchdog.db"
        shutil.copy(sqlite_template, path)
        engine = make_engine(f"sqlite:///{path}")
        counter = Faults(set())
        event.listen(engine, "before_cursor_execute", counter)
        out[name] = (run(engine, f"sqlite:///{path}", name, [1]), counter.count)
        engine.dispose()
    assert any(kind == "PodOOMKilled" for alerts, _ in out.values() for kind, _, _ in alerts)
    return out


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest, sqlite_template: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A function that gives an empty, migrated database for each example."""
    engines: list[Engine] = []

    def make() -> tuple[Engine, str]:
        if request.param == "sqlite":
            path = tmp_path_factory.mktemp("faulty") / "watchdog.db"
            shutil.copy(sqlite_template, path)
            url = f"sqlite:///{path}"
            engine = make_engine(url)
        else:
            url = request.getfixturevalue("postgres_url")
            engine = make_engine(url)
            with engine.begin() as connection:
                connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            migrate(engine)
        engines.append(engine)
        return engine, url

    yield make
    for engine in engines:
        engine.dispose()


@pytest.mark.parametrize("fresh_database", ["sqlite", "postgresql"], indirect=True)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(SCENARIOS),
       cuts=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=6),
       where=st.sets(st.floats(min_value=0, max_value=1, exclude_max=True), min_size=1, max_size=12))
def test_database_failures_at_random_points_store_the_same_alerts(
        fresh_database: Any, expected: Expected, name: str, cuts: list[int], where: set[float]) -> None:
    """`where`: the failures' places, as fractions of the statements the fault-free run made."""
    alerts, statements = expected[name]
    faults = {int(f * statements) + 1 for f in where}
    engine, url = fresh_database()
    injector = Faults(faults)
    event.listen(engine, "before_cursor_execute", injector)
    try:
        stored = run(engine, url, name, cuts, injector)
    finally:
        event.remove(engine, "before_cursor_execute", injector)
    assert injector.injected or injector.stopped_at < min(faults)  # the failures did happen (when reached)
    assert stored == alerts
