"""A local stand-in for the chat services the watchdog notifies, for the demo, the benchmark and the
tests: Slack, Feishu/Lark, DingTalk, WeCom, Teams and a generic webhook, each under its own path
(`/slack/...`, `/feishu/...`, ...), answering as the real service does.

Feishu and DingTalk signatures are verified when a secret is configured for them, with the services'
own error bodies on a mismatch, so a wrong signing scheme fails here exactly as it would in
production. `fail()` injects outages (HTTP 5xx, service error codes, hangs) for the next requests.
Failed and refused requests are counted in `rejected`, never stored.

    python -m volcano_monitor.simulator.chatinbox --listen 127.0.0.1:9748      # prints one line per message
    curl -s http://127.0.0.1:9748/messages                      # what arrived, as JSON
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

SERVICES = ("slack", "feishu", "dingtalk", "wecom", "teams", "webhook")
SIGNATURE_WINDOW_SECONDS = 3600
Reply = tuple[int, str, bytes]

_JSON = "application/json; charset=utf-8"
_OK: dict[str, Reply] = {
    "slack": (200, "text/plain", b"ok"),
    "feishu": (200, _JSON, b'{"code":0,"msg":"success","data":{}}'),
    "dingtalk": (200, _JSON, b'{"errcode":0,"errmsg":"ok"}'),
    "wecom": (200, _JSON, b'{"errcode":0,"errmsg":"ok"}'),
    "teams": (202, "text/plain", b""),
    "webhook": (200, _JSON, b'{"status":"ok"}'),
}
# What each service answers when it will not take a message right now (its rate limit): an error code
# in an HTTP 200 where the service has codes, HTTP 429 where it has not.
_BUSY: dict[str, Reply] = {
    "slack": (429, "text/plain", b"rate_limited"),
    "feishu": (200, _JSON, b'{"code":11232,"msg":"frequency limited"}'),
    "dingtalk": (200, _JSON, b'{"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}'),
    "wecom": (200, _JSON, b'{"errcode":45009,"errmsg":"api freq out of limit"}'),
    "teams": (429, _JSON, b'{"error":{"code":"TooManyRequests","message":"Rate limit is exceeded."}}'),
    "webhook": (429, _JSON, b'{"error":"rate limited"}'),
}
_BAD_JSON: dict[str, Reply] = {
    "slack": (400, "text/plain", b"invalid_payload"),
    "feishu": (400, _JSON, b'{"code":9499,"msg":"Bad Request"}'),
    "dingtalk": (400, _JSON, b'{"errcode":40035,"errmsg":"invalid JSON body"}'),
    "wecom": (400, _JSON, b'{"errcode":40035,"errmsg":"invalid JSON body"}'),
    "teams": (400, _JSON, b'{"error":{"code":"InvalidRequestContent","message":"invalid JSON body"}}'),
    "webhook": (400, _JSON, b'{"error":"invalid JSON body"}'),
}
_BAD_SIGN: dict[str, Reply] = {
    "feishu": (200, _JSON, json.dumps({"code": 19021, "msg": "sign match fail or timestamp is not within one hour "
                                                             "from current time"}).encode()),
    "dingtalk": (200, _JSON, b'{"errcode":310000,"errmsg":"sign not match"}'),
}
_NOT_FOUND: Reply = (404, "text/plain", b"no_service")
_MODE = re.compile(r"^(status[1-5]\d\d|errcode|timeout)$")


@dataclass(frozen=True)
class InboxMessage:
    """One message as it arrived; `headers` with lower-case names, `body` the parsed JSON."""

    service: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    received_at: float

    def title(self) -> str:
        """The message's headline, wherever this service keeps it (for the CLI's one line)."""
        body: Any = self.body
        try:
            if self.service == "slack":
                found = body["text"]
            elif self.service == "feishu":
                found = body["card"]["header"]["title"]["content"]
            elif self.service == "dingtalk":
                found = body["markdown"]["title"]
            elif self.service == "wecom":
                found = re.sub(r"<[^>]+>|^#+ ", "", str(body["markdown"]["content"]).split("\n")[0])
            elif self.service == "teams":
                found = body["attachments"][0]["content"]["body"][0]["text"]
            else:
                found = body["title"]
        except (KeyError, IndexError, TypeError):
            found = json.dumps(self.body, ensure_ascii=False)
        return str(found).split("\n")[0][:200]


class ChatInbox:
    """The chat services on one local HTTP port. `start()` after `stop()` binds the same port again,
    so a client sees a refused connection while it is stopped and service again afterwards."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, secrets: dict[str, str] | None = None,
                 on_message: Callable[[InboxMessage], None] | None = None) -> None:
        unknown = set(secrets or {}) - {"feishu", "dingtalk"}
        if unknown:
            raise ValueError(f"only feishu and dingtalk sign messages, not {', '.join(sorted(unknown))}")
        self.host = host
        self.secrets = dict(secrets or {})
        self.hang_seconds = 5.0
        self._port = port
        self._on_message = on_message
        self._messages: list[InboxMessage] = []
        self._rejected = 0
        self._faults: list[str] = []
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def rejected(self) -> int:
        """Requests answered with an error (injected, bad signature, bad JSON, unknown path)."""
        with self._changed:
            return self._rejected

    def start(self) -> ChatInbox:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self.host, self._port), _Handler, self)
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"chatinbox-{self._port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()  # wakes requests hanging in the "timeout" fault
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()
        self._server = self._thread = None

    def __enter__(self) -> ChatInbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def messages(self, service: str | None = None) -> list[InboxMessage]:
        with self._changed:
            return [m for m in self._messages if service is None or m.service == service]

    def wait_for(self, count: int, timeout: float = 5.0, service: str | None = None) -> list[InboxMessage]:
        """The stored messages once there are at least `count` (of `service`); TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [m for m in self._messages if service is None or m.service == service]
                left = deadline - time.monotonic()
                if len(found) >= count:
                    return found
                if left <= 0:
                    raise TimeoutError(f"chat inbox: {len(found)} of {count} messages after {timeout}s")
                self._changed.wait(left)

    def clear(self) -> None:
        """Forget the messages, the rejected count and pending faults."""
        with self._changed:
            self._messages.clear()
            self._faults.clear()
            self._rejected = 0

    def fail(self, mode: str, count: int = 1) -> None:
        """Answer the next `count` requests with a failure: `status500` (any `statusNNN`), `errcode` (the
        service's error code in an HTTP 200, or its 429 where it has no codes) or `timeout` (no answer
        for `hang_seconds`, then the connection closes)."""
        if not _MODE.match(mode):
            raise ValueError(f"unknown fault mode {mode!r} (statusNNN, errcode, timeout)")
        with self._changed:
            self._faults += [mode] * count

    def handle_post(self, path: str, headers: dict[str, str], raw: bytes) -> Reply | None:
        """The reply to a POST; None means hang up without one (the `timeout` fault)."""
        parts = urlsplit(path)
        service = parts.path.strip("/").split("/")[0]
        if service not in SERVICES:
            return self._reject(_NOT_FOUND)
        with self._changed:
            fault = self._faults.pop(0) if self._faults else None
        if fault == "timeout":
            with self._changed:
                self._rejected += 1
            self._stopping.wait(self.hang_seconds)
            return None
        if fault == "errcode":
            return self._reject(_BUSY[service])
        if fault is not None:
            return self._reject((int(fault[len("status"):]), "text/plain", b"injected failure"))
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._reject(_BAD_JSON[service])
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        if service in self.secrets and not self._signed(service, query, body):
            return self._reject(_BAD_SIGN[service])
        message = InboxMessage(service=service, path=parts.path, query=query, headers=headers, body=body,
                               received_at=time.time())
        with self._changed:
            self._messages.append(message)
            self._changed.notify_all()
        if self._on_message is not None:
            self._on_message(message)
        return _OK[service]

    def handle_get(self, path: str) -> Reply:
        parts = urlsplit(path)
        if parts.path.rstrip("/") != "/messages":
            return (404, "text/plain", b"not found")
        service = dict(parse_qsl(parts.query)).get("service")
        data = [asdict(m) for m in self.messages(service)]
        return (200, _JSON, json.dumps(data, ensure_ascii=False).encode())

    def _reject(self, reply: Reply) -> Reply:
        with self._changed:
            self._rejected += 1
        return reply

    def _signed(self, service: str, query: dict[str, str], body: Any) -> bool:
        """The service's own check: the signature over the timestamp, and the timestamp within an hour."""
        secret = self.secrets[service]
        try:
            if service == "feishu":
                timestamp, given = str(body["timestamp"]), str(body["sign"])
                age = abs(time.time() - int(timestamp))
                key, data = f"{timestamp}\n{secret}".encode(), b""
            else:
                timestamp, given = query["timestamp"], query["sign"]
                age = abs(time.time() - int(timestamp) / 1000)
                key, data = secret.encode(), f"{timestamp}\n{secret}".encode()
        except (KeyError, TypeError, ValueError):
            return False
        expected = base64.b64encode(hmac.new(key, data, hashlib.sha256).digest()).decode()
        return age <= SIGNATURE_WINDOW_SECONDS and hmac.compare_digest(expected, given)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], inbox: ChatInbox) -> None:
        self.inbox = inbox
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so a stopped inbox leaves no kept-alive connection behind.
    protocol_version = "HTTP/1.0"
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(min(length, 64 << 20))
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.inbox.handle_post(self.path, headers, raw)
        if reply is not None:
            self._answer(reply)

    def do_GET(self) -> None:
        self._answer(self.server.inbox.handle_get(self.path))

    def _answer(self, reply: Reply) -> None:
        status, content_type, body = reply
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the CLI prints messages, not access logs."""


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def _secret(value: str) -> tuple[str, str]:
    service, _, secret = value.partition("=")
    if service not in ("feishu", "dingtalk") or not secret:
        raise argparse.ArgumentTypeError("expected feishu=SECRET or dingtalk=SECRET")
    return service, secret


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m volcano_monitor.simulator.chatinbox",
                                     description="A local chat inbox for the watchdog's notifications.")
    parser.add_argument("--listen", type=_listen, default=os.environ.get("VOLCANO_CHATINBOX_LISTEN", "127.0.0.1:9748"),
                        help="HOST:PORT (env VOLCANO_CHATINBOX_LISTEN; default 127.0.0.1:9748)")
    parser.add_argument("--secret", type=_secret, action="append", default=[],
                        help="verify signatures: feishu=SECRET or dingtalk=SECRET (repeatable)")
    parser.add_argument("--json", action="store_true", help="print each message as one JSON line")
    args = parser.parse_args(argv)

    def show(message: InboxMessage) -> None:
        if args.json:
            print(json.dumps(asdict(message), ensure_ascii=False), flush=True)
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(message.received_at))
            print(f"{stamp} {message.service:<8} {message.title()}", flush=True)

    host, port = args.listen
    inbox = ChatInbox(host, port, secrets=dict(args.secret), on_message=show)
    try:
        inbox.start()
    except OSError as exc:
        print(f"chatinbox: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"chat inbox listening on {inbox.url} (/{', /'.join(SERVICES)}; GET /messages)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        inbox.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
