"""DingTalk custom robot: a markdown message (`msgtype: markdown`). The title line is coloured with
DingTalk's `<font color>`; owners are mentioned by mobile number, both in `at.atMobiles` and as
`@138...` in the text (DingTalk notifies only numbers that appear in both).

With a signing secret (the robot's `SEC...` key) the URL gets `timestamp` (milliseconds) and `sign`:
the URL-encoded base64 HMAC-SHA256, keyed by the secret, of "timestamp\\nsecret". The JSON stays
under 18 KB (DingTalk refuses messages of about 20 KB).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any
from urllib.parse import quote_plus

from volcano_monitor.watchdog.actions.notify.channels.base import Channel, code_error, json_object
from volcano_monitor.watchdog.actions.notify.channels.render import (
    EMOJI,
    TITLE_CHARS,
    clip,
    fit,
    ids,
    json_bytes,
    markdown_escape,
    markdown_lines,
    message_links,
    more_text,
    ordered,
    view,
)
from volcano_monitor.watchdog.actions.notify.message import Message

MAX_ALERTS = 15
MAX_BYTES = 18_000


def sign(timestamp: str, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


class DingTalk(Channel):
    kind = "dingtalk"

    def __init__(self, url: str, secret: str | None = None) -> None:
        super().__init__(url)
        self._secret = secret

    def target(self, now: float) -> str:
        if not self._secret:
            return self._url
        timestamp = str(int(now * 1000))
        separator = "&" if "?" in self._url else "?"
        return f"{self._url}{separator}timestamp={timestamp}&sign={sign(timestamp, self._secret)}"

    def payload(self, message: Message, now: float) -> dict[str, Any]:
        alerts = ordered(message)
        views = [view(a) for a in alerts[:MAX_ALERTS]]
        title = clip(message.title, TITLE_CHARS)
        mobiles = ids(message.mentions.mobiles)

        def build(shown: int) -> dict[str, Any]:
            parts = [f"#### <font color={message.colour}>{EMOJI.get(message.severity, '')} "
                     f"{markdown_escape(title)}</font>"]
            # DingTalk breaks a line only at "  \n" or a blank line.
            parts += ["  \n".join(markdown_lines(v, markdown_escape)) for v in views[:shown]]
            if shown < len(alerts):
                parts.append(markdown_escape(more_text(alerts[shown:])))
            links = message_links(message)
            if links:
                parts.append(" · ".join(f"[{label}]({url})" for label, url in links))
            if mobiles:
                parts.append(" ".join(f"@{m}" for m in mobiles))
            return {"msgtype": "markdown", "markdown": {"title": title, "text": "\n\n".join(parts)},
                    "at": {"atMobiles": mobiles, "isAtAll": False}}

        return build(fit(len(alerts), MAX_ALERTS, lambda n: len(json_bytes(build(n))), MAX_BYTES))

    def body_error(self, body: bytes) -> str | None:
        return code_error(json_object(body), "errcode", "errmsg")

    def secrets(self) -> list[str]:
        return super().secrets() + ([self._secret] if self._secret else [])
