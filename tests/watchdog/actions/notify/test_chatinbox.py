"""The local chat inbox: answers like the real services, verifies Feishu and DingTalk signatures (computed
here from the services' documented schemes), injects faults, restarts on the same port, lists messages."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote_plus

import httpx
import pytest

from volcano_monitor.simulator.chatinbox import ChatInbox

ROOT = Path(__file__).resolve().parents[4]
FEISHU_SECRET = "fs-secret"
DINGTALK_SECRET = "SECdt-secret"


@pytest.fixture
def inbox() -> Iterator[ChatInbox]:
    with ChatInbox(secrets={"feishu": FEISHU_SECRET, "dingtalk": DINGTALK_SECRET}) as server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=3.0) as http:
        yield http


def feishu_body(timestamp: int, secret: str) -> dict[str, object]:
    key = f"{timestamp}\n{secret}".encode()
    sign = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    return {"msg_type": "text", "content": {"text": "hi"}, "timestamp": str(timestamp), "sign": sign}


def dingtalk_query(timestamp_ms: int, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return f"timestamp={timestamp_ms}&sign={quote_plus(base64.b64encode(digest).decode())}"


@pytest.mark.parametrize(("service", "status", "body"), [
    ("slack", 200, b"ok"), ("feishu", 200, b'{"code":0,"msg":"success","data":{}}'),
    ("wecom", 200, b'{"errcode":0,"errmsg":"ok"}'), ("teams", 202, b""), ("webhook", 200, b'{"status":"ok"}')])
def test_answers_like_the_service(service: str, status: int, body: bytes, client: httpx.Client) -> None:
    with ChatInbox() as inbox:
        response = client.post(f"{inbox.url}/{service}/hook/abc?key=k1", json={"text": "héllo"})
        assert (response.status_code, response.content) == (status, body)
        [message] = inbox.wait_for(1)
    assert (message.service, message.path, message.query, message.body) == (
        service, f"/{service}/hook/abc", {"key": "k1"}, {"text": "héllo"})
    assert message.headers["content-type"] == "application/json" and abs(message.received_at - time.time()) < 5


def test_feishu_signature_is_verified(inbox: ChatInbox, client: httpx.Client) -> None:
    url = f"{inbox.url}/feishu/open-apis/bot/v2/hook/x"
    now = int(time.time())
    refused = {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"}
    for body in (feishu_body(now, "wrong"), feishu_body(now - 7200, FEISHU_SECRET), {"msg_type": "text"}):
        response = client.post(url, json=body)
        assert response.status_code == 200 and response.json() == refused
    assert client.post(url, json=feishu_body(now - 60, FEISHU_SECRET)).json()["code"] == 0
    assert len(inbox.messages("feishu")) == 1 and inbox.rejected == 3


def test_dingtalk_signature_is_verified(inbox: ChatInbox, client: httpx.Client) -> None:
    url = f"{inbox.url}/dingtalk/robot/send?access_token=t0"
    now_ms = int(time.time() * 1000)
    for query in (dingtalk_query(now_ms, "SECwrong"), dingtalk_query(now_ms - 2 * 3600 * 1000, DINGTALK_SECRET), ""):
        response = client.post(f"{url}&{query}", json={"msgtype": "text", "text": {"content": "x"}})
        assert response.json() == {"errcode": 310000, "errmsg": "sign not match"}
    response = client.post(f"{url}&{dingtalk_query(now_ms, DINGTALK_SECRET)}", json={"msgtype": "text"})
    assert response.json() == {"errcode": 0, "errmsg": "ok"}
    [message] = inbox.messages("dingtalk")
    assert message.query["access_token"] == "t0" and inbox.rejected == 3


def test_restart_reuses_the_port(client: httpx.Client) -> None:
    inbox = ChatInbox().start()
    try:
        url, port = inbox.url, inbox.port
        assert client.post(f"{url}/slack/x", json={"n": 1}).text == "ok"
        inbox.stop()
        with pytest.raises(httpx.ConnectError):
            client.post(f"{url}/slack/x", json={"n": 2})
        inbox.start()
        assert inbox.port == port and inbox.url == url
        assert client.post(f"{url}/slack/x", json={"n": 3}).text == "ok"
        assert [m.body["n"] for m in inbox.messages()] == [1, 3]
    finally:
        inbox.stop()


def test_fail_status500_for_the_next_requests(inbox: ChatInbox, client: httpx.Client) -> None:
    inbox.fail("status500", 2)
    statuses = [client.post(f"{inbox.url}/wecom/send", json={"n": n}).status_code for n in range(3)]
    assert statuses == [500, 500, 200]
    assert inbox.rejected == 2 and [m.body["n"] for m in inbox.messages()] == [2]


@pytest.mark.parametrize(("service", "status", "code"), [
    ("feishu", 200, ("code", 11232)), ("dingtalk", 200, ("errcode", 130101)), ("wecom", 200, ("errcode", 45009)),
    ("slack", 429, None), ("teams", 429, None), ("webhook", 429, None)])
def test_fail_errcode(service: str, status: int, code: tuple[str, int] | None, client: httpx.Client) -> None:
    with ChatInbox() as inbox:
        inbox.fail("errcode")
        response = client.post(f"{inbox.url}/{service}/x", json={})
        assert response.status_code == status
        if code is not None:
            assert response.json()[code[0]] == code[1]
        assert inbox.messages() == [] and inbox.rejected == 1
        assert client.post(f"{inbox.url}/{service}/x", json={}).status_code in (200, 202)


def test_fail_timeout_hangs_up(inbox: ChatInbox) -> None:
    inbox.hang_seconds = 1.0
    inbox.fail("timeout")
    with httpx.Client(timeout=0.2) as quick, pytest.raises(httpx.ReadTimeout):
        quick.post(f"{inbox.url}/slack/x", json={})
    assert inbox.rejected == 1 and inbox.messages() == []


def test_bad_requests(inbox: ChatInbox, client: httpx.Client) -> None:
    with pytest.raises(ValueError, match="unknown fault mode"):
        inbox.fail("status5000")
    with pytest.raises(ValueError, match="only feishu and dingtalk"):
        ChatInbox(secrets={"slack": "x"})
    assert client.post(f"{inbox.url}/slack/x", content=b"{not json").content == b"invalid_payload"
    assert client.post(f"{inbox.url}/irc/x", json={}).status_code == 404
    assert inbox.rejected == 2 and inbox.messages() == []


def test_get_messages_clear_and_wait(inbox: ChatInbox, client: httpx.Client) -> None:
    threading.Timer(0.1, lambda: client.post(f"{inbox.url}/webhook/a?x=1", json={"title": "t1"})).start()
    assert [m.body for m in inbox.wait_for(1, timeout=3)] == [{"title": "t1"}]
    client.post(f"{inbox.url}/teams/b", json={"type": "message"})
    listed = client.get(f"{inbox.url}/messages").json()
    assert [(m["service"], m["path"], m["query"], m["body"]) for m in listed] == [
        ("webhook", "/webhook/a", {"x": "1"}, {"title": "t1"}), ("teams", "/teams/b", {}, {"type": "message"})]
    assert set(listed[0]) == {"service", "path", "query", "headers", "body", "received_at"}
    assert [m["service"] for m in client.get(f"{inbox.url}/messages?service=teams").json()] == ["teams"]
    inbox.clear()
    assert client.get(f"{inbox.url}/messages").json() == [] and inbox.rejected == 0
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="0 of 1"):
        inbox.wait_for(1, timeout=0.2)
    assert time.monotonic() - started < 2


def test_cli_prints_one_line_per_message(client: httpx.Client) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "volcano_monitor.simulator.chatinbox", "--listen", "127.0.0.1:0"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("chat inbox listening on http://127.0.0.1:")
        url = first.split()[4]
        client.post(f"{url}/dingtalk/robot/send", json={"msgtype": "markdown",
                                                        "markdown": {"title": "[FIRING:2] JobFailed", "text": "x"}})
        line = process.stdout.readline()
        assert line.split()[1:] == ["dingtalk", "[FIRING:2]", "JobFailed"]
        assert json.loads(client.get(f"{url}/messages").text)[0]["service"] == "dingtalk"
    finally:
        process.terminate()
        process.wait(timeout=5)


def test_cli_bad_listen_exits_2() -> None:
    done = subprocess.run([sys.executable, "-m", "volcano_monitor.simulator.chatinbox", "--listen", "nowhere"],
                          cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "expected HOST:PORT" in done.stderr
