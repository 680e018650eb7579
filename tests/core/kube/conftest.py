from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.simtools import client_for
from volcano_monitor.simulator.runtime import SimulatorThread


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(bookmark_interval=0.2) as running:
        yield running


@pytest.fixture
def api(sim: SimulatorThread, tmp_path: Path) -> client.ApiClient:
    return client_for(sim, tmp_path)
