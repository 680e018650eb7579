"""A pod's containers as Volcano's kube-state-metrics fork read them: per container the spec's requests and
limits, and whether its status says running. Parsed once with the pod (the pod view keeps it) and
rendered only with `--compat-kube-state-metrics-fork` (exporter.families.compat)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.fields import bad_type, intern
from volcano_monitor.core.podrequests import Resources, read_resource_list, res_from

__all__ = ["NO_CONTAINERS", "Container", "Containers", "parse_containers"]


@dataclass(frozen=True, slots=True)
class Container:
    """What the fork read of one container: its spec resources and whether its status says running."""

    name: str
    requests: Resources
    limits: Resources


@dataclass(frozen=True, slots=True)
class Containers:
    """A pod's containers (spec) and `(name, running)` per container status, in status order."""

    spec: tuple[Container, ...]
    running: tuple[tuple[str, bool], ...]


NO_CONTAINERS = Containers((), ())


def parse_containers(raw: object, probs: list[str]) -> Containers:
    """`spec.containers[]` requests and limits (not init containers, as the fork) and
    `status.containerStatuses[]` running state. Never raises: bad shapes go to `probs` and are skipped."""
    if type(raw) is not dict:
        return NO_CONTAINERS
    spec, status = raw.get("spec"), raw.get("status")
    containers: list[Container] = []
    for i, c in enumerate(_items(spec, "containers", "spec.", probs)):
        path = f"spec.containers[{i}]."
        name = _name(c, path, probs)
        res = c.get("resources")
        if type(res) is not dict:
            if res is not None:
                probs.append(bad_type(path + "resources", "object", res))
            res = {}
        containers.append(Container(
            name,
            res_from(read_resource_list(res, "requests", path + "resources.", probs)),
            res_from(read_resource_list(res, "limits", path + "resources.", probs))))
    running = []
    for i, cs in enumerate(_items(status, "containerStatuses", "status.", probs)):
        path = f"status.containerStatuses[{i}]."
        name, state = _name(cs, path, probs), cs.get("state")
        if state is not None and type(state) is not dict:
            probs.append(bad_type(path + "state", "object", state))
        running.append((name, type(state) is dict and type(state.get("running")) is dict))
    if not containers and not running:
        return NO_CONTAINERS
    return Containers(tuple(containers), tuple(running))


def _name(item: Mapping[str, Any], path: str, probs: list[str]) -> str:
    name = item.get("name")
    if type(name) is str:
        return intern(name)
    if name is not None:
        probs.append(bad_type(path + "name", "string", name))
    return ""


def _items(parent: object, key: str, path: str, probs: list[str]) -> list[Mapping[str, Any]]:
    if type(parent) is not dict:
        return []
    value = parent.get(key)
    if type(value) is not list:
        if value is not None:
            probs.append(bad_type(path + key, "array", value))
        return []
    out: list[Mapping[str, Any]] = []
    for i, item in enumerate(value):
        if type(item) is dict:
            out.append(item)
        elif item is not None:
            probs.append(bad_type(f"{path}{key}[{i}]", "object", item))
    return out
