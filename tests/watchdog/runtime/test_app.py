"""The watchdog's wiring: what its collectors report reaches its health and /metrics."""

from __future__ import annotations

from pathlib import Path

from tests.simtools import wait_for
from tests.watchdog.test_crash import free_port
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.runtime.app import Intervals, Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine


def test_prometheus_down_is_counted_and_collection_goes_on(tmp_path: Path) -> None:
    settings = load(None, environ={}, database_url=f"sqlite:///{tmp_path / 'w.db'}", sources={
        "metrics_api": {"enabled": False},
        "prometheus": {"enabled": True, "url": f"http://127.0.0.1:{free_port()}", "interval_seconds": 0.1,
                       "timeout_seconds": 1}})
    engine = make_engine(settings.database_url)
    watchdog = Watchdog(settings, engine, None, Intervals(checks=0.2, waste=0.4, flush=0.2)).start()
    try:
        stats = watchdog.collectors["prometheus"]
        wait_for(lambda: stats.errors >= 3, timeout=20)  # it keeps polling after each failure
        assert stats.enabled and stats.last_success is None and stats.samples == 0
        assert watchdog.collectors["metrics_api"].enabled is False
    finally:
        watchdog.stop()
        engine.dispose()


def test_the_passes_take_their_intervals_from_the_settings(tmp_path: Path) -> None:
    """detectors.check_interval_seconds / waste_interval_seconds and sources.flush_interval_seconds set the
    writer's passes (the defaults are today's 15 / 60 / 15 s), and OverRequested settles four flushes."""
    engine = make_engine(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        default = Watchdog(load(None, environ={}), engine, None)
        assert (default.intervals.checks, default.intervals.waste, default.intervals.flush) == (15, 60, 15)
        settings = load(None, environ={"VOLCANO_WATCHDOG_DETECTORS__WASTE_INTERVAL_SECONDS": "5"},
                        detectors={"check_interval_seconds": 2}, sources={"flush_interval_seconds": 1.5})
        tuned = Watchdog(settings, engine, None)
        assert (tuned.intervals.checks, tuned.intervals.waste, tuned.intervals.flush) == (2, 5, 1.5)
        assert tuned.detectors.waste.settle_seconds == 6
    finally:
        engine.dispose()
