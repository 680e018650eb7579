"""Microsoft Teams through a Power Automate workflow ("Post to a channel when a webhook request is
received"): a `message` whose attachment is an Adaptive Card 1.4 — a coloured title, one container
per alert with a FactSet, `Action.OpenUrl` buttons for the links, and owners mentioned by email
through `msteams.entities`.

Teams refuses cards over 28 KB: the JSON is kept under 25 KB. Card text is Teams markdown, so markup
characters in alert text are backslash-escaped.
"""

from __future__ import annotations

from typing import Any

from volcano_monitor.watchdog.actions.notify.channels.base import Channel, code_error, json_object
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

MAX_ALERTS = 15
MAX_BYTES = 25_000
COLOURS = {"critical": "Attention", "warning": "Warning", "info": "Accent", "resolved": "Good"}
STYLES = {"critical": "attention", "warning": "warning", "info": "accent", "resolved": "good"}
_TABLE = str.maketrans({c: "\\" + c for c in "\\*_"})


def escape(text: str) -> str:
    """Teams markdown knows bold, italic, lists and links: escape their characters, break `](`."""
    return text.translate(_TABLE).replace("](", "]\\(")


def container(alert: AlertView) -> dict[str, Any]:
    head = f"{EMOJI.get(alert.state, '⚪')} **{escape(alert.kind)}** · {escape(alert.state)} — {escape(alert.summary)}"
    facts = [*alert.facts, *alert.times]
    if alert.reasons:
        facts.append(("Reasons", "\n".join(alert.reasons)))
    if alert.recommendation:
        facts.append(("Recommendation", alert.recommendation))
    items: list[dict[str, Any]] = [{"type": "TextBlock", "text": head, "wrap": True}]
    if facts:
        items.append({"type": "FactSet", "facts": [{"title": name, "value": escape(value)} for name, value in facts]})
    if alert.url:
        items.append({"type": "TextBlock", "text": f"[details]({alert.url})", "wrap": True, "isSubtle": True})
    return {"type": "Container", "style": STYLES.get(alert.state, "emphasis"), "separator": True, "items": items}


class Teams(Channel):
    kind = "teams"

    def payload(self, message: Message, now: float) -> dict[str, Any]:
        alerts = ordered(message)
        containers = [container(view(a)) for a in alerts[:MAX_ALERTS]]
        emails = ids(message.mentions.emails)

        def build(shown: int) -> dict[str, Any]:
            body: list[dict[str, Any]] = [{
                "type": "TextBlock", "text": escape(clip(message.title, TITLE_CHARS)), "weight": "Bolder",
                "size": "Medium", "color": COLOURS.get(message.severity, "Warning"), "wrap": True}]
            if emails:
                body.append({"type": "TextBlock", "text": " ".join(f"<at>{e}</at>" for e in emails), "wrap": True})
            body += containers[:shown]
            if shown < len(alerts):
                body.append({"type": "TextBlock", "text": escape(more_text(alerts[shown:])), "isSubtle": True,
                             "wrap": True})
            card: dict[str, Any] = {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard",
                "version": "1.4", "body": body,
                "actions": [{"type": "Action.OpenUrl", "title": label, "url": url}
                            for label, url in message_links(message)],
                "msteams": {"width": "Full", "entities": [
                    {"type": "mention", "text": f"<at>{e}</at>", "mentioned": {"id": e, "name": e}} for e in emails]}}
            return {"type": "message", "attachments": [
                {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}]}

        return build(fit(len(alerts), MAX_ALERTS, lambda n: len(json_bytes(build(n))), MAX_BYTES))

    def body_error(self, body: bytes) -> str | None:
        """Power Automate answers errors as `{"error": {"code": ..., "message": ...}}`."""
        data = json_object(body)
        error = data.get("error") if data else None
        return code_error(error, "code", "message") if isinstance(error, dict) else None
