"""Replaying a watch stream recorded from real Volcano (tests/recorded.py) into a Watchdog without
informers: each event is applied as the informers would hand it over, on a fake clock set to the
event's receive time, with the periodic "checks" pass run once per replayed second.

Also: expected ledger values computed from the recorded Job objects themselves (DESIGN.md §3), so
the replay tests assert what the recording says, not numbers copied from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.recorded import Scenario
from tests.watchdog.harness import FAST_DETECTORS, fast_settings
from volcano_monitor.core.model import JOB_TERMINAL_PHASES, parse_job, parse_podgroup, parse_queue
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.events import about_podgroup

# Long enough that a gang placed within a few seconds (every healthy recording) raises nothing,
# short enough that the stuck ones (25 s) and the capability wait (~15 s) fire.
THRESHOLD_SECONDS = 5
DETECTORS = {**FAST_DETECTORS, "gang_unschedulable_seconds": THRESHOLD_SECONDS,
             "partial_gang_seconds": THRESHOLD_SECONDS, "queue_starved_seconds": THRESHOLD_SECONDS}
TAIL_SECONDS = 2  # checks after the last event


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Replayed:
    watchdog: Watchdog
    checks: int
    skipped_events: int


def replay(scenario: Scenario, engine: Engine, database_url: str) -> Replayed:
    settings = fast_settings(database_url, detectors=DETECTORS)
    clock = Clock(scenario.start)
    wd = Watchdog(settings, engine, api=None, clock=clock)
    wd.apply([("queues", "ADDED", parse_queue(q)) for q in scenario.queues], [])
    next_check = math.floor(scenario.start)
    checks = skipped = 0

    def check_until(t: float) -> None:
        nonlocal next_check, checks
        while next_check <= t:
            clock.now = max(clock.now, next_check)
            wd.apply([], ["checks"])
            checks += 1
            next_check += 1

    for event in scenario.events:
        check_until(event.received)
        clock.now = event.received
        obj: Any
        if event.what == "jobs":
            obj = parse_job(event.object)
        elif event.what == "podgroups":
            obj = parse_podgroup(event.object)
        elif event.what == "queues":
            obj = parse_queue(event.object)
        elif event.what == "pods":
            obj = wd.pod_view(event.object)
        else:  # core/v1 events: what the informer's predicate and transform let through
            obj = wd.notes.parse(event.object) if about_podgroup(event.object) else None
            if obj is None:
                skipped += 1
                continue
        wd.apply([(event.what, event.type, obj)], [])
    check_until(scenario.end + TAIL_SECONDS)
    return Replayed(wd, checks, skipped)


# ---- reading the results ------------------------------------------------------------------------------

def ledger_rows(engine: Engine) -> dict[str, JobRun]:
    with Session(engine) as session:
        return {row.name: row for row in session.scalars(select(JobRun))}


def fired(engine: Engine) -> list[Alert]:
    """Alerts that fired (pending episodes that resolved before firing are deleted by the book)."""
    with Session(engine) as session:
        return list(session.scalars(select(Alert).where(Alert.fired_at.is_not(None)).order_by(Alert.id)))


# ---- expectations from the recorded objects ---------------------------------------------------------------

def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True)
class ExpectedRun:
    phase: str
    retry_count: int
    started_at: datetime | None
    finished_at: datetime | None
    deleted: bool
    deleted_at: datetime | None
    pods_succeeded: int
    pods_failed: int


def expected_run(scenario: Scenario, job_name: str) -> ExpectedRun:
    """From the Job's recorded events: start = first Running condition of the last run that ran (runs
    are separated by Restarting; a job waiting in a new run that has not reached Running has none),
    finish = the terminal condition, pod counts of the last status that reported finished pods."""
    events = [e for e in scenario.of("jobs") if e.name == job_name]
    last = events[-1]
    status = last.object.get("status") or {}
    conditions = status.get("conditions") or []
    runs: list[list[dict[str, Any]]] = [[]]
    for cond in conditions:
        if cond["status"] == "Restarting":
            runs.append([])
        else:
            runs[-1].append(cond)
    phase = (status.get("state") or {}).get("phase", "")
    if phase not in JOB_TERMINAL_PHASES:
        runs = runs[-1:]  # the current run only
    ran = [run for run in runs if any(c["status"] == "Running" for c in run)]
    started = at(next(c for c in ran[-1] if c["status"] == "Running")["lastTransitionTime"]) if ran else None
    terminal = [c for c in conditions if c["status"] in JOB_TERMINAL_PHASES]
    finished = at(terminal[-1]["lastTransitionTime"]) if terminal and phase in JOB_TERMINAL_PHASES else None
    succeeded = failed = 0
    for e in events:
        st = e.object.get("status") or {}
        if st.get("succeeded") or st.get("failed"):
            succeeded, failed = st.get("succeeded", 0), st.get("failed", 0)
    deleted = last.type == "DELETED"
    return ExpectedRun(phase=phase, retry_count=status.get("retryCount", 0), started_at=started,
                       finished_at=finished, deleted=deleted,
                       deleted_at=datetime.fromtimestamp(last.received, UTC) if deleted else None,
                       pods_succeeded=succeeded, pods_failed=failed)


def last_event_message(scenario: Scenario, podgroup: str) -> str:
    """The latest scheduler Event message about a PodGroup (Event times have whole seconds: the one
    received last)."""
    messages = [e.object["message"] for e in scenario.of("events")
                if (e.object.get("involvedObject") or {}).get("name") == podgroup]
    return str(messages[-1])
