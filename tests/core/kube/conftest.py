from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.simtools import client_for
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.simulator.runtime import SimulatorThread


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(bookmark_interval=0.2) as running:
        yield running


@pytest.fixture
def api(sim: SimulatorThread, tmp_path: Path) -> client.ApiClient:
    return client_for(sim, tmp_path)


@pytest.fixture
def informers() -> Iterator[list[Informer[Any]]]:
    """Informers a test starts, stopped after it; stopped, none may leave the collector paused, and
    what a complete streaming list froze is released for the next test."""
    started: list[Informer[Any]] = []
    yield started
    for informer in started:
        informer.stop()
    assert gc.isenabled()
    gc.unfreeze()
