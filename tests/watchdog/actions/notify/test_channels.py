"""The chat channels against the local chat inbox: each service's payload shape, signatures recomputed
here from the services' documented schemes, failure classification, secrets kept out of errors, size
limits for huge groups, and odd text."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, fields
from typing import Any
from urllib.parse import parse_qs, quote_plus, unquote, urlsplit

import httpx
import pytest

from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.watchdog.actions.notify.channels import (
    Channel,
    DingTalk,
    Feishu,
    JsonWebhook,
    Slack,
    Teams,
    WeCom,
    build_channel,
    send,
)
from volcano_monitor.watchdog.actions.notify.channels.render import clip_utf8, safe_url
from volcano_monitor.watchdog.actions.notify.message import AlertItem, Message, MessageMentions
from volcano_monitor.watchdog.actions.notify.settings import Receiver

KINDS = ("slack", "feishu", "dingtalk", "wecom", "teams", "webhook")
FEISHU_SECRET = "feishu-signing-secret-7Qx"
DINGTALK_SECRET = "SECdingtalk0123456789abcdef"
SLACK_TOKEN = "xSlackPathToken0123456789abc"
FEISHU_HOOK = "f3d1c2b0-feishu-hook-token"
DINGTALK_TOKEN = "dingtalk0access0token0123"
WECOM_KEY = "wecom-key-693a91f6-7xxx"
TEAMS_SIG = "teamsWorkflowSig0123456789"
BEARER = "bearer-token-very-secret-42"
SECRETS = (FEISHU_SECRET, DINGTALK_SECRET, SLACK_TOKEN, FEISHU_HOOK, DINGTALK_TOKEN, WECOM_KEY, TEAMS_SIG, BEARER)
CRITICAL_RED = "#d0312d"


def alert(n: int = 0, **changes: Any) -> AlertItem:
    base: dict[str, Any] = dict(
        kind="JobFailed", severity="critical", status="firing", summary=f"Job ml-team/train-{n} failed",
        namespace="ml-team", queue="gpu-a100", job_name=f"train-{n}", subject=f"job/ml-team/train-{n}",
        reasons=("worker-0/main: OOMKilled, exit 137", "worker-1/main: Error, exit 1"),
        recommendation="set memory to 24Gi (p90 peak 19.7Gi + 15 %)", started_at="2024-05-01T12:00:00Z",
        fingerprint=f"fp{n}", url=f"https://watchdog.example/api/v1/alerts/{n}", labels={"team": "ml"})
    base.update(changes)
    return AlertItem(**base)


def realistic(**changes: Any) -> Message:
    """Two firing alerts (one critical, one warning) with reasons, recommendation and links, one resolved;
    the resolved one comes first so the test sees the channels put firing alerts first."""
    resolved = alert(3, kind="PodOOMKilled", severity="warning", status="resolved", summary="pod recovered",
                     reasons=(), recommendation="", resolved_at="2024-05-01T12:30:00+00:00")
    idle = alert(2, kind="JobIdle", severity="warning", summary="GPU idle for 2h", reasons=("gpu util 0 %",))
    data: dict[str, Any] = dict(
        receiver="ml-oncall", group_key='{}:{queue="gpu-a100"}', group_labels={"queue": "gpu-a100"},
        status="firing", alerts=(resolved, idle, alert(1)),
        links={"grafana": "https://grafana.example/d/volcano?var-queue=gpu-a100",
               "api": "https://watchdog.example/api/v1/alerts?queue=gpu-a100"},
        mentions=MessageMentions(slack_user_ids=("U024BE7LH",), mobiles=("13800138000",),
                                 feishu_open_ids=("ou_7d8a6e6df7621556ce0d21922b676706ccs",),
                                 wecom_user_ids=("zhangsan",), emails=("alice@example.com",)))
    data.update(changes)
    return Message(**data)


def receiver(kind: str, base: str, **over: Any) -> Receiver:
    config = {
        "slack": {"url": f"{base}/slack/services/T0001/B0002/{SLACK_TOKEN}", "channel": "#ml-alerts"},
        "feishu": {"url": f"{base}/feishu/open-apis/bot/v2/hook/{FEISHU_HOOK}", "secret": FEISHU_SECRET},
        "dingtalk": {"url": f"{base}/dingtalk/robot/send?access_token={DINGTALK_TOKEN}", "secret": DINGTALK_SECRET},
        "wecom": {"url": f"{base}/wecom/cgi-bin/webhook/send?key={WECOM_KEY}"},
        "teams": {"url": f"{base}/teams/workflows/w1/triggers/manual/paths/invoke?api-version=2016-06-01"
                         f"&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={TEAMS_SIG}"},
        "webhook": {"url": f"{base}/webhook/incidents", "bearer_token": BEARER},
    }[kind]
    return Receiver.model_validate({"name": f"r-{kind}", kind: {**config, **over}})


@pytest.fixture
def inbox() -> Iterator[ChatInbox]:
    with ChatInbox(secrets={"feishu": FEISHU_SECRET, "dingtalk": DINGTALK_SECRET}) as server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=3.0) as http:
        yield http


def deliver(kind: str, inbox: ChatInbox, client: httpx.Client, message: Message | None = None) -> dict[str, Any]:
    """Send through the real channel and HTTP; the body as the inbox parsed it."""
    result = send(build_channel(receiver(kind, inbox.url)), message or realistic(), client, time.time())
    assert result.ok, result
    body: dict[str, Any] = inbox.wait_for(1, timeout=2)[-1].body
    return body


def test_build_channel_makes_each_kind() -> None:
    expected = {"slack": Slack, "feishu": Feishu, "dingtalk": DingTalk, "wecom": WeCom, "teams": Teams,
                "webhook": JsonWebhook}
    for kind in KINDS:
        channel = build_channel(receiver(kind, "https://chat.example"))
        assert type(channel) is expected[kind] and channel.kind == kind


def test_slack(inbox: ChatInbox, client: httpx.Client) -> None:
    body = deliver("slack", inbox, client)
    message = realistic()
    assert body["channel"] == "#ml-alerts"
    assert body["text"].startswith(message.title) and "<@U024BE7LH>" in body["text"]
    attachment = body["attachments"][0]
    assert attachment["color"] == CRITICAL_RED
    blocks = attachment["blocks"]
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": message.title}}
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    assert len(sections) == 3
    first, second, third = sections
    assert "*JobFailed* · critical — Job ml-team/train-1 failed" in first  # most severe first
    assert "worker-0/main: OOMKilled, exit 137" in first and "set memory to 24Gi" in first
    assert "*Namespace:* ml-team" in first and "*Queue:* gpu-a100" in first and "*Job:* train-1" in first
    assert "job/ml-team/train-1" in first and "Started 2024-05-01 12:00:00 UTC" in first
    assert "<https://watchdog.example/api/v1/alerts/1|details>" in first
    assert "JobIdle" in second and "PodOOMKilled* · resolved" in third
    assert "Resolved 2024-05-01 12:30:00 UTC" in third
    context = [e["text"] for b in blocks if b["type"] == "context" for e in b["elements"]]
    assert "<https://grafana.example/d/volcano?var-queue=gpu-a100|Grafana>" in context[-1]
    assert "<https://watchdog.example/api/v1/alerts?queue=gpu-a100|Watchdog>" in context[-1]


def feishu_sign(timestamp: str, secret: str) -> str:
    """Feishu's documented scheme: HMAC-SHA256 keyed by "timestamp\\nsecret" over nothing, base64."""
    digest = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def dingtalk_sign(timestamp: str, secret: str) -> str:
    """DingTalk's documented scheme: HMAC-SHA256 keyed by the secret over "timestamp\\nsecret", base64."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def test_feishu_card_and_signature(inbox: ChatInbox, client: httpx.Client) -> None:
    before = int(time.time())
    body = deliver("feishu", inbox, client)
    assert body["msg_type"] == "interactive"
    assert before <= int(body["timestamp"]) <= time.time()
    assert body["sign"] == feishu_sign(body["timestamp"], FEISHU_SECRET)
    card = body["card"]
    assert card["header"] == {"title": {"tag": "plain_text", "content": realistic().title}, "template": "red"}
    texts = [e["text"]["content"] for e in card["elements"] if e["tag"] == "div"]
    assert texts[0] == "<at id=ou_7d8a6e6df7621556ce0d21922b676706ccs></at>"
    assert "**JobFailed** · critical" in texts[1] and "• worker-0/main: OOMKilled, exit 137" in texts[1]
    assert "**Recommendation:** set memory to 24Gi (p90 peak 19.7Gi + 15 %)" in texts[1]
    assert "[details](https://watchdog.example/api/v1/alerts/1)" in texts[1]
    assert len(texts) == 4 and "resolved" in texts[3]
    buttons = [b for e in card["elements"] if e["tag"] == "action" for b in e["actions"]]
    assert [(b["text"]["content"], b["url"]) for b in buttons] == [
        ("Grafana", "https://grafana.example/d/volcano?var-queue=gpu-a100"),
        ("Watchdog", "https://watchdog.example/api/v1/alerts?queue=gpu-a100")]


@pytest.mark.parametrize(("severity", "template"), [("warning", "orange"), ("info", "blue"), (None, "green")])
def test_feishu_header_colour_follows_severity(severity: str | None, template: str) -> None:
    item = alert(status="resolved") if severity is None else alert(severity=severity)
    payload = Feishu("https://open.feishu.cn/hook/x").payload(realistic(alerts=(item,)), 0)
    assert payload["card"]["header"]["template"] == template
    assert "sign" not in payload  # no secret, no signature


def test_dingtalk_markdown_and_signed_url(inbox: ChatInbox, client: httpx.Client) -> None:
    before = time.time()
    body = deliver("dingtalk", inbox, client)
    query = inbox.messages()[0].query
    assert query["access_token"] == DINGTALK_TOKEN
    assert before * 1000 - 1 <= int(query["timestamp"]) <= time.time() * 1000
    assert query["sign"] == dingtalk_sign(query["timestamp"], DINGTALK_SECRET)
    # The sign is URL-encoded in the URL itself (base64 has + / =).
    request = build_channel(receiver("dingtalk", inbox.url)).request(realistic(), 1714564800.123)
    params = dict(p.split("=", 1) for p in urlsplit(request.url).query.split("&"))
    assert params["timestamp"] == "1714564800123"
    assert params["sign"] == quote_plus(dingtalk_sign("1714564800123", DINGTALK_SECRET))
    assert body["msgtype"] == "markdown" and body["markdown"]["title"] == realistic().title
    assert body["at"] == {"atMobiles": ["13800138000"], "isAtAll": False}
    text = body["markdown"]["text"]
    assert text.endswith("@13800138000") and f"<font color={CRITICAL_RED}>" in text
    assert "worker-0/main: OOMKilled, exit 137" in text and "set memory to 24Gi" in text
    assert "[Grafana](https://grafana.example/d/volcano?var-queue=gpu-a100)" in text
    assert text.index("JobFailed") < text.index("JobIdle") < text.index("PodOOMKilled")


def test_wecom_markdown(inbox: ChatInbox, client: httpx.Client) -> None:
    body = deliver("wecom", inbox, client)
    assert inbox.messages()[0].query == {"key": WECOM_KEY}
    assert body["msgtype"] == "markdown" and set(body) == {"msgtype", "markdown"}
    content = body["markdown"]["content"]
    assert content.startswith('### <font color="warning">') and "<@zhangsan>" in content
    assert "**JobFailed** · critical" in content and "- worker-1/main: Error, exit 1" in content
    assert "**Namespace:** ml-team" in content and "[details](https://watchdog.example/api/v1/alerts/1)" in content
    assert len(content.encode()) <= 4096


def test_teams_adaptive_card(inbox: ChatInbox, client: httpx.Client) -> None:
    result = send(build_channel(receiver("teams", inbox.url)), realistic(), client, time.time())
    assert result.ok and result.status == 202
    body = inbox.wait_for(1)[0].body
    assert body["type"] == "message"
    attachment = body["attachments"][0]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["body"][0]["text"] == realistic().title and card["body"][0]["color"] == "Attention"
    assert card["body"][1]["text"] == "<at>alice@example.com</at>"
    assert card["msteams"]["entities"] == [{"type": "mention", "text": "<at>alice@example.com</at>",
                                            "mentioned": {"id": "alice@example.com", "name": "alice@example.com"}}]
    containers = [b for b in card["body"] if b["type"] == "Container"]
    assert [c["style"] for c in containers] == ["attention", "warning", "good"]
    facts = {f["title"]: f["value"] for f in containers[0]["items"][1]["facts"]}
    assert facts["Namespace"] == "ml-team" and facts["Queue"] == "gpu-a100" and facts["Job"] == "train-1"
    assert "OOMKilled, exit 137" in facts["Reasons"] and facts["Started"] == "2024-05-01 12:00:00 UTC"
    assert [(a["type"], a["title"]) for a in card["actions"]] == [("Action.OpenUrl", "Grafana"),
                                                                  ("Action.OpenUrl", "Watchdog")]


def test_generic_webhook_schema(inbox: ChatInbox, client: httpx.Client) -> None:
    message = realistic()
    body = deliver("webhook", inbox, client, message)
    headers = inbox.messages()[0].headers
    assert headers["authorization"] == f"Bearer {BEARER}"
    assert headers["x-volcano-monitor-group-key"] == message.group_key
    assert headers["content-type"].startswith("application/json")
    assert body["schema"] == "volcano-monitor/v1"
    assert {k: body[k] for k in ("receiver", "status", "group_key", "group_labels", "title", "severity")} == {
        "receiver": "ml-oncall", "status": "firing", "group_key": '{}:{queue="gpu-a100"}',
        "group_labels": {"queue": "gpu-a100"}, "title": message.title, "severity": "critical"}
    assert body["links"] == message.links and body["truncated_alerts"] == 0
    assert body["mentions"]["mobiles"] == ["13800138000"] and body["mentions"]["emails"] == ["alice@example.com"]
    names = {f.name for f in fields(AlertItem)}
    assert all(set(a) == names for a in body["alerts"])
    by_fingerprint = {a["fingerprint"]: a for a in body["alerts"]}
    for item in message.alerts:
        expected = asdict(item)
        expected["reasons"] = list(item.reasons)
        assert by_fingerprint[item.fingerprint] == expected


def test_webhook_group_key_header_is_ascii() -> None:
    message = realistic(group_key='{}:{queue="研究-队列"}\r\nX-Evil: 1')
    headers = JsonWebhook("https://hooks.example/x").request(message, 0).headers
    value = headers["X-Volcano-Monitor-Group-Key"]
    assert value.isascii() and "\r" not in value and "\n" not in value
    assert unquote(value) == message.group_key and "Authorization" not in headers


def test_wrong_secret_is_refused_with_the_service_code(inbox: ChatInbox, client: httpx.Client) -> None:
    for kind, code, text in (("feishu", "19021", "sign match fail"), ("dingtalk", "310000", "sign not match")):
        channel = build_channel(receiver(kind, inbox.url, secret="not-the-secret"))
        result = send(channel, realistic(), client, time.time())
        assert not result.ok and result.retryable and result.status == 200
        assert code in result.error and text in result.error
    assert inbox.messages() == [] and inbox.rejected == 2


@pytest.mark.parametrize("kind", KINDS)
def test_server_errors_are_retryable_and_404_is_not(kind: str, inbox: ChatInbox, client: httpx.Client) -> None:
    channel = build_channel(receiver(kind, inbox.url))
    inbox.fail("status500")
    result = send(channel, realistic(), client, time.time())
    assert (result.ok, result.retryable, result.status, result.error) == (False, True, 500, "HTTP 500")
    missing = build_channel(receiver(kind, inbox.url + "/no-such-hook"))
    result = send(missing, realistic(), client, time.time())
    assert not result.ok and not result.retryable and result.status == 404 and result.error.startswith("HTTP 404")
    assert send(channel, realistic(), client, time.time()).ok  # the fault was for one request only


@pytest.mark.parametrize(("kind", "needle"), [
    ("feishu", "code 11232: frequency limited"), ("dingtalk", "errcode 130101: send too fast"),
    ("wecom", "errcode 45009: api freq out of limit"), ("slack", "HTTP 429"), ("teams", "HTTP 429"),
    ("webhook", "HTTP 429")])
def test_service_refusals_are_retryable(kind: str, needle: str, inbox: ChatInbox, client: httpx.Client) -> None:
    inbox.fail("errcode")
    result = send(build_channel(receiver(kind, inbox.url)), realistic(), client, time.time())
    assert not result.ok and result.retryable and needle in result.error
    assert inbox.messages() == []


def test_connection_refused_then_back(inbox: ChatInbox, client: httpx.Client) -> None:
    channel = build_channel(receiver("wecom", inbox.url))
    inbox.stop()
    result = send(channel, realistic(), client, time.time())
    assert (result.ok, result.retryable, result.error, result.status) == (False, True, "connection refused", None)
    inbox.start()
    assert send(channel, realistic(), client, time.time()).ok


def test_timeout_is_retryable(inbox: ChatInbox) -> None:
    inbox.hang_seconds = 2.0
    inbox.fail("timeout")
    with httpx.Client(timeout=0.3) as quick:
        result = send(build_channel(receiver("slack", inbox.url)), realistic(), quick, time.time())
    assert (result.ok, result.retryable, result.error) == (False, True, "read timeout")


def test_older_feishu_status_code_and_body_errors() -> None:
    channel = Feishu("https://open.feishu.cn/open-apis/bot/v2/hook/x")
    assert channel.failure(200, b'{"code":0,"msg":"success","data":{}}') is None
    assert channel.failure(200, b'{"StatusCode":0,"StatusMessage":"success"}') is None
    assert channel.failure(200, b'{"StatusCode":19024,"StatusMessage":"Key Words Not Found"}') == (
        "StatusCode 19024: Key Words Not Found")
    assert channel.failure(400, b'{"code":9499,"msg":"Bad Request"}') == "HTTP 400 (code 9499: Bad Request)"
    assert DingTalk("https://oapi.dingtalk.com/robot/send").failure(200, b'{"errcode":0,"errmsg":"ok"}') is None
    assert Slack("https://hooks.slack.com/x").failure(403, b"action_prohibited") == "HTTP 403 (action_prohibited)"


def mock_client(handler: Any) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler), timeout=1.0)


def test_secrets_never_in_errors_or_reprs() -> None:
    channels: list[Channel] = [build_channel(receiver(kind, "https://chat.example")) for kind in KINDS]

    def echo(request: httpx.Request) -> httpx.Response:
        """A service that echoes the URL and token in its error (code services in a 200, others in a 403)."""
        coded = request.url.path.split("/")[1] in ("feishu", "dingtalk", "wecom")
        return httpx.Response(200 if coded else 403, json={
            "errcode": 300001, "errmsg": f"token {request.url} bad", "code": 19021,
            "msg": f"{request.url} {request.headers.get('authorization')}",
            "error": {"code": f"{request.url}", "message": str(request.headers)}})

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url} with {request.headers}")

    def dns(request: httpx.Request) -> httpx.Response:
        try:
            raise socket.gaierror(-2, f"Name or service not known {request.url}")
        except socket.gaierror as exc:
            raise httpx.ConnectError(str(request.url)) from exc

    errors = []
    for channel in channels:
        for http in (mock_client(echo), mock_client(refuse), mock_client(dns),
                     mock_client(lambda r: httpx.Response(500, text=str(r.url)))):
            result = send(channel, realistic(), http, time.time())
            assert not result.ok and result.error and len(result.error) <= 300
            errors.append(result.error)
        text = repr(channel) + repr(channel.request(realistic(), time.time()))
        assert not [s for s in SECRETS if s in text], text
    assert not [(s, e) for e in errors for s in SECRETS if s in e]
    assert "cannot connect" in errors and "name resolution failed" in errors and "HTTP 500" in errors
    assert any("300001" in e for e in errors) and any("19021" in e for e in errors)


def test_invalid_url_and_render_bug_are_permanent(client: httpx.Client) -> None:
    result = send(Slack("ftp://hooks.example/x"), realistic(), client, time.time())
    assert (result.ok, result.retryable, result.error) == (False, False, "invalid webhook URL")

    class Broken(Slack):
        def payload(self, message: Message, now: float) -> dict[str, Any]:
            raise KeyError(SLACK_TOKEN)

    result = send(Broken(f"https://hooks.slack.com/services/{SLACK_TOKEN}"), realistic(), client, time.time())
    assert (result.ok, result.retryable) == (False, False) and SLACK_TOKEN not in result.error


def huge(count: int = 500) -> Message:
    """Resolved alerts first, then warnings, then criticals: the channels must reorder."""
    items = [alert(n, summary=f"alert number {n} " + "x" * 120,
                   severity="critical" if n % 3 == 2 else "warning", status="resolved" if n % 3 == 0 else "firing",
                   kind=f"Kind{n}", reasons=tuple(f"worker-{i}/main: OOMKilled, exit 137" for i in range(8)))
             for n in range(count)]
    items.sort(key=lambda a: (a.status == "firing", a.severity == "critical"))
    return realistic(alerts=tuple(items))


# Documented limits of the services (docs/notifications.md): bytes of the JSON body unless noted.
LIMITS = {"slack": 40_000, "feishu": 20 * 1024, "dingtalk": 20_000, "teams": 28 * 1024}


@pytest.mark.parametrize("kind", ["slack", "feishu", "dingtalk", "wecom", "teams"])
def test_huge_group_stays_within_limits(kind: str, inbox: ChatInbox, client: httpx.Client) -> None:
    message = huge()
    channel = build_channel(receiver(kind, inbox.url))
    size = len(channel.request(message, time.time()).body)
    body = deliver(kind, inbox, client, message)
    text = json.dumps(body, ensure_ascii=False)
    shown = text.count("alert number ")
    assert 3 <= shown <= 20
    assert f"… and {500 - shown} more" in text
    assert "Kind2 " in text or "Kind2*" in text  # a critical alert comes first
    assert "alert number 0 " not in text  # a resolved one does not make it
    if kind == "wecom":
        assert len(body["markdown"]["content"].encode()) <= 4096
    else:
        assert size <= LIMITS[kind]
    if kind == "slack":
        blocks = body["attachments"][0]["blocks"]
        assert len(blocks) <= 50 and len(blocks[0]["text"]["text"]) <= 150
        assert all(len(b["text"]["text"]) <= 3000 for b in blocks if b["type"] == "section")


def test_generic_webhook_caps_alerts_at_1000() -> None:
    channel = JsonWebhook("https://hooks.example/x")
    assert len(channel.payload(huge(500), 0)["alerts"]) == 500
    payload = channel.payload(huge(1200), 0)
    assert len(payload["alerts"]) == 1000 and payload["truncated_alerts"] == 200


ODD = 'x *bold* _it_ ~s~ `code` <b>&amp; [link](http://evil) | # 研究 😀 "q" \\ back\x00\x1b \udc80 end'


@pytest.mark.parametrize("kind", KINDS)
def test_odd_text_survives(kind: str, inbox: ChatInbox, client: httpx.Client) -> None:
    message = realistic(alerts=(alert(1, summary=ODD, reasons=("<at>all</at> 🙂",)),))
    body = deliver(kind, inbox, client, message)
    text = json.dumps(body, ensure_ascii=False)
    assert "研究 😀" in text and "🙂" in text and "\x00" not in json.loads(json.dumps(text))
    assert "\\u0000" not in text and "\\u001b" not in text and "\ufffd end" in text
    escaped = {
        "slack": ["&lt;b&gt;&amp;amp;", "&lt;at&gt;all&lt;/at&gt;"],
        "feishu": ["&#42;bold&#42;", "&lt;b&gt;&amp;amp;", "]&#40;http://evil", "&#96;code&#96;"],
        "dingtalk": ["\\\\*bold\\\\*", "\\\\_it\\\\_", "&lt;b&gt;&amp;amp;", "]\\\\(http://evil"],
        "wecom": ["\\\\*bold\\\\*", "\\\\`code\\\\`", "&lt;at&gt;all&lt;/at&gt;", "]\\\\(http://evil"],
        "teams": ["\\\\*bold\\\\*", "\\\\_it\\\\_", "]\\\\(http://evil"],
        "webhook": [json.dumps(ODD.replace("\x00", "").replace("\x1b", "").replace("\udc80", "\ufffd"),
                               ensure_ascii=False)],
    }[kind]
    for needle in escaped:
        assert needle in text, (kind, needle)
    if kind not in ("webhook", "slack"):  # Slack's links are <url|text>, and "<" is escaped above
        assert "[link](http://evil)" not in text


def test_unsafe_links_and_mention_ids_are_dropped() -> None:
    assert safe_url("javascript:alert(1)") is None and safe_url("https://g.example/a b|c>") == (
        "https://g.example/a%20b%7Cc%3E")
    message = realistic(links={"grafana": "javascript:alert(1)"},
                        mentions=MessageMentions(slack_user_ids=("U1", "U2> <!channel")))
    payload = Slack("https://hooks.slack.com/x").payload(message, 0)
    text = json.dumps(payload)
    assert "javascript" not in text and "<@U1>" in text and "!channel" not in text


def test_clip_utf8_cuts_on_a_character_boundary() -> None:
    text = "研究" * 3000
    for limit in (4096, 4095, 4094, 10):
        cut = clip_utf8(text, limit)
        assert len(cut.encode()) <= limit and cut.endswith("…") and cut[:-1] == text[: len(cut) - 1]
    assert clip_utf8("short", 4096) == "short"


def test_request_url_holds_the_query_of_the_configured_url() -> None:
    request = build_channel(receiver("teams", "https://prod.westus.logic.azure.com")).request(realistic(), 0)
    query = parse_qs(urlsplit(request.url).query)
    assert query["sig"] == [TEAMS_SIG] and query["api-version"] == ["2016-06-01"]
