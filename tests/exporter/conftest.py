from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.exporter.harness import frozen_default_scenario
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator.runtime import SimulatorThread


@pytest.fixture(scope="module")
def scenario_sim() -> Iterator[SimulatorThread]:
    sim = frozen_default_scenario()
    yield sim
    sim.stop()


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started: list[Exporter] = []
    yield started
    for exporter in started:
        exporter.stop()
