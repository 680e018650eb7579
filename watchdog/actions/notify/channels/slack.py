"""Slack incoming webhook: one attachment coloured by severity, holding Block Kit blocks (a header, a
section per alert, context lines for what was left out and for the links). Owners are mentioned in
the top-level text, where Slack notifies them.

Limits kept: 50 blocks per message, 150 characters in a header, 3000 in a section; the whole JSON
under 30 KB. Slack's mrkdwn has no escape for `*` or `_`; only `&`, `<` and `>` must be escaped.
"""

from __future__ import annotations

from typing import Any

from volcano_monitor.watchdog.actions.notify.channels.base import Channel
from volcano_monitor.watchdog.actions.notify.channels.render import (
    EMOJI,
    TITLE_CHARS,
    AlertView,
    clip,
    fit,
    ids,
    json_bytes,
    message_links,
    more_text,
    ordered,
    view,
)
from volcano_monitor.watchdog.actions.notify.message import Message

MAX_ALERTS = 20
MAX_BYTES = 30_000
SECTION_CHARS = 3000


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def link(url: str, label: str) -> str:
    return f"<{url}|{escape(label)}>"


def alert_text(alert: AlertView) -> str:
    lines = [f"{EMOJI.get(alert.state, '⚪')} *{escape(alert.kind)}* · {escape(alert.state)} — {escape(alert.summary)}"]
    if alert.facts:
        lines.append("  ".join(f"*{name}:* {escape(value)}" for name, value in alert.facts))
    if alert.reasons:
        lines.append("*Reasons:*\n" + "\n".join(f"• {escape(r)}" for r in alert.reasons))
    if alert.recommendation:
        lines.append(f"*Recommendation:* {escape(alert.recommendation)}")
    tail = [f"{name} {value}" for name, value in alert.times]
    if alert.url:
        tail.append(link(alert.url, "details"))
    if tail:
        lines.append(" · ".join(tail))
    return clip("\n".join(lines), SECTION_CHARS)


class Slack(Channel):
    kind = "slack"

    def __init__(self, url: str, channel: str | None = None) -> None:
        super().__init__(url)
        self._channel = channel

    def payload(self, message: Message, now: float) -> dict[str, Any]:
        alerts = ordered(message)
        views = [view(a) for a in alerts[:MAX_ALERTS]]

        def build(shown: int) -> dict[str, Any]:
            title = clip(message.title, TITLE_CHARS)
            blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": title}}]
            blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": alert_text(v)}} for v in views[:shown]]
            if shown < len(alerts):
                blocks.append({"type": "context", "elements": [{"type": "mrkdwn",
                                                                "text": escape(more_text(alerts[shown:]))}]})
            links = message_links(message)
            if links:
                blocks.append({"type": "context", "elements": [{"type": "mrkdwn",
                                                                "text": " · ".join(link(u, t) for t, u in links)}]})
            text = escape(title)
            mentions = ids(message.mentions.slack_user_ids)
            if mentions:
                text += "\n" + " ".join(f"<@{user}>" for user in mentions)
            data: dict[str, Any] = {"text": text,
                                    "attachments": [{"color": message.colour, "fallback": title, "blocks": blocks}]}
            if self._channel:
                data["channel"] = self._channel
            return data

        shown = fit(len(alerts), MAX_ALERTS, lambda n: len(json_bytes(build(n))), MAX_BYTES)
        return build(shown)

    def body_error(self, body: bytes) -> str | None:
        """Slack answers errors as one word in plain text (`invalid_payload`, `no_service`)."""
        text = body.decode("utf-8", "replace").strip()
        if text == "ok" or not text:
            return None
        return text[:60] if text.replace("_", "").isalnum() else None

    def failure(self, status: int, body: bytes) -> str | None:
        if 200 <= status < 300:
            return None  # a 200 from Slack means posted, whatever its body says
        return super().failure(status, body)
