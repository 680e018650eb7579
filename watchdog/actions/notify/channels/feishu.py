"""Feishu / Lark custom bot: an interactive card whose header colour follows the severity, one
`lark_md` block per alert, owners mentioned with `<at id=ou_...></at>`, and buttons for the links.

With a signing secret the body carries `timestamp` (unix seconds) and `sign`, the base64 HMAC-SHA256
whose *key* is "timestamp\\nsecret" over an empty message, as Feishu verifies it. The request body
must stay under 20 KB: the card is cut to what fits in 18 KB.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from volcano_monitor.watchdog.actions.notify.channels.base import Channel, code_error, json_object
from volcano_monitor.watchdog.actions.notify.channels.render import (
    TITLE_CHARS,
    clip,
    fit,
    ids,
    json_bytes,
    markdown_lines,
    message_links,
    more_text,
    ordered,
    view,
)
from volcano_monitor.watchdog.actions.notify.message import Message

MAX_ALERTS = 15
MAX_BYTES = 18_000
TEMPLATES = {"critical": "red", "warning": "orange", "info": "blue", "resolved": "green"}
# lark_md reads these as markup (`<at>`, `*bold*`, `~~strike~~`, code); entities show them as themselves.
_TABLE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "*": "&#42;", "~": "&#126;", "`": "&#96;",
                        "\\": "&#92;"})


def escape(text: str) -> str:
    """Alert text as lark_md shows it literally; `](` is broken so no text becomes a link."""
    return text.translate(_TABLE).replace("](", "]&#40;")


def sign(timestamp: str, secret: str) -> str:
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


class Feishu(Channel):
    kind = "feishu"

    def __init__(self, url: str, secret: str | None = None) -> None:
        super().__init__(url)
        self._secret = secret

    def payload(self, message: Message, now: float) -> dict[str, Any]:
        alerts = ordered(message)
        views = [view(a) for a in alerts[:MAX_ALERTS]]

        def build(shown: int) -> dict[str, Any]:
            elements: list[dict[str, Any]] = []
            mentions = ids(message.mentions.feishu_open_ids)
            if mentions:
                elements.append({"tag": "div", "text": {"tag": "lark_md",
                                                        "content": " ".join(f"<at id={m}></at>" for m in mentions)}})
            for i, alert in enumerate(views[:shown]):
                if i:
                    elements.append({"tag": "hr"})
                content = "\n".join(markdown_lines(alert, escape, "• "))
                elements.append({"tag": "div", "text": {"tag": "lark_md", "content": content}})
            if shown < len(alerts):
                elements.append({"tag": "note", "elements": [{"tag": "plain_text",
                                                              "content": more_text(alerts[shown:])}]})
            links = message_links(message)
            if links:
                elements.append({"tag": "action", "actions": [
                    {"tag": "button", "text": {"tag": "plain_text", "content": label}, "type": "default", "url": url}
                    for label, url in links]})
            header = {"title": {"tag": "plain_text", "content": clip(message.title, TITLE_CHARS)},
                      "template": TEMPLATES.get(message.severity, "orange")}
            return {"msg_type": "interactive",
                    "card": {"config": {"wide_screen_mode": True}, "header": header, "elements": elements}}

        # The signature adds ~80 bytes, well within the margin left under Feishu's 20 KB.
        data = build(fit(len(alerts), MAX_ALERTS, lambda n: len(json_bytes(build(n))), MAX_BYTES))
        if self._secret:
            timestamp = str(int(now))
            data["timestamp"] = timestamp
            data["sign"] = sign(timestamp, self._secret)
        return data

    def body_error(self, body: bytes) -> str | None:
        """`{"code": 19021, "msg": ...}`, or `StatusCode` / `StatusMessage` from older bots."""
        data = json_object(body)
        return code_error(data, "code", "msg") or code_error(data, "StatusCode", "StatusMessage")

    def secrets(self) -> list[str]:
        return super().secrets() + ([self._secret] if self._secret else [])
