"""Generic JSON webhook: the stable, documented `volcano-monitor/v1` schema (docs/notifications.md),
for anything that is not one of the chat services — an incident tool, a script, a bridge.

Every AlertItem field is sent as it is, cleaned of characters JSON cannot carry. At most 1000 alerts
go in one message; `truncated_alerts` says how many more the group had. The group key goes in the
`X-Volcano-Monitor-Group-Key` header too (percent-encoded where it is not printable ASCII), so a
receiver can deduplicate without parsing the body.
"""

from __future__ import annotations

import string
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from volcano_monitor.watchdog.actions.notify.channels.base import Channel
from volcano_monitor.watchdog.actions.notify.channels.render import clean, ordered
from volcano_monitor.watchdog.actions.notify.message import Message

SCHEMA = "volcano-monitor/v1"
MAX_ALERTS = 1000
GROUP_KEY_HEADER = "X-Volcano-Monitor-Group-Key"
_HEADER_SAFE = "".join(c for c in string.printable if c not in "%\r\n\t\x0b\x0c")


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(k)): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cleaned(v) for v in value]
    return value


class JsonWebhook(Channel):
    kind = "webhook"

    def __init__(self, url: str, bearer_token: str | None = None) -> None:
        super().__init__(url)
        self._token = bearer_token

    def payload(self, message: Message, now: float) -> dict[str, Any]:
        alerts = ordered(message)
        mentions = {name: list(values) for name, values in asdict(message.mentions).items()}
        payload: dict[str, Any] = _cleaned({
            "schema": SCHEMA, "receiver": message.receiver, "status": message.status,
            "group_key": message.group_key, "group_labels": message.group_labels, "title": message.title,
            "severity": message.severity, "colour": message.colour,
            "alerts": [asdict(a) for a in alerts[:MAX_ALERTS]],
            "truncated_alerts": max(len(alerts) - MAX_ALERTS, 0),
            "links": message.links, "mentions": mentions})
        return payload

    def headers(self, message: Message) -> dict[str, str]:
        headers = super().headers(message)
        headers[GROUP_KEY_HEADER] = quote(message.group_key, safe=_HEADER_SAFE)
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def secrets(self) -> list[str]:
        return super().secrets() + ([self._token] if self._token else [])
