"""A rotated bearer token: an HTTP 401 makes the informer read its credentials again and retry at once,
instead of waiting like a 403 (issue 12). A real HTTP server checks the token against the file a
kubelet would rotate; the client is the official one, configured from a kubeconfig with `tokenFile`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simtools import wait_for
from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.config import api_client
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.resources import PODS


class TokenServer(ThreadingHTTPServer):
    """Serves an empty pod list to whoever presents the token now in `token_file`; 401 to anyone else.
    Watches end at once (the informer simply watches again)."""

    daemon_threads = True

    def __init__(self, token_file: Path) -> None:
        self.token_file = token_file
        self.seen: list[tuple[str, int]] = []  # (token presented, status answered)
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(BaseHTTPRequestHandler):
    server: TokenServer

    def do_GET(self) -> None:
        presented = self.headers.get("Authorization", "").removeprefix("Bearer ")
        ok = presented == self.server.token_file.read_text().strip()
        self.server.seen.append((presented, 200 if ok else 401))
        if not ok:
            body: dict[str, Any] = {"kind": "Status", "status": "Failure", "reason": "Unauthorized",
                                    "message": "Unauthorized", "code": 401}
            self._send(401, body)
        elif "watch=" in self.path:
            self._send(200, None)
        else:
            self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": []})

    def _send(self, code: int, body: dict[str, Any] | None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[TokenServer]:
    token_file = tmp_path / "token"
    token_file.write_text("first-token")  # as the kubelet writes it: no newline
    server = TokenServer(token_file)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def kubeconfig(tmp_path: Path, server: TokenServer, user: dict[str, str]) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return str(path)


def test_rotated_token_is_read_again_on_401(token_server: TokenServer, tmp_path: Path) -> None:
    api = api_client(kubeconfig(tmp_path, token_server, {"tokenFile": str(token_server.token_file)}))
    informer: Informer[Any] = Informer(api, PODS, backoff=Backoff(0.05, 0.2), forbidden_retry_seconds=60)
    informer.start()
    try:
        assert informer.wait_synced(10)
        token_server.token_file.write_text("second-token")  # the kubelet rotates the projected token
        started = time.monotonic()
        wait_for(lambda: ("second-token", 200) in token_server.seen, timeout=10)
        assert time.monotonic() - started < 5, "waited like a 403 instead of re-reading the token"
        assert ("first-token", 401) in token_server.seen
        assert informer.request_errors["401"] >= 1
        assert api.credential_reloads == 1
    finally:
        informer.stop()


def test_a_token_the_server_keeps_refusing_is_not_reloaded_in_a_loop(token_server: TokenServer,
                                                                     tmp_path: Path) -> None:
    api = api_client(kubeconfig(tmp_path, token_server, {"token": "wrong"}))
    informer: Informer[Any] = Informer(api, PODS, backoff=Backoff(0.05, 0.2), forbidden_retry_seconds=60)
    informer.start()
    try:
        wait_for(lambda: informer.state == "forbidden", timeout=10)
        assert api.credential_reloads == 1  # one retry with fresh credentials, then the slow RBAC-style wait
        assert [status for _, status in token_server.seen] == [401, 401]
        assert not informer.synced.is_set()
    finally:
        informer.stop()
