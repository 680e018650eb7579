"""Discovery documents (`/api`, `/apis`, `/apis/<group>/<version>`), as kubectl and the client read them."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from volcano_monitor.simulator.resources import BASE_TYPES, GROUP_PREFERRED_VERSION, ResourceType
from volcano_monitor.simulator.store import ApiError

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-volcano-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def _group_entry(group: str) -> dict[str, Any]:
    version = GROUP_PREFERRED_VERSION[group]
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list(served: Collection[ResourceType] = BASE_TYPES) -> dict[str, Any]:
    groups = sorted({rt.group for rt in served if rt.group})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_entry(g) for g in groups]}


def api_group(group: str, served: Collection[ResourceType] = BASE_TYPES) -> dict[str, Any]:
    if not group or group not in {rt.group for rt in served}:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource (group {group!r})")
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group)}


def _resource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.group.endswith("volcano.sh"):
        entry["categories"] = ["all"] if rt.plural == "jobs" else []
    entries = [entry]
    if rt.has_status:
        entries.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                        "kind": rt.kind, "verbs": ["get", "patch", "update"]})
    return entries


def resource_list(group: str, version: str, served: Collection[ResourceType] = BASE_TYPES) -> dict[str, Any]:
    types = [rt for rt in served if rt.group == group and rt.version == version]
    if not types:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({group}/{version})")
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [entry for rt in types for entry in _resource_entries(rt)],
    }
