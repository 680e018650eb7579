"""OOM auto scale-up's writes to the cluster: create the resubmitted Volcano Job, and a core/v1 Event
on the Job that was OOM-killed. RBAC: `create` on jobs.batch.volcano.sh (only when enabled) and on
events (docs/watchdog.md)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from volcano_monitor.core.kube.resources import EVENTS, JOBS
from volcano_monitor.core.kube.rest import ApiUnavailable, request_json

log = logging.getLogger(__name__)

COMPONENT = "volcano-watchdog"
JOB_API = "batch.volcano.sh/v1alpha1"


def _message(body: Any) -> str:
    return str(body.get("message") or body.get("reason") or "")[:300] if isinstance(body, dict) else ""


def create_job(api: client.ApiClient, body: dict[str, Any], timeout: float = 10.0) -> tuple[bool, str]:
    """(done, why). 409 AlreadyExists is done too: the name is deterministic per lineage and attempt,
    so it is this very resubmission, created by an earlier try (a retry after a database error, a
    leader that died before recording it). Raises ApiUnavailable when the API server cannot be reached or
answers 429/5xx; any other answer (403: RBAC, 422: an invalid spec) is final."""
    namespace = body["metadata"]["namespace"]
    status, answer = request_json(api, "POST", JOBS.path(namespace), body, timeout=timeout)
    if status in (200, 201):
        return True, "created"
    if status == 409:
        return True, "already existed (created by an earlier try)"
    if status == 429 or status >= 500:  # the API server's trouble, not a refusal: the next pass tries again
        raise ApiUnavailable(f"creating job {namespace}/{body['metadata']['name']}: HTTP {status}: "
                             f"{_message(answer)}")
    return False, f"HTTP {status}: {_message(answer)}"


def job_event(api: client.ApiClient, namespace: str, name: str, uid: str, reason: str, message: str,
              kind: str, reporter: str, now: float, timeout: float = 10.0) -> bool:
    """An Event about the Job; False when it failed (logged: the database holds the record)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{name[:200]}.oom-scale-up-", "namespace": namespace},
        "involvedObject": {"kind": "Job", "apiVersion": JOB_API, "name": name, "namespace": namespace, "uid": uid},
        "reason": reason, "message": message[:1024], "type": kind,
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT, "reportingInstance": reporter,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    try:
        status, answer = request_json(api, "POST", EVENTS.path(namespace), body, timeout=timeout)
    except Exception as exc:  # ApiUnavailable and anything the client raises: never fail the decision
        log.warning("oom-scale-up: could not create the Event for job %s/%s: %s", namespace, name, exc)
        return False
    if status not in (200, 201):
        log.warning("oom-scale-up: the Event for job %s/%s answered HTTP %s: %s", namespace, name, status,
                    _message(answer))
        return False
    return True
