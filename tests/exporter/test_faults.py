"""The exporter under API-server faults: afterwards its scrape equals a fresh exporter's scrape of the
same cluster state; during an outage it serves the last known state and its self-metrics say so."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.harness import frozen_default_scenario, start_exporter
from tests.exporter.scrape import Series, parse, select, value, without_self_metrics
from tests.simtools import client_for, wait_for
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator.runtime import SimulatorThread

PODGROUPS = "podgroups.scheduling.volcano.sh"


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    running = frozen_default_scenario(scenario_minutes=5)
    yield running
    running.stop()


def advance(sim: SimulatorThread, seconds: float = 0.3) -> None:
    """Let the scenario move on (600x: 0.3 s is three scenario minutes)."""
    time.sleep(seconds)
    sim.tick()


def converge(exporter: Exporter, fresh: Exporter) -> None:
    def same() -> bool:
        return without_self_metrics(exporter.scrape()) == without_self_metrics(fresh.scrape())

    try:
        wait_for(same, timeout=15, interval=0.05)
    except AssertionError:
        mine, theirs = set(without_self_metrics(exporter.scrape())), set(without_self_metrics(fresh.scrape()))
        only_old, only_fresh = sorted(mine - theirs)[:5], sorted(theirs - mine)[:5]
        raise AssertionError(f"only old: {only_old}; only fresh: {only_fresh}") from None


def test_restart_expiry_drops_and_corrupt_lines_end_in_the_same_scrape(
    sim: SimulatorThread, tmp_path: Path, exporters: list[Exporter]
) -> None:
    exporter = start_exporter(sim, tmp_path)
    exporters.append(exporter)
    before = without_self_metrics(exporter.scrape())

    sim.stop_http()  # the API server goes away while the cluster changes and compacts its history
    advance(sim)
    sim.call(sim.store.compact)
    assert without_self_metrics(exporter.scrape()) == before  # the last known state is still served
    sim.start_http()

    sim.faults.malformed_lines, sim.faults.truncate_streams = 3, 2
    advance(sim)
    sim.call(sim.api.drop_watches)
    advance(sim)
    fresh = start_exporter(sim, tmp_path / "fresh")
    exporters.append(fresh)
    converge(exporter, fresh)

    s = parse(exporter.scrape())
    assert sum(select(s, "volcano_exporter_relists_total").values()) >= 1
    assert sum(select(s, "volcano_exporter_decode_errors_total").values()) >= 1
    assert without_self_metrics(exporter.scrape()) != before  # the scenario did move on


def test_outage_is_visible_in_self_metrics(sim: SimulatorThread, tmp_path: Path, exporters: list[Exporter]) -> None:
    exporter = start_exporter(sim, tmp_path)
    exporters.append(exporter)
    first = parse(exporter.scrape())
    pods = len(select(first, "volcano_pod_info"))
    # The kinds this simulator serves (not the newer ones, idle on 404): those go to backoff and back.
    served = {dict(k)["resource"] for k, v in select(first, "volcano_exporter_resource_served").items() if v}
    assert {"pods", "jobs.batch.volcano.sh"} <= served and "cronjobs.batch.volcano.sh" not in served
    sim.stop_http()
    sim.call(sim.api.drop_watches)

    def states(s: dict[Series, float]) -> set[str]:
        return {dict(k)["state"] for k in select(s, "volcano_exporter_informer_state") if dict(k)["resource"] in served}

    def in_backoff() -> bool:
        s = parse(exporter.scrape())
        refused = select(s, "volcano_exporter_request_errors_total", resource="pods", code="connection")
        return bool(refused) and states(s) == {"backoff"}

    wait_for(in_backoff, timeout=10)
    s = parse(exporter.scrape())
    assert len(select(s, "volcano_pod_info")) == pods > 0
    assert value(s, "volcano_exporter_request_errors_total", resource="pods", code="connection") >= 1
    sim.start_http()
    wait_for(lambda: states(parse(exporter.scrape())) == {"watching"}, timeout=10)


def test_forbidden_resource_leaves_the_others_working(sim: SimulatorThread, tmp_path: Path,
                                                      exporters: list[Exporter]) -> None:
    sim.faults.forbidden = ["podgroups"]
    exporter = Exporter(client_for(sim, tmp_path), backoff_base=0.02,
                        backoff_cap=0.2, forbidden_retry_seconds=0.1).start()
    exporters.append(exporter)
    wait_for(lambda: exporter.not_synced() == [PODGROUPS], timeout=10)
    s = parse(exporter.scrape())
    assert select(s, "volcano_job_info") and select(s, "volcano_pod_info") and select(s, "volcano_queue_info")
    assert not select(s, "volcano_podgroup_info")
    assert value(s, "volcano_exporter_informer_state", resource=PODGROUPS, state="forbidden") == 1
    assert value(s, "volcano_exporter_synced", resource=PODGROUPS) == 0
    assert value(s, "volcano_exporter_synced", resource="pods") == 1
    assert value(s, "volcano_exporter_request_errors_total", resource=PODGROUPS, code="403") >= 1
    assert not exporter.ready()
    sim.faults.forbidden = []
    wait_for(exporter.ready, timeout=10)
    assert select(parse(exporter.scrape()), "volcano_podgroup_info")
