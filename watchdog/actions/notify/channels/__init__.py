"""One module per chat service. `build_channel()` makes the channel a receiver configures; `send()`
posts one message through it and says whether (and how) it failed."""

from __future__ import annotations

from volcano_monitor.watchdog.actions.notify.channels.base import Channel, Request, SendResult, send
from volcano_monitor.watchdog.actions.notify.channels.dingtalk import DingTalk
from volcano_monitor.watchdog.actions.notify.channels.feishu import Feishu
from volcano_monitor.watchdog.actions.notify.channels.slack import Slack
from volcano_monitor.watchdog.actions.notify.channels.teams import Teams
from volcano_monitor.watchdog.actions.notify.channels.webhook import JsonWebhook
from volcano_monitor.watchdog.actions.notify.channels.wecom import WeCom
from volcano_monitor.watchdog.actions.notify.settings import Receiver

__all__ = ["Channel", "DingTalk", "Feishu", "JsonWebhook", "Request", "SendResult", "Slack", "Teams", "WeCom",
           "build_channel", "send"]


def build_channel(receiver: Receiver) -> Channel:
    """The channel of `receiver`'s one configured service, holding its URL and secrets."""
    def secret(value: object) -> str | None:
        reveal = getattr(value, "get_secret_value", None)
        return str(reveal()) if reveal is not None else None

    if receiver.slack is not None:
        return Slack(receiver.slack.url.get_secret_value(), channel=receiver.slack.channel)
    if receiver.feishu is not None:
        return Feishu(receiver.feishu.url.get_secret_value(), secret=secret(receiver.feishu.secret))
    if receiver.dingtalk is not None:
        return DingTalk(receiver.dingtalk.url.get_secret_value(), secret=secret(receiver.dingtalk.secret))
    if receiver.wecom is not None:
        return WeCom(receiver.wecom.url.get_secret_value())
    if receiver.teams is not None:
        return Teams(receiver.teams.url.get_secret_value())
    if receiver.webhook is not None:
        return JsonWebhook(receiver.webhook.url.get_secret_value(),
                           bearer_token=secret(receiver.webhook.bearer_token))
    raise ValueError(f"receiver {receiver.name!r} has no channel")  # the Receiver model forbids this
