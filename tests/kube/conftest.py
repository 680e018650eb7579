from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from simulator.runtime import SimulatorThread
from tests.simtools import client_for


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(bookmark_interval=0.2) as running:
        yield running


@pytest.fixture
def api(sim: SimulatorThread, tmp_path: Path) -> client.ApiClient:
    return client_for(sim, tmp_path)
