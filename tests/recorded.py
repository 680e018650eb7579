"""The watch streams recorded from real Volcano v1.12.4 (../shared/volcano/recorded), for replay tests.

Each scenario is a list of watch events in the order the API server sent them, merged across the
jobs, podgroups, queues, pods and events watches, plus the queues and nodes that existed before the
watches opened. `what` names the resource the way the informers' handlers do (the plural).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from tests.simtools import SHARED

RECORDED = SHARED / "volcano" / "recorded" / "v1.12.4"

KIND_TO_PLURAL = {"Job": "jobs", "PodGroup": "podgroups", "Queue": "queues", "Pod": "pods", "Event": "events"}


@dataclass(frozen=True, slots=True)
class Recorded:
    type: str  # ADDED / MODIFIED / DELETED
    what: str  # jobs / podgroups / queues / pods / events
    object: dict[str, Any]
    received: float  # unix seconds when the recorder received it

    @property
    def name(self) -> str:
        return str(self.object["metadata"]["name"])


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    nodes: tuple[dict[str, Any], ...]
    queues: tuple[dict[str, Any], ...]  # the queues that existed before the watch (root, default)
    events: tuple[Recorded, ...]

    @property
    def start(self) -> float:
        return self.events[0].received

    @property
    def end(self) -> float:
        return self.events[-1].received

    def of(self, what: str) -> list[Recorded]:
        return [e for e in self.events if e.what == what]

    def last(self, what: str, name: str) -> Recorded:
        """The last event of the named object (it may be a DELETED)."""
        return [e for e in self.of(what) if e.name == name][-1]


def scenario_names() -> list[str]:
    return sorted(p.name.removesuffix(".jsonl") for p in RECORDED.glob("*.jsonl"))


@cache
def load(name: str) -> Scenario:
    initial = json.loads((RECORDED / f"{name}.initial.json").read_text())
    events = []
    with (RECORDED / f"{name}.jsonl").open() as f:
        for line in f:
            raw = json.loads(line)
            obj = raw["object"]
            events.append(Recorded(raw["type"], KIND_TO_PLURAL[obj["kind"]], obj, float(raw["received"])))
    return Scenario(name, tuple(initial["nodes"]["items"]), tuple(initial["queues"]["items"]), tuple(events))
