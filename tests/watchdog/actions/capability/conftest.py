"""Helpers for the capability tests: a bare simulated cluster (no scenario: the tests place every node,
queue and pod themselves) and builders of the objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.simtools import client_for
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.runtime import SimulatorThread

Obj = dict[str, Any]


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    started = SimulatorThread(auto_tick=False, bookmark_interval=1.0).start()
    yield started
    started.stop()


@pytest.fixture
def api(sim: SimulatorThread, tmp_path: Path) -> client.ApiClient:
    return client_for(sim, tmp_path / "kube")


def node(name: str, labels: dict[str, str] | None = None, cpu: str = "32", memory: str = "128Gi", gpus: int = 0,
         ready: bool = True, unschedulable: bool = False) -> Obj:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def queue(name: str, capability: dict[str, str] | None = None, allocated: dict[str, str] | None = None,
          parent: str = "", weight: int = 1) -> Obj:
    spec: Obj = {"weight": weight, "reclaimable": True}
    if capability is not None:
        spec["capability"] = capability
    if parent:
        spec["parent"] = parent
    return {"metadata": {"name": name}, "spec": spec,
            "status": {"state": "Open", "allocated": allocated or {"cpu": "0", "memory": "0"}}}


def put(sim: SimulatorThread, rtype: R.ResourceType, obj: Obj) -> Obj:
    return sim.call(sim.store.upsert, rtype, obj)


def delete(sim: SimulatorThread, rtype: R.ResourceType, name: str, namespace: str = "") -> None:
    sim.call(sim.store.delete, rtype, namespace, name)


def stored(sim: SimulatorThread, rtype: R.ResourceType, name: str, namespace: str = "") -> Obj:
    found = sim.call(sim.store.get_copy, rtype, namespace, name)
    assert found is not None, f"{rtype.plural} {name} does not exist"
    return found


def capability(sim: SimulatorThread, name: str) -> dict[str, Any]:
    return dict(stored(sim, R.QUEUES, name)["spec"].get("capability") or {})


def set_allocated(sim: SimulatorThread, name: str, allocated: dict[str, str]) -> None:
    def change(obj: Obj) -> None:
        obj["status"]["allocated"] = allocated

    sim.call(sim.store.mutate, R.QUEUES, "", name, change, "status")


def events(sim: SimulatorThread, namespace: str = "default") -> list[Obj]:
    return [e for e in sim.call(sim.store.objects, R.EVENTS, namespace)]
