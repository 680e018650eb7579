"""Settings of the scheduled report digests (`reports:`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from volcano_monitor.core.cron import parse_cron
from volcano_monitor.core.flags import parse_duration
from volcano_monitor.core.settings import Section


class Digest(Section):
    """A report sent on a schedule to one receiver of `notifications.receivers`, with a link to its HTML
    page. Sent by the leader only, once per period (recorded in the database)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Name of the digest (in the message and its record).")
    schedule: str = Field(description="5-field cron schedule in UTC, e.g. `0 9 * * mon` (Mondays 09:00).")
    receiver: str = Field(description="Receiver name from `notifications.receivers`.")
    by: Literal["queue", "namespace"] = Field(default="queue", description="Group the report by queue or namespace.")
    period: float = Field(default=7 * 86400, gt=0,
                          description="Time the digest covers, up to the scheduled time (`7d`, `24h`, or seconds).")
    top: int = Field(default=5, ge=0, le=50, description="Groups and top wasters listed in the message.")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        parse_cron(value)  # ValueError names the field
        return value

    @field_validator("period", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class Reports(Section):
    """Scheduled report digests (`volcano-watchdog report` prints the same report on demand)."""

    digests: list[Digest] = Field(
        default_factory=list,
        description="Digests to send, each {name, schedule (5-field cron, UTC), receiver, by: queue|namespace, "
                    "period (default 7d), top (default 5)} (docs/watchdog.md).")
    check_interval_seconds: float = Field(default=60, gt=0, description="Seconds between looks at the schedules.")
    max_delay_seconds: float = Field(
        default=86400, gt=0,
        description="A digest due while no leader ran is still sent if it is at most this late (else skipped).")
