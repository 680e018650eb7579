"""The sample message of `volcano-watchdog notify-test`: what a real JobFailed looks like, marked as a test."""

from __future__ import annotations

from datetime import UTC, datetime

from volcano_monitor.watchdog.actions.notify.message import AlertItem, Message, rfc3339


def sample_message(receiver: str, grafana_url: str | None = None, api_url: str | None = None) -> Message:
    now = rfc3339(datetime.now(UTC))
    alert = AlertItem(
        kind="JobFailed", severity="critical", status="firing",
        summary="TEST MESSAGE from volcano-watchdog notify-test: Job team-a/etl-daily Failed (pods: OOMKilled)",
        namespace="team-a", queue="prod", job_name="etl-daily", subject="etl-daily",
        reasons=("etl-daily-worker-0/main: OOMKilled (exit 137)",),
        recommendation="worker/main: cpu 1.5 cores, memory 3.2Gi", started_at=now, source="watchdog",
        fingerprint="notify-test",
    )
    links = {}
    if grafana_url:
        links["grafana"] = grafana_url.rstrip("/") + "/d/volcano-overview"
    if api_url:
        links["api"] = api_url.rstrip("/") + "/ui/alerts?state=firing"
    return Message(receiver=receiver, group_key="notify-test", group_labels={"alertname": "JobFailed", "queue": "prod"},
                   status="firing", alerts=(alert,), links=links)
