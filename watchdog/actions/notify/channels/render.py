"""Pieces every channel renders the same way: which alerts come first, how long a field may be, how a
time or a link is shown, and how many alerts fit in a service's size limit.

Text from alerts is untrusted (a pod's termination message can hold anything): it is cleaned of lone
surrogates and control characters here, so no payload can fail to encode, and each channel escapes it
for its own markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from volcano_monitor.watchdog.actions.notify.message import AlertItem, Message

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
EMOJI = {"critical": "🔴", "warning": "🟠", "info": "🔵", "resolved": "✅"}
SUMMARY_CHARS = 500
FIELD_CHARS = 200
RECOMMENDATION_CHARS = 500
REASONS_SHOWN = 5
TITLE_CHARS = 150

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ID = re.compile(r"^[A-Za-z0-9_.@+:-]{1,128}$")


def clean(text: str) -> str:
    """Lone surrogates become U+FFFD (UTF-8 can't encode them) and control characters other than
    newline and tab are dropped (some chat renderers stop at them)."""
    return _CONTROL.sub("", _SURROGATE.sub("\ufffd", text))


def clip(text: str, chars: int) -> str:
    """`text` cleaned and cut to at most `chars` characters, ending in "…" when cut."""
    text = clean(text)
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + "…"


def clip_utf8(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8 without splitting a character (WeCom counts bytes)."""
    data = clean(text).encode("utf-8")
    if len(data) <= max_bytes:
        return data.decode("utf-8")
    ellipsis = "…".encode()
    cut = data[: max(max_bytes - len(ellipsis), 0)].decode("utf-8", "ignore")
    return cut + "…" if max_bytes >= len(ellipsis) else cut


def json_bytes(payload: Any) -> bytes:
    """Compact UTF-8 JSON: sizes are measured on exactly the bytes that are sent."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def ordered(message: Message) -> list[AlertItem]:
    """Firing alerts, most severe first, then resolved ones: what survives truncation matters most."""
    firing = sorted(message.firing, key=lambda a: SEVERITY_ORDER.get(a.severity, 3))
    return [*firing, *message.resolved]


def state(alert: AlertItem) -> str:
    """The alert's severity while firing, "resolved" after."""
    return "resolved" if alert.status == "resolved" else alert.severity


def when(rfc3339: str) -> str:
    """`2024-05-01 12:00:05 UTC` for a readable time in every chat, whatever the viewer's locale."""
    try:
        moment = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return clip(rfc3339, 40)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def safe_url(url: str) -> str | None:
    """An http(s) URL with the characters that end a link in some markup percent-encoded; None for
    anything else (a `javascript:` link must never reach a chat)."""
    url = clean(url).strip()
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return None
    if scheme not in ("http", "https") or len(url) > 2000:
        return None
    return quote(url, safe="/:?#[]@!$&'*+,;=%~-._")


def ids(values: Iterable[str]) -> list[str]:
    """Mention ids that look like ids: one from a config typo can't inject markup into a message."""
    return [v for v in dict.fromkeys(values) if _ID.match(v)]


@dataclass(frozen=True)
class AlertView:
    """An alert's fields, cleaned and clipped, ready for a channel's markup."""

    kind: str
    state: str
    summary: str
    facts: list[tuple[str, str]]
    reasons: list[str]
    recommendation: str
    times: list[tuple[str, str]]
    url: str | None


def view(alert: AlertItem) -> AlertView:
    facts = [(name, clip(value, FIELD_CHARS)) for name, value in (
        ("Namespace", alert.namespace), ("Queue", alert.queue), ("Job", alert.job_name),
        ("Subject", alert.subject)) if value]
    reasons = [clip(r, FIELD_CHARS) for r in alert.reasons[:REASONS_SHOWN]]
    if len(alert.reasons) > REASONS_SHOWN:
        reasons.append(f"… and {len(alert.reasons) - REASONS_SHOWN} more")
    times = [(name, when(value)) for name, value in (("Started", alert.started_at),
                                                      ("Resolved", alert.resolved_at)) if value]
    return AlertView(kind=clip(alert.kind, FIELD_CHARS), state=state(alert), summary=clip(alert.summary, SUMMARY_CHARS),
                     facts=facts, reasons=reasons, recommendation=clip(alert.recommendation, RECOMMENDATION_CHARS),
                     times=times, url=safe_url(alert.url) if alert.url else None)


def message_links(message: Message) -> list[tuple[str, str]]:
    """(label, url) of the message's Grafana and watchdog API links, in that order, when set."""
    labels = {"grafana": "Grafana", "api": "Watchdog"}
    links = [(labels[k], safe_url(message.links[k])) for k in labels if message.links.get(k)]
    return [(label, url) for label, url in links if url]


def more_text(hidden: list[AlertItem]) -> str:
    """`… and 480 more (470 firing, 10 resolved)`: what a truncated message left out."""
    firing = sum(1 for a in hidden if a.status == "firing")
    parts = [f"{n} {word}" for n, word in ((firing, "firing"), (len(hidden) - firing, "resolved")) if n]
    return f"… and {len(hidden)} more ({', '.join(parts)})"


def fit(total: int, most: int, size_of: Callable[[int], int], limit: int) -> int:
    """The largest count n <= min(total, most) of alerts whose rendering `size_of(n)` stays within
    `limit`; 0 when even the first one does not fit. Binary search: sizes grow with n."""
    low, high = 0, min(total, most)
    if size_of(high) <= limit:
        return high
    while low < high - 1:
        middle = (low + high) // 2
        if size_of(middle) <= limit:
            low = middle
        else:
            high = middle
    return low


_MARKDOWN = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*_~"}})


def markdown_escape(text: str) -> str:
    """For DingTalk's and WeCom's markdown, which also read HTML tags (`<font>`): emphasis and code
    characters are backslash-escaped, `& < >` written as entities and `](` broken so no text becomes a
    link. Brackets alone stay as they are: `[FIRING:2]` must read as itself."""
    return text.translate(_MARKDOWN).replace("](", "]\\(")


def markdown_lines(alert: AlertView, escape: Callable[[str], str], bullet: str = "- ") -> list[str]:
    """An alert as markdown lines (`**bold**`, `[text](url)`), shared by Feishu, DingTalk and WeCom."""
    emoji = EMOJI.get(alert.state, "⚪")
    lines = [f"{emoji} **{escape(alert.kind)}** · {escape(alert.state)} — {escape(alert.summary)}"]
    if alert.facts:
        lines.append(" · ".join(f"**{name}:** {escape(value)}" for name, value in alert.facts))
    if alert.reasons:
        lines.append("**Reasons:**")
        lines += [f"{bullet}{escape(r)}" for r in alert.reasons]
    if alert.recommendation:
        lines.append(f"**Recommendation:** {escape(alert.recommendation)}")
    tail = [f"{name} {value}" for name, value in alert.times]
    if alert.url:
        tail.append(f"[details]({alert.url})")
    if tail:
        lines.append(" · ".join(tail))
    return lines
