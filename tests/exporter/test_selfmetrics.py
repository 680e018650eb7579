"""`volcano_exporter_synced` says what /readyz says (`Exporter.settled` decides both): an optional kind
the API server does not serve (404) or RBAC does not grant (403) reads 1, so VolcanoExporterNotSynced
stays quiet on every Volcano release; a required kind forbidden, or a served kind that cannot be listed,
reads 0. `volcano_exporter_informer_state` and `_resource_served` still tell the cases apart. Against the
simulator's API server through the official client, as a user runs the exporter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.harness import start_exporter
from tests.exporter.scrape import Series, parse, select, value
from tests.simtools import client_for, wait_for
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator.runtime import SimulatorThread

CRONJOBS, HYPERNODES = "cronjobs.batch.volcano.sh", "hypernodes.topology.volcano.sh"
JOBFLOWS = "jobflows.flow.volcano.sh"
REQUIRED = ("pods", "jobs.batch.volcano.sh", "podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh")


@pytest.fixture
def v113() -> Iterator[SimulatorThread]:
    """Volcano v1.13: serves CronJob, HyperNode and JobFlow."""
    sim = SimulatorThread(scenario="default", speed=600, auto_tick=False, bookmark_interval=0.2,
                          volcano_release="v1.13").start()
    sim.tick()
    yield sim
    sim.stop()


def states(s: dict[Series, float]) -> dict[str, str]:
    return {dict(k)["resource"]: dict(k)["state"] for k, v in select(s, "volcano_exporter_informer_state").items()
            if v == 1}


def synced(s: dict[Series, float]) -> dict[str, float]:
    return {dict(k)["resource"]: v for k, v in select(s, "volcano_exporter_synced").items()}


def scrape_when(exporter: Exporter, want: dict[str, str]) -> dict[Series, float]:
    """A scrape taken once the named resources' informers are in the given states."""
    def reached() -> bool:
        now = states(parse(exporter.scrape()))
        return all(now.get(resource) == state for resource, state in want.items())

    wait_for(reached, timeout=15, interval=0.05)
    return parse(exporter.scrape())


def test_kinds_the_api_server_does_not_serve_read_synced(scenario_sim: SimulatorThread, tmp_path: Path,
                                                         exporters: list[Exporter]) -> None:
    """The default simulator serves none of the newer CRDs: each answers 404, as on Volcano v1.9-v1.11."""
    exporter = start_exporter(scenario_sim, tmp_path)
    exporters.append(exporter)
    s = scrape_when(exporter, {CRONJOBS: "not_found", HYPERNODES: "not_found", JOBFLOWS: "not_found"})
    for resource in (CRONJOBS, HYPERNODES, JOBFLOWS):
        assert value(s, "volcano_exporter_synced", resource=resource) == 1, resource
        assert value(s, "volcano_exporter_resource_served", resource=resource) == 0, resource
    for resource in REQUIRED:
        assert value(s, "volcano_exporter_resource_served", resource=resource) == 1, resource
    assert set(synced(s).values()) == {1} and exporter.not_synced() == []


def test_optional_kinds_not_granted_read_synced_required_ones_do_not(v113: SimulatorThread, tmp_path: Path,
                                                                     exporters: list[Exporter]) -> None:
    v113.faults.forbidden = ["cronjobs", "hypernodes", "events", "pods"]
    exporter = Exporter(client_for(v113, tmp_path), backoff_base=0.02, backoff_cap=0.2,
                        forbidden_retry_seconds=0.1).start()
    exporters.append(exporter)
    s = scrape_when(exporter, {CRONJOBS: "forbidden", HYPERNODES: "forbidden", "events": "forbidden",
                               "pods": "forbidden", JOBFLOWS: "watching"})
    for resource in (CRONJOBS, HYPERNODES, "events"):
        assert value(s, "volcano_exporter_synced", resource=resource) == 1, resource
        assert value(s, "volcano_exporter_resource_served", resource=resource) == 0, resource
    assert value(s, "volcano_exporter_synced", resource="pods") == 0  # required: RBAC must be fixed
    assert value(s, "volcano_exporter_synced", resource=JOBFLOWS) == 1
    assert value(s, "volcano_exporter_resource_served", resource=JOBFLOWS) == 1
    # The gauge's zeros are exactly what /readyz waits for.
    assert {r for r, v in synced(s).items() if v == 0} == set(exporter.not_synced()) == {"pods"}
    assert not exporter.ready()

    v113.faults.forbidden = []  # RBAC granted: the kinds are listed and served
    s = scrape_when(exporter, {CRONJOBS: "watching", HYPERNODES: "watching", "events": "watching", "pods": "watching"})
    assert set(synced(s).values()) == {1} and exporter.ready()
    for resource in (CRONJOBS, HYPERNODES, "pods"):
        assert value(s, "volcano_exporter_resource_served", resource=resource) == 1, resource


def test_a_served_optional_kind_that_cannot_be_listed_reads_not_synced(v113: SimulatorThread, tmp_path: Path,
                                                                       exporters: list[Exporter]) -> None:
    """Optional is not exempt: a CronJob CRD that is installed but fails to list (500) is a problem."""
    v113.faults.error_resource, v113.faults.error_code, v113.faults.error_count = "cronjobs", 500, 10**6
    exporter = Exporter(client_for(v113, tmp_path), backoff_base=0.02, backoff_cap=0.2,
                        forbidden_retry_seconds=0.1).start()
    exporters.append(exporter)
    s = scrape_when(exporter, {CRONJOBS: "backoff", JOBFLOWS: "watching", "pods": "watching"})
    assert value(s, "volcano_exporter_synced", resource=CRONJOBS) == 0
    assert {r for r, v in synced(s).items() if v == 0} == set(exporter.not_synced()) == {CRONJOBS}
    v113.faults.error_count = 0
    s = scrape_when(exporter, {CRONJOBS: "watching"})
    assert value(s, "volcano_exporter_synced", resource=CRONJOBS) == 1 and exporter.ready()
