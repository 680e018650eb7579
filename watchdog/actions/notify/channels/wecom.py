"""WeCom (WeChat Work) group robot: a markdown message. WeCom's markdown has three colours
(`<font color="warning|info|comment">`) and mentions by user id (`<@userid>`); it cannot mention by
mobile in markdown, so `mobiles` are not used here.

The content may hold at most 4096 bytes of UTF-8: alerts are added while they fit, and the result is
cut on a character boundary as a last guard.
"""

from __future__ import annotations

from typing import Any

from volcano_monitor.watchdog.actions.notify.channels.base import Channel, code_error, json_object
from volcano_monitor.watchdog.actions.notify.channels.render import (
    EMOJI,
    TITLE_CHARS,
    clip,
    clip_utf8,
    fit,
    ids,
    markdown_escape,
    markdown_lines,
    message_links,
    more_text,
    ordered,
    view,
)
from volcano_monitor.watchdog.actions.notify.message import Message

MAX_ALERTS = 10
MAX_CONTENT_BYTES = 4096
COLOURS = {"critical": "warning", "warning": "warning", "info": "comment", "resolved": "info"}


class WeCom(Channel):
    kind = "wecom"

    def payload(self, message: Message, now: float) -> dict[str, Any]:
        alerts = ordered(message)
        views = [view(a) for a in alerts[:MAX_ALERTS]]
        title = markdown_escape(clip(message.title, TITLE_CHARS))
        users = ids(message.mentions.wecom_user_ids)

        def build(shown: int) -> str:
            colour = COLOURS.get(message.severity, "warning")
            parts = [f"### <font color=\"{colour}\">{EMOJI.get(message.severity, '')} {title}</font>"]
            parts += ["\n".join(markdown_lines(v, markdown_escape)) for v in views[:shown]]
            if shown < len(alerts):
                parts.append(f"<font color=\"comment\">{markdown_escape(more_text(alerts[shown:]))}</font>")
            links = message_links(message)
            if links:
                parts.append(" · ".join(f"[{label}]({url})" for label, url in links))
            if users:
                parts.append(" ".join(f"<@{user}>" for user in users))
            return "\n\n".join(parts)

        shown = fit(len(alerts), MAX_ALERTS, lambda n: len(build(n).encode()), MAX_CONTENT_BYTES)
        return {"msgtype": "markdown", "markdown": {"content": clip_utf8(build(shown), MAX_CONTENT_BYTES)}}

    def body_error(self, body: bytes) -> str | None:
        return code_error(json_object(body), "errcode", "errmsg")
