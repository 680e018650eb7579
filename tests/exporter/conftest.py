from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.app import Exporter
from simulator.runtime import SimulatorThread
from tests.exporter.harness import frozen_default_scenario


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
