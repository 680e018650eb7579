"""The controller's writes to the cluster: a guarded merge patch of a Queue's `spec.capability`, and a
core/v1 Event about the Queue. These (and the Lease) are all the watchdog ever writes; docs/capability.md
lists the RBAC rules they need.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from volcano_monitor.core.kube.resources import EVENTS, QUEUES
from volcano_monitor.core.kube.rest import request_json
from volcano_monitor.core.model import Queue, parse_queue
from volcano_monitor.watchdog.actions.capability.guardrails import format_quantity

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "volcano-watchdog"


class PatchFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def _message(body: Any) -> str:
    return str(body.get("message") or body.get("reason") or "")[:300] if isinstance(body, dict) else ""


def get_queue(api: client.ApiClient, name: str, timeout: float = 10.0) -> Queue | None:
    """The Queue as the API server has it now (None: it is gone)."""
    status, body = request_json(api, "GET", QUEUES.path(None, name), timeout=timeout)
    if status == 404:
        return None
    if status != 200:
        raise PatchFailed(status, f"reading queue {name}: {_message(body)}")
    return parse_queue(body)


def patch_capability(api: client.ApiClient, queue: Queue, changes: dict[str, float],
                     timeout: float = 10.0) -> Queue | None:
    """Set `changes` in the Queue's spec.capability, only if the Queue is still at `queue.resource_version`.

    A JSON merge patch touches only the named resources (others keep their values) and carries
    metadata.resourceVersion, so the API server refuses it with 409 when anyone changed the Queue since it
    was read: None is returned and the caller re-reads and re-plans rather than overwrite that change."""
    body = {"metadata": {"resourceVersion": queue.resource_version},
            "spec": {"capability": {r: format_quantity(r, v) for r, v in sorted(changes.items())}}}
    status, answer = request_json(api, "PATCH", QUEUES.path(None, queue.name), body, content_type=MERGE_PATCH,
                                  timeout=timeout)
    if status == 409:
        return None
    if status != 200:
        raise PatchFailed(status, _message(answer))
    return parse_queue(answer)


def queue_event(api: client.ApiClient, namespace: str, queue: Queue, reason: str, message: str,
                reporter: str, now: float, timeout: float = 10.0) -> bool:
    """Create a Normal Event about the (cluster-scoped) Queue in `namespace`; False when it failed (logged:
    an Event is a courtesy, the database holds the record)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{queue.name}.capability-", "namespace": namespace},
        "involvedObject": {"kind": "Queue", "apiVersion": "scheduling.volcano.sh/v1beta1", "name": queue.name,
                           "uid": queue.uid, "resourceVersion": queue.resource_version},
        "reason": reason, "message": message[:1024], "type": "Normal",
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT, "reportingInstance": reporter,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    try:
        status, answer = request_json(api, "POST", EVENTS.path(namespace), body, timeout=timeout)
    except Exception as exc:  # ApiUnavailable and anything the client raises: never fail the change
        log.warning("capability: could not create the Event for queue %s: %s", queue.name, exc)
        return False
    if status not in (200, 201):
        log.warning("capability: creating the Event for queue %s answered HTTP %s: %s", queue.name, status,
                    _message(answer))
        return False
    return True
