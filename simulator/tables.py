"""Server-side printing (`meta.k8s.io/v1` Table), so `kubectl get` shows the same columns it
shows against a real cluster: STATUS for pods, Volcano's printer columns for jobs and podgroups."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from volcano_monitor.simulator.resources import JOBS, NAMESPACES, NODES, PODGROUPS, PODS, QUEUES, ResourceType

if TYPE_CHECKING:
    from aiohttp import web

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]  # name, type, priority, cell


def wants_table(request: web.Request) -> bool:
    """The client asks for a Table (kubectl: `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`)."""
    return "as=Table" in request.headers.get("Accept", "")


def _get(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def human_age(timestamp: Any, now: float | None = None) -> str:
    if not isinstance(timestamp, str):
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<invalid>"
    seconds = int(max(0.0, (now if now is not None else time.time()) - then))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600 * 3:
        return f"{seconds // 60}m"
    if seconds < 86400 * 2:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _age(obj: Obj) -> str:
    return human_age(_get(obj, "metadata", "creationTimestamp"))


def _pod_ready(obj: Obj) -> str:
    statuses = _get(obj, "status", "containerStatuses") or []
    containers = _get(obj, "spec", "containers") or []
    ready = sum(1 for s in statuses if isinstance(s, dict) and s.get("ready"))
    return f"{ready}/{len(containers)}"


def _pod_status(obj: Obj) -> str:
    if _get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    for status in _get(obj, "status", "containerStatuses") or []:
        if not isinstance(status, dict):
            continue
        waiting = _get(status, "state", "waiting", "reason")
        terminated = _get(status, "state", "terminated", "reason")
        if waiting:
            return str(waiting)
        if terminated:
            return str(terminated)  # kubectl shows "Completed", "Error", "OOMKilled"
    return str(_get(obj, "status", "reason") or _get(obj, "status", "phase") or "Unknown")


def _pod_restarts(obj: Obj) -> int:
    statuses = _get(obj, "status", "containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s, dict))


def _node_status(obj: Obj) -> str:
    ready = "Unknown"
    for cond in _get(obj, "status", "conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = "Ready" if cond.get("status") == "True" else "NotReady"
    if _get(obj, "spec", "unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


NAME: Column = ("Name", "string", 0, lambda o: _get(o, "metadata", "name"))
AGE: Column = ("Age", "string", 0, _age)

COLUMNS: dict[ResourceType, list[Column]] = {
    PODS: [
        NAME,
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "integer", 0, _pod_restarts),
        AGE,
        ("IP", "string", 1, lambda o: _get(o, "status", "podIP") or "<none>"),
        ("Node", "string", 1, lambda o: _get(o, "spec", "nodeName") or "<none>"),
    ],
    NODES: [NAME, ("Status", "string", 0, _node_status), AGE],
    NAMESPACES: [NAME, ("Status", "string", 0, lambda o: _get(o, "status", "phase") or "Active"), AGE],
    # Volcano's CRD printer columns.
    JOBS: [
        NAME,
        ("STATUS", "string", 0, lambda o: _get(o, "status", "state", "phase")),
        ("minAvailable", "integer", 0, lambda o: _get(o, "status", "minAvailable")),
        ("RUNNINGS", "integer", 0, lambda o: _get(o, "status", "running")),
        ("AGE", "date", 0, _age),
        ("QUEUE", "string", 1, lambda o: _get(o, "spec", "queue")),
    ],
    PODGROUPS: [
        NAME,
        ("STATUS", "string", 0, lambda o: _get(o, "status", "phase")),
        ("minMember", "integer", 0, lambda o: _get(o, "spec", "minMember")),
        ("RUNNINGS", "integer", 0, lambda o: _get(o, "status", "running")),
        ("AGE", "date", 0, _age),
        ("QUEUE", "string", 1, lambda o: _get(o, "spec", "queue")),
    ],
    QUEUES: [NAME, ("PARENT", "string", 0, lambda o: _get(o, "spec", "parent")), AGE],
}


def _columns(rtype: ResourceType) -> list[Column]:
    return COLUMNS.get(rtype, [NAME, AGE])


def _partial_metadata(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table(rtype: ResourceType, objects: list[Obj], list_meta: Obj, with_definitions: bool = True) -> Obj:
    columns = _columns(rtype)
    result: Obj = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {"name": name, "type": typ, "format": "name" if name == "Name" else "", "description": "",
             "priority": prio}
            for name, typ, prio, _ in columns
        ] if with_definitions else [],
        "rows": [
            {"cells": [cell(obj) for _, _, _, cell in columns], "object": _partial_metadata(obj)}
            for obj in objects
        ],
    }
    return result
