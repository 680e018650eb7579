"""The small raw-JSON client the watchdog uses for its few writes to the cluster (the election Lease,
Queue patches, Events, Job deletions) and reads the generated models do not fit: the official client
authenticates and builds the URL, but its generated models are not needed for these objects. Statuses
come back to the caller, who decides what 404 or 409 mean.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import urllib3
from kubernetes import client

__all__ = ["ApiUnavailable", "micro_time", "parse_time", "request_json", "to_object"]

JSON = "application/json"


class ApiUnavailable(Exception):
    """The API server could not be reached or did not answer in time."""


def request_json(api: client.ApiClient, method: str, path: str, body: Any = None, *,
                 query: list[tuple[str, str]] | None = None, content_type: str = JSON,
                 timeout: float = 10.0) -> tuple[int, Any]:
    """One request with a JSON body; returns (HTTP status, decoded JSON body or None). Non-2xx statuses
    are returned, not raised: the callers decide what 404 or 409 mean. Connection failures and timeouts
    raise `ApiUnavailable`."""
    headers = {"Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    try:
        method_, url, headers_, body_, _ = api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"])
        rest = api.call_api(method_, url, header_params=headers_, body=body_, _request_timeout=(timeout, timeout))
        response: urllib3.BaseHTTPResponse = rest.response
        data = response.data
        response.release_conn()
    except (urllib3.exceptions.HTTPError, OSError, client.ApiException, ValueError) as exc:
        raise ApiUnavailable(f"{type(exc).__name__}: {exc}") from exc
    try:
        decoded = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        decoded = None
    return response.status, decoded


def micro_time(epoch: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def to_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
