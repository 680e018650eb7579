"""What every chat channel is: a renderer of a `Message` into one HTTP request, and a judge of the
service's answer. `send()` posts the request and turns every outcome into a `SendResult` that the
outbox can act on (retry later, or give up), without ever raising for the network.

Webhook URLs, signing secrets and bearer tokens are credentials. They live only in private attributes
of a channel; `repr()` shows the kind and host, and errors are composed here from status codes and the
service's own error codes, never from exception text or URLs (httpx puts the URL in its messages).
"""

from __future__ import annotations

import json
import re
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

import httpx

from volcano_monitor.watchdog.actions.notify.channels.render import json_bytes
from volcano_monitor.watchdog.actions.notify.message import Message

ERROR_CHARS = 300
JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}


@dataclass(frozen=True)
class Request:
    """One HTTP POST, ready to send. The URL and headers may hold credentials: kept out of repr()."""

    url: str = field(repr=False)
    body: bytes = field(repr=False)
    headers: dict[str, str] = field(repr=False)


@dataclass(frozen=True)
class SendResult:
    """The outcome of one attempt. `retryable` False means trying again cannot help (a wrong URL or
    token): the outbox should stop and report. `status` is the HTTP status when one came back."""

    ok: bool
    error: str = ""
    retryable: bool = True
    status: int | None = None


class Channel(ABC):
    """A chat service's renderer. Subclasses set `kind`, build the service's JSON in `payload()` and
    read its error codes in `body_error()`."""

    kind: ClassVar[str]

    def __init__(self, url: str) -> None:
        self._url = url

    @abstractmethod
    def payload(self, message: Message, now: float) -> dict[str, Any]:
        """The service's native JSON for `message`; `now` (unix seconds) for signatures."""

    def target(self, now: float) -> str:
        """The URL to post to (DingTalk adds its signature here)."""
        return self._url

    def headers(self, message: Message) -> dict[str, str]:
        return dict(JSON_HEADERS)

    def request(self, message: Message, now: float) -> Request:
        return Request(url=self.target(now), body=json_bytes(self.payload(message, now)), headers=self.headers(message))

    def body_error(self, body: bytes) -> str | None:
        """The service's error code and text in a response body, if it holds one."""
        return None

    def failure(self, status: int, body: bytes) -> str | None:
        """None when the service took the message; otherwise a short reason (no secrets)."""
        detail = self.body_error(body)
        if 200 <= status < 300:
            return detail
        return f"HTTP {status}" + (f" ({detail})" if detail else "")

    def secrets(self) -> list[str]:
        """Every credential this channel holds, so `send()` can scrub them from a service's echo:
        the URL, its query values (access_token, key, sig) and long path segments (Slack's token)."""
        parts = urlsplit(self._url)
        found = [self._url]
        found += [value for _, value in parse_qsl(parts.query) if len(value) >= 6]
        found += [segment for segment in parts.path.split("/") if len(segment) >= 16]
        if parts.password:
            found.append(parts.password)
        return found

    def __repr__(self) -> str:
        try:
            host = urlsplit(self._url).hostname or "?"
        except ValueError:
            host = "?"
        return f"{type(self).__name__}(kind={self.kind!r}, host={host!r})"


def json_object(body: bytes) -> dict[str, Any] | None:
    """The response body as a JSON object, or None when it is not one."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def code_error(data: dict[str, Any] | None, code_key: str, text_key: str) -> str | None:
    """`errcode 310000: sign not match` when `data[code_key]` is a non-zero code, else None."""
    if data is None or code_key not in data:
        return None
    code = data.get(code_key)
    if code in (0, "0", None):
        return None
    return f"{code_key} {code}: {data.get(text_key, '')}".rstrip(": ")


def _cause_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _network_reason(exc: Exception) -> tuple[str, bool]:
    """A reason written here from the exception's type (its text holds the URL), and whether a
    later attempt could succeed."""
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return "invalid webhook URL", False
    timeouts = {httpx.ConnectTimeout: "connect timeout", httpx.ReadTimeout: "read timeout",
                httpx.WriteTimeout: "write timeout", httpx.PoolTimeout: "connection pool timeout"}
    for kind, reason in timeouts.items():
        if isinstance(exc, kind):
            return reason, True
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", True
    chain = _cause_chain(exc)
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "name resolution failed", True
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused", True
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect", True
    return f"network error ({type(exc).__name__})", True


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def send(channel: Channel, message: Message, client: httpx.Client, now: float) -> SendResult:
    """Render and post `message`; the client's timeout is the caller's. Connection failures, timeouts,
    HTTP 429/5xx and service error codes in a 200 are retryable; other 4xx are permanent."""
    secrets = channel.secrets()
    try:
        request = channel.request(message, now)
    except Exception as exc:  # a rendering bug must not stop the sender loop; retrying can't fix it
        return SendResult(ok=False, error=f"cannot render the message ({type(exc).__name__})", retryable=False)
    try:
        response = client.post(request.url, content=request.body, headers=request.headers)
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        reason, retryable = _network_reason(exc)
        return SendResult(ok=False, error=reason, retryable=retryable)
    status = response.status_code
    failure = channel.failure(status, response.content)
    if failure is None:
        return SendResult(ok=True, retryable=False, status=status)
    retryable = status == 429 or status >= 500 or 200 <= status < 300
    return SendResult(ok=False, error=_scrub(failure, secrets), retryable=retryable, status=status)
