"""Alertmanager's webhook payload (`version: "4"`), validated, as message items.

Alertmanager already grouped and timed these alerts; the watchdog routes them again through its
own tree (so one configuration decides where chat messages go) and sends them with the same channels.
The alerts' fingerprints are Alertmanager's, prefixed so they never meet the watchdog's own.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from volcano_monitor.watchdog.actions.notify.message import AlertItem, rfc3339
from volcano_monitor.watchdog.state.signals import SEVERITIES

__all__ = ["AlertmanagerAlert", "AlertmanagerPayload", "items"]

MAX_ALERTS = 1000
_ZERO_TIME = "0001-01-01T00:00:00Z"


class AlertmanagerAlert(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str = ""

    @field_validator("labels")
    @classmethod
    def _has_name(cls, value: dict[str, str]) -> dict[str, str]:
        if not value.get("alertname"):
            raise ValueError("every alert needs an alertname label")
        return value

    @field_validator("endsAt", mode="before")
    @classmethod
    def _zero_is_none(cls, value: object) -> object:
        return None if value in ("", _ZERO_TIME, None) else value


class AlertmanagerPayload(BaseModel):
    """What Alertmanager's `webhook_configs` posts. Unknown top-level fields are allowed (later
    Alertmanager versions add some); the version must be "4", the format this code reads."""

    model_config = ConfigDict(extra="allow")

    version: Literal["4"]
    groupKey: str = ""
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[AlertmanagerAlert] = Field(max_length=MAX_ALERTS)


def _fingerprint(alert: AlertmanagerAlert) -> str:
    """`am:` + Alertmanager's fingerprint, or a hash of the labels when it sent none (64 chars max)."""
    own = alert.fingerprint or hashlib.sha256(
        "\x1f".join(f"{k}={v}" for k, v in sorted(alert.labels.items())).encode()).hexdigest()[:32]
    return ("am:" + own)[:64]



def items(payload: AlertmanagerPayload) -> list[AlertItem]:
    out = []
    for alert in payload.alerts:
        labels = alert.labels
        annotations = alert.annotations
        severity = labels.get("severity", "warning")
        summary = annotations.get("summary") or annotations.get("description") or labels["alertname"]
        reasons = (annotations["description"],) if annotations.get("description") and \
            annotations.get("summary") else ()
        out.append(AlertItem(
            kind=labels["alertname"], severity=severity if severity in SEVERITIES else "warning",
            status=alert.status, summary=summary[:4000], namespace=labels.get("namespace", ""),
            queue=labels.get("queue", ""), job_name=labels.get("job_name", ""),
            subject=labels.get("pod") or labels.get("podgroup") or "", reasons=reasons,
            recommendation="", started_at=rfc3339(alert.startsAt),
            resolved_at=rfc3339(alert.endsAt) if alert.status == "resolved" else "", source="alertmanager",
            fingerprint=_fingerprint(alert), url=alert.generatorURL or annotations.get("runbook_url", ""),
            labels=dict(labels),
        ))
    return out
