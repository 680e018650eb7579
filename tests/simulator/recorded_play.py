"""Play a recorded scenario's mirror (simulator.scenario, `recorded-<name>`) in the simulator on a
fake clock and reduce both the simulator's watch events and the recording to comparable shapes:
the JSON paths present per kind, and the order of status transitions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tests.recorded import KIND_TO_PLURAL, Recorded, load
from tests.simtools import FakeClock
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.resources import ResourceType
from volcano_monitor.simulator.store import Store, WatchEvent

T0 = 1_800_000_000.0
STEP = 0.25  # fake-clock seconds per tick: finer than the 1 s scheduling period

# Maps whose keys are data, not schema: names of tasks and plugins' user keys. Their keys become `*`.
DATA_MAPS = ("status.taskStatusCount", "spec.minTaskMember")
# Label and annotation keys are data too, except those Volcano itself writes.
OWN_KEY_PREFIXES = ("volcano.sh/", "scheduling.k8s.io/", "scheduling.volcano.sh/")


def play(name: str, seconds: float) -> list[Recorded]:
    """The simulator's watch events for `recorded-<name>` over `seconds` of scenario time."""
    store = Store()
    clock = FakeClock(T0)
    events: list[Recorded] = []

    def listen(rtype: ResourceType, event: WatchEvent) -> None:
        what = KIND_TO_PLURAL.get(rtype.kind)
        if what is not None:
            events.append(Recorded(event.type, what, event.obj, clock.t))

    store.listeners.append(listen)
    driver = Driver(store, f"recorded-{name}", speed=1.0, clock=clock)
    driver.setup()
    while clock.t - T0 < seconds:
        clock.t += STEP
        driver.tick()
    return events


def recorded(name: str) -> list[Recorded]:
    scenario = load(name)
    initial = [Recorded("ADDED", "queues", q, scenario.start) for q in scenario.queues]
    return initial + list(scenario.events)


def paths(obj: Any, prefix: str = "") -> Iterator[str]:
    """Every JSON path in obj, list indices as `[]`, data keys as `*`."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            user_key = prefix.endswith((".labels", ".annotations")) and not key.startswith(OWN_KEY_PREFIXES)
            if prefix in DATA_MAPS or user_key:
                key = "*"
            path = f"{prefix}.{key}" if prefix else key
            yield path
            yield from paths(value, path)
    elif isinstance(obj, list):
        for item in obj:
            yield from paths(item, prefix + "[]")


def path_set(events: Iterable[Recorded], what: str, ignore: Iterable[str] = ()) -> set[str]:
    ignored = tuple(ignore)
    return {p for e in events if e.what == what for p in paths(e.object)
            if not any(p == i or p.startswith((i + ".", i + "[")) for i in ignored)}


def collapse(seq: Iterable[str]) -> list[str]:
    out: list[str] = []
    for item in seq:
        if not out or out[-1] != item:
            out.append(item)
    return out


def job_phases(events: Iterable[Recorded]) -> dict[str, list[str]]:
    """Per Job (by its name in the workload: the simulator adds a suffix), the final conditions
    list collapsed to phase changes."""
    last: dict[str, list[str]] = {}
    for e in events:
        if e.what == "jobs":
            conditions = (e.object.get("status") or {}).get("conditions") or []
            last[e.name] = collapse(c["status"] for c in conditions)
    return last


def podgroup_phases(events: Iterable[Recorded]) -> dict[str, list[str]]:
    """Per PodGroup, its phases in order (`{}` status shown as ""), then DELETED if it was."""
    seqs: dict[str, list[str]] = {}
    for e in events:
        if e.what == "podgroups":
            seq = seqs.setdefault(e.name, [])
            seq.append("DELETED" if e.type == "DELETED" else (e.object.get("status") or {}).get("phase", ""))
    return {k: collapse(v) for k, v in seqs.items()}


def pod_phases(events: Iterable[Recorded]) -> dict[str, list[str]]:
    """Per pod UID, its phases in order, then DELETED if it was."""
    seqs: dict[str, list[str]] = {}
    for e in events:
        if e.what == "pods":
            seq = seqs.setdefault(e.object["metadata"]["uid"], [])
            seq.append("DELETED" if e.type == "DELETED" else (e.object.get("status") or {}).get("phase", ""))
    return {k: collapse(v) for k, v in seqs.items()}
