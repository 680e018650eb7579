"""Configuration of notifications: receivers (one chat service each), the route tree, owners to mention
and the delivery policy. Part of the watchdog's settings (`notifications:`); documented in
docs/configuration.md and docs/notifications.md.

Durations are written as Alertmanager writes them (`30s`, `5m`, `4h`, `1h30m`) or as seconds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from volcano_monitor.core.flags import parse_duration
from volcano_monitor.core.matchers import parse_matcher
from volcano_monitor.core.settings import Section


class Webhook(Section):
    """Where one chat service listens. The URL often holds the credential (Slack, DingTalk's
    access_token, WeCom's key): it is a secret, never logged or shown."""

    url: SecretStr = Field(description="Webhook URL (a secret: never logged).")


class SlackChannel(Webhook):
    """Slack incoming webhook."""

    channel: str | None = Field(default=None, description="Override the webhook's channel (legacy webhooks only).")


class FeishuChannel(Webhook):
    """Feishu/Lark custom bot; `secret` turns on signature verification."""

    secret: SecretStr | None = Field(default=None, description="Signing secret of the bot (optional).")


class DingTalkChannel(Webhook):
    """DingTalk custom robot; `secret` turns on signing (the SEC... key)."""

    secret: SecretStr | None = Field(default=None, description="Signing secret of the robot (optional).")


class WeComChannel(Webhook):
    """WeCom (WeChat Work) group robot."""


class TeamsChannel(Webhook):
    """Microsoft Teams via a Power Automate workflow webhook (Adaptive Card in a `message`)."""


class GenericWebhook(Webhook):
    """Any HTTP endpoint: the documented JSON schema of docs/notifications.md."""

    bearer_token: SecretStr | None = Field(default=None, description="Sent as Authorization: Bearer (optional).")


CHANNEL_KINDS = ("slack", "feishu", "dingtalk", "wecom", "teams", "webhook")


class Receiver(Section):
    """One named destination: exactly one channel."""

    name: str = Field(min_length=1, max_length=64, description="Name routes refer to.")
    slack: SlackChannel | None = None
    feishu: FeishuChannel | None = None
    dingtalk: DingTalkChannel | None = None
    wecom: WeComChannel | None = None
    teams: TeamsChannel | None = None
    webhook: GenericWebhook | None = None
    send_resolved: bool = Field(default=True, description="Also tell when alerts resolve.")
    rate_limit_per_minute: float = Field(default=20, gt=0, description="Most messages per minute (more wait).")

    @model_validator(mode="after")
    def _one_channel(self) -> Receiver:
        kinds = [kind for kind in CHANNEL_KINDS if getattr(self, kind) is not None]
        if len(kinds) != 1:
            raise ValueError(f"receiver {self.name!r} needs exactly one of {', '.join(CHANNEL_KINDS)} "
                             f"(has {', '.join(kinds) or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return next(kind for kind in CHANNEL_KINDS if getattr(self, kind) is not None)

    @property
    def channel(self) -> Webhook:
        channel: Webhook = getattr(self, self.kind)
        return channel


class Route(Section):
    """A node of the route tree, as in Alertmanager: an alert enters the root, goes down to the first
    child whose matchers hold (every child with `continue`), and settles on the deepest match. Unset
    fields are inherited from the parent."""

    receiver: str | None = Field(default=None, description="Receiver name (the root must have one).")
    matchers: list[str] = Field(default_factory=list,
                                description='Label matchers: `severity="critical"`, `queue=~"team-.*"`, `!=`, `!~`.')
    group_by: list[str] | None = Field(default=None, description="Labels that make one message group; ['...']: all.")
    group_wait: float | None = Field(default=None, description="Wait before the first message of a new group.")
    group_interval: float | None = Field(default=None, description="Wait between messages about a changed group.")
    repeat_interval: float | None = Field(default=None, description="Repeat a still-firing group after this.")
    continue_: bool = Field(default=False, alias="continue", description="Keep matching the siblings after this one.")
    routes: list[Route] = Field(default_factory=list, description="Child routes.")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("group_wait", "group_interval", "repeat_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)


class Mentions(Section):
    """Who to mention for a namespace or queue, per service's own id."""

    slack_user_ids: list[str] = Field(default_factory=list, description="Slack member ids (U...).")
    mobiles: list[str] = Field(default_factory=list,
                               description="Phone numbers (DingTalk @, WeCom mentioned_mobile_list).")
    feishu_open_ids: list[str] = Field(default_factory=list, description="Feishu/Lark open_ids (ou_...).")
    wecom_user_ids: list[str] = Field(default_factory=list, description="WeCom user ids.")
    emails: list[str] = Field(default_factory=list, description="Teams (mention by UPN/email).")


class Owners(Section):
    """Owners mentioned in messages about a namespace or a queue."""

    namespaces: dict[str, Mentions] = Field(default_factory=dict, description="Namespace -> owners.")
    queues: dict[str, Mentions] = Field(default_factory=dict, description="Queue -> owners.")


class Delivery(Section):
    """Retries: exponential backoff with jitter up to a maximum, then the dead-letter state."""

    timeout_seconds: float = Field(default=10, gt=0, description="Timeout of one HTTP request.")
    initial_backoff_seconds: float = Field(default=1, gt=0, description="Wait after the first failure.")
    max_backoff_seconds: float = Field(default=300, gt=0, description="Longest wait between attempts.")
    max_attempts: int = Field(default=12, ge=1, description="Attempts before a message becomes a dead letter.")
    poll_interval_seconds: float = Field(default=1.0, gt=0, description="Seconds between outbox scans when idle.")


class Notifications(Section):
    """Chat notifications of the watchdog's alerts and of Alertmanager's (POST /api/v1/alertmanager)."""

    enabled: bool = Field(default=True, description="Send notifications (when receivers are configured).")
    receivers: list[Receiver] = Field(default_factory=list, description="Named destinations.")
    route: Route = Field(default_factory=Route, description="Root of the route tree.")
    owners: Owners = Owners()
    delivery: Delivery = Delivery()
    api_url: str | None = Field(default=None,
                                description="External URL of the watchdog, for links in messages (its UI pages).")
    retention_days: float = Field(default=30, gt=0, description="Delivered / dead messages are kept this long.")

    @model_validator(mode="after")
    def _routes_name_receivers(self) -> Notifications:
        names = [r.name for r in self.receivers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"receiver names must be unique: {', '.join(duplicates)}")
        if self.receivers and self.route.receiver is None:
            raise ValueError("route.receiver: the root route needs a receiver")

        def check(route: Route, path: str) -> None:
            if route.receiver is not None and route.receiver not in names:
                raise ValueError(f"{path}.receiver: no receiver named {route.receiver!r}")

            for text in route.matchers:
                parse_matcher(text)  # ValueError names the matcher
            for i, child in enumerate(route.routes):
                check(child, f"{path}.routes[{i}]")

        check(self.route, "route")
        return self


ChannelKind = Literal["slack", "feishu", "dingtalk", "wecom", "teams", "webhook"]
