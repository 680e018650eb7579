"""Running the watchdog in-process against the simulated cluster, with windows shrunk to seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import client_for
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.config import Settings, load
from volcano_monitor.watchdog.runtime.app import Intervals, Watchdog
from volcano_monitor.watchdog.state.db.models import Alert, JobRun

# Real seconds: the scenario runs compressed, so thresholds are tiny too.
FAST_DETECTORS = {
    "gang_unschedulable_seconds": 1, "partial_gang_seconds": 1, "queue_starved_seconds": 1,
    "idle_window_seconds": 3, "over_requested_min_seconds": 0.5,
    # the passes themselves, for a watchdog process started with these settings (in-process ones take Intervals)
    "check_interval_seconds": 0.5, "waste_interval_seconds": 1,
}


def fast_settings(database_url: str, **overrides: Any) -> Settings:
    flags: dict[str, Any] = {
        "database_url": database_url,
        "detectors": FAST_DETECTORS,
        "sources": {"metrics_api": {"interval_seconds": 0.25}, "rollup_seconds": 1},
    }
    flags.update(overrides)
    return load(None, environ={}, **flags)


def start_watchdog(sim: SimulatorThread, engine: Engine, tmp_path: Path, settings: Settings) -> Watchdog:
    intervals = Intervals(checks=0.2, waste=0.4, flush=0.25, rollup_bucket=1)
    return Watchdog(settings, engine, client_for(sim, tmp_path), intervals, informer_backoff=(0.02, 0.2)).start()


def alerts(engine: Engine) -> list[Alert]:
    with Session(engine) as session:
        return list(session.scalars(select(Alert)))


def runs(engine: Engine) -> list[JobRun]:
    with Session(engine) as session:
        return list(session.scalars(select(JobRun)))


def kinds_by_workload(found: list[Alert]) -> dict[str, set[str]]:
    """Alert kinds per workload (job name without run suffix; queue name for queue alerts)."""
    from volcano_monitor.watchdog.state.workload import workload_name

    out: dict[str, set[str]] = {}
    for alert in found:
        key = workload_name(alert.job_name) if alert.job_name else f"queue:{alert.queue}"
        out.setdefault(key, set()).add(alert.kind)
    return out
