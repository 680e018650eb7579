"""Every Volcano object we ship or simulate validates against Volcano's own CRD schemas."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.crdschema import schema_errors
from tests.simtools import SHARED
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.resources import JOBS, PODGROUPS, QUEUES, ResourceType
from volcano_monitor.simulator.store import Store, WatchEvent

EXAMPLES = sorted((SHARED / "volcano" / "examples").glob("*.yaml"))


def example_objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return found


def test_examples_are_found() -> None:
    kinds = {doc["kind"] for _, doc in example_objects()}
    assert len(EXAMPLES) >= 8 and kinds == {"Job", "Queue"}


@pytest.mark.parametrize(("where", "doc"), example_objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_example_validates(where: str, doc: dict[str, Any]) -> None:
    assert schema_errors(doc) == [], where


def test_the_validator_rejects_misspelt_and_mistyped_fields() -> None:
    _, job = next((w, d) for w, d in example_objects() if d["kind"] == "Job")
    typo = {**job, "spec": {**job["spec"], "minAvailabel": 1}}
    assert any("minAvailabel" in e for e in schema_errors(typo))
    wrong = {**job, "status": {"state": {"phase": "Sleeping"}}}
    assert any("Sleeping" in e for e in schema_errors(wrong))
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"},
             "spec": {"capability": {"cpu": "1.5.3"}}}
    assert schema_errors(queue)


def test_every_version_the_simulator_writes_validates() -> None:
    """Play the default scenario for twelve scenario hours and check every Job, PodGroup and Queue
    version it wrote, not only the final ones."""
    clock = [1_800_000_000.0]
    store = Store()
    written: list[tuple[ResourceType, dict[str, Any]]] = []

    def record(rtype: ResourceType, event: WatchEvent) -> None:
        if rtype in (JOBS, PODGROUPS, QUEUES) and event.type != "DELETED":
            written.append((rtype, event.obj))

    store.listeners.append(record)
    driver = Driver(store, "default", speed=1.0, clock=lambda: clock[0])
    driver.setup()
    for _ in range(12 * 60):
        clock[0] += 60
        driver.tick()
    assert {rtype for rtype, _ in written} == {JOBS, PODGROUPS, QUEUES}
    phases = {obj.get("status", {}).get("state", {}).get("phase") for rtype, obj in written if rtype is JOBS}
    assert {"Pending", "Running", "Completed", "Failed"} <= phases
    failures = {}
    for rtype, obj in written:
        errors = schema_errors(obj)
        if errors:
            failures[f"{rtype.kind}/{obj['metadata']['name']}@{obj['metadata']['resourceVersion']}"] = errors[:3]
    assert failures == {}
