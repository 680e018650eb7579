"""What a channel turns into a chat message: plain data, stored as JSON in the outbox (so a retry
sends exactly what the first attempt sent) and rendered by one module per chat service."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["SEVERITY_COLOURS", "AlertItem", "Message", "MessageMentions", "rfc3339"]

def rfc3339(value: datetime | None) -> str:
    """How messages write times: `2026-11-24T12:00:00Z` ("" for none)."""
    return value.isoformat().replace("+00:00", "Z") if value is not None else ""


# Severity colours, shared by every channel that can colour a message.
SEVERITY_COLOURS = {"critical": "#d0312d", "warning": "#f2a900", "info": "#2d7be5", "resolved": "#2e9b4f"}


@dataclass(frozen=True)
class AlertItem:
    """One alert as a message shows it. `status`: "firing" or "resolved". `reasons`: the pods'
    termination reasons ("worker-0/main: OOMKilled, exit 137"); `recommendation`: a right-sized request
    in words, when the watchdog has one; `source`: "watchdog" or "alertmanager"."""

    kind: str
    severity: str
    status: str
    summary: str
    namespace: str = ""
    queue: str = ""
    job_name: str = ""
    subject: str = ""
    reasons: tuple[str, ...] = ()
    recommendation: str = ""
    started_at: str = ""  # RFC 3339
    resolved_at: str = ""
    source: str = "watchdog"
    fingerprint: str = ""
    url: str = ""  # the alert's page in the watchdog UI (or the Alertmanager generator URL)
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertItem:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["reasons"] = tuple(str(r) for r in known.get("reasons") or ())
        known["labels"] = {str(k): str(v) for k, v in (known.get("labels") or {}).items()}
        return cls(**known)


@dataclass(frozen=True)
class MessageMentions:
    """Owners of the namespaces/queues in the message, by each service's own kind of id."""

    slack_user_ids: tuple[str, ...] = ()
    mobiles: tuple[str, ...] = ()
    feishu_open_ids: tuple[str, ...] = ()
    wecom_user_ids: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return any((self.slack_user_ids, self.mobiles, self.feishu_open_ids, self.wecom_user_ids, self.emails))


@dataclass(frozen=True)
class Message:
    """One notification about one group of alerts, to one receiver.

    `status` is "firing" when any alert in it fires, else "resolved". `links`: {"grafana": url,
    "api": url} where configured, each naming the group's cluster (`cluster=`, `var-cluster=`): one UI may
    serve a fleet of clusters (docs/fleet.md). `group_labels`: the labels the route groups by, with this group's
    values."""

    receiver: str
    group_key: str
    group_labels: dict[str, str]
    status: str
    alerts: tuple[AlertItem, ...]
    links: dict[str, str] = field(default_factory=dict)
    mentions: MessageMentions = field(default_factory=MessageMentions)

    @property
    def firing(self) -> tuple[AlertItem, ...]:
        return tuple(a for a in self.alerts if a.status == "firing")

    @property
    def resolved(self) -> tuple[AlertItem, ...]:
        return tuple(a for a in self.alerts if a.status == "resolved")

    @property
    def severity(self) -> str:
        """The most severe firing alert's severity; "resolved" when nothing fires."""
        order = ("critical", "warning", "info")
        firing = {a.severity for a in self.firing}
        return next((s for s in order if s in firing), "info" if firing else "resolved")

    @property
    def colour(self) -> str:
        return SEVERITY_COLOURS.get(self.severity, SEVERITY_COLOURS["warning"])

    @property
    def title(self) -> str:
        """`[FIRING:2] JobFailed queue=prod` — Alertmanager's way of naming a group."""
        kinds = sorted({a.kind for a in self.alerts})
        head = f"[FIRING:{len(self.firing)}]" if self.firing else "[RESOLVED]"
        where = " ".join(f"{k}={v}" for k, v in sorted(self.group_labels.items()) if k not in ("alertname", "kind"))
        return " ".join(part for part in (head, ", ".join(kinds), where) if part)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        mentions = data.get("mentions") or {}
        return cls(
            receiver=str(data["receiver"]), group_key=str(data["group_key"]),
            group_labels={str(k): str(v) for k, v in (data.get("group_labels") or {}).items()},
            status=str(data["status"]),
            alerts=tuple(AlertItem.from_dict(a) for a in data.get("alerts") or ()),
            links={str(k): str(v) for k, v in (data.get("links") or {}).items()},
            mentions=MessageMentions(**{k: tuple(v) for k, v in mentions.items()
                                        if k in MessageMentions.__dataclass_fields__}),
        )
