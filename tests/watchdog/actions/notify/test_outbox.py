"""The outbox's timing (group_wait, group_interval, repeat_interval), resolved messages, silences and
per-group order, on SQLite and PostgreSQL, with the clock in the test's hands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.actions.notify import outbox as ob
from volcano_monitor.watchdog.actions.notify.message import AlertItem, Message
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.findings.detectors.fleet import CLUSTER_STALE
from volcano_monitor.watchdog.state.db.models import NotificationDelivery, NotificationGroup, Silence

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def make_outbox(route: dict[str, Any] | None = None, **receiver: Any) -> Outbox:
    settings = load(None, environ={}, notifications={
        "receivers": [{"name": "chat", "webhook": {"url": "http://127.0.0.1:1/x"}, **receiver},
                      {"name": "oncall", "webhook": {"url": "http://127.0.0.1:1/y"}}],
        "route": route or {"receiver": "chat", "group_by": ["alertname", "queue"], "group_wait": "30s",
                           "group_interval": "5m", "repeat_interval": "4h"},
        "owners": {"namespaces": {"team-a": {"slack_user_ids": ["U1"]}}, "queues": {"prod": {"mobiles": ["138"]}}},
        "api_url": "http://watchdog:9747"}).notifications
    return Outbox(settings, grafana_url="http://grafana")


def alert(name: str, status: str = "firing", queue: str = "prod", severity: str = "critical") -> AlertItem:
    return AlertItem(kind="JobFailed", severity=severity, status=status, summary=f"Job team-a/{name} Failed",
                     namespace="team-a", queue=queue, job_name=name, fingerprint=f"fp-{name}")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(engine: Engine, box: Outbox, seconds: float, *enqueue: AlertItem) -> list[Message]:
    """Enqueue at T0+seconds, flush what is due then, return the messages made (and mark them sent)."""
    now = at(seconds)
    with Session(engine) as session, session.begin():
        for item in enqueue:
            box.enqueue(session, item, now)
        box.flush_due(session, now)
        made = [d for d in session.scalars(select(NotificationDelivery).where(NotificationDelivery.state == "pending")
                                           .order_by(NotificationDelivery.id))]
        for d in made:
            d.state = "sent"
        return [Message.from_dict(d.message) for d in made]


def firing_names(message: Message) -> list[str]:
    return sorted(a.job_name for a in message.firing)


def test_group_wait_interval_and_repeat(engine: Engine) -> None:
    box = make_outbox()
    assert step(engine, box, 0, alert("a")) == []
    assert step(engine, box, 10, alert("b")) == []  # joins the group during group_wait
    [first] = step(engine, box, 30)
    assert firing_names(first) == ["a", "b"] and first.status == "firing"
    assert first.group_labels == {"alertname": "JobFailed", "queue": "prod"}
    assert first.links["grafana"].startswith("http://grafana/d/volcano-queue") and "api" in first.links
    assert first.mentions.slack_user_ids == ("U1",) and first.mentions.mobiles == ("138",)
    assert step(engine, box, 40, alert("c")) == []  # a change waits for group_interval after the last message
    assert step(engine, box, 329) == []
    [second] = step(engine, box, 330)
    assert firing_names(second) == ["a", "b", "c"]
    assert step(engine, box, 330 + 4 * 3600 - 1) == []
    [repeat] = step(engine, box, 330 + 4 * 3600)  # nothing changed: told again after repeat_interval
    assert firing_names(repeat) == ["a", "b", "c"]
    [other_queue] = step(engine, box, 20_000, alert("d", queue="research")) or step(engine, box, 20_030)
    assert firing_names(other_queue) == ["d"] and other_queue.group_labels["queue"] == "research"


def test_resolved_messages_and_the_switch(engine: Engine) -> None:
    for send_resolved in (True, False):
        with engine.begin() as connection:
            for table in ("notification_deliveries", "notification_entries", "notification_groups"):
                connection.exec_driver_sql(f"DELETE FROM {table}")
        box = make_outbox(send_resolved=send_resolved)
        [first] = step(engine, box, 0, alert("a"), alert("b")) or step(engine, box, 30)
        assert firing_names(first) == ["a", "b"]
        messages = step(engine, box, 400, alert("a", "resolved"))
        [told] = messages or step(engine, box, 400)  # group_interval has passed: at once
        assert firing_names(told) == ["b"]
        assert [a.job_name for a in told.resolved] == (["a"] if send_resolved else [])
        last = step(engine, box, 800, alert("b", "resolved"))
        if send_resolved:
            assert [m.status for m in last] == ["resolved"] and [a.job_name for a in last[0].resolved] == ["b"]
        else:
            assert last == []  # nothing fires and resolved ones are not told
        assert step(engine, box, 20_000) == []  # nothing left to repeat


def test_never_told_then_resolved_is_never_told(engine: Engine) -> None:
    box = make_outbox()
    step(engine, box, 0, alert("a"))
    assert step(engine, box, 5, alert("a", "resolved")) == []
    assert step(engine, box, 30) == []


def test_silences_mute_matching_alerts(engine: Engine) -> None:
    box = make_outbox()
    with Session(engine) as session, session.begin():
        session.add(Silence(matchers=['job_name=~"noisy-.*"'], starts_at=T0, ends_at=at(3600), created_by="t",
                            comment="", created_at=T0, updated_at=T0))
    [message] = step(engine, box, 0, alert("noisy-1"), alert("real")) or step(engine, box, 30)
    assert firing_names(message) == ["real"]
    assert step(engine, box, 100, alert("noisy-2", queue="research")) == []
    assert step(engine, box, 130) == []  # the only alert of its group is silenced: nothing to say
    [after] = step(engine, box, 4 * 3600 + 100)  # the silence ended: the repeat includes them
    assert firing_names(after) in (["noisy-1", "real"], ["noisy-2"])


def test_continue_sends_to_two_receivers(engine: Engine) -> None:
    box = make_outbox({"receiver": "chat", "group_wait": 0, "routes": [
        {"matchers": ['severity="critical"'], "receiver": "oncall", "continue": True},
        {"matchers": ['queue="prod"'], "receiver": "chat"}]})
    messages = step(engine, box, 0, alert("a"))
    assert sorted(m.receiver for m in messages) == ["chat", "oncall"]
    assert [m.receiver for m in step(engine, box, 10, alert("w", severity="warning", queue="x"))] == ["chat"]


def test_order_per_group_and_inflight_settling(engine: Engine) -> None:
    box = make_outbox({"receiver": "chat", "group_by": ["job_name"], "group_wait": 0, "group_interval": 0})
    now = at(0)
    with Session(engine) as session, session.begin():
        for item in (alert("a"), alert("b")):
            box.enqueue(session, item, now)
        box.flush_due(session, now)
        box.enqueue(session, alert("a", "resolved"), now)
        box.flush_due(session, now)
    with Session(engine) as session:
        due = ob.due_deliveries(session, now)
        # a's resolved message waits behind a's firing one; b's is independent
        assert [Message.from_dict(d.message).alerts[0].job_name for d in due] == ["a", "b"]
        first_a = due[0].id
    with Session(engine) as session, session.begin():
        assert ob.claim(session, first_a, "me", now)
        assert not ob.claim(session, first_a, "someone-else", now)  # one claim wins
    with Session(engine) as session:
        assert [d.id for d in ob.due_deliveries(session, now)] == [due[1].id]  # still blocked while sending
    with Session(engine) as session, session.begin():
        assert ob.settle_inflight(session, now) == [(first_a, "chat")]
    with Session(engine) as session:
        states = dict(session.execute(select(NotificationDelivery.id, NotificationDelivery.state)).all())
        assert states[first_a] == "uncertain"
        unblocked = ob.due_deliveries(session, now)
        assert len(unblocked) == 2 and Message.from_dict(unblocked[-1].message).status == "resolved"


def test_retention_forgets_old_finished_messages_and_empty_groups(engine: Engine) -> None:
    box = make_outbox({"receiver": "chat", "group_by": ["job_name"], "group_wait": 0, "group_interval": 0})
    step(engine, box, 0, alert("old"))  # marked sent by step()
    step(engine, box, 10, alert("old", "resolved"))
    step(engine, box, 40 * 86400, alert("new"))
    with Session(engine) as session, session.begin():
        pending = NotificationDelivery(group_id=session.scalars(select(NotificationDelivery.group_id)).first(),
                                       receiver="chat", state="pending", message={}, attempts=0,
                                       next_attempt_at=at(0), created_at=at(0), updated_at=at(0), last_error="")
        session.add(pending)
    with Session(engine) as session, session.begin():
        assert ob.forget_delivered(session, at(40 * 86400 + 60), days=30) == 2  # old firing + resolved
    with Session(engine) as session:
        left = session.execute(select(NotificationDelivery.state, NotificationDelivery.message)).all()
    assert sorted(state for state, _ in left) == ["pending", "sent"]  # never drops an undelivered message
    assert any(Message.from_dict(m).alerts[0].job_name == "new" for state, m in left if state == "sent")


def test_links_open_the_group_cluster_and_the_stale_cluster_for_cluster_stale() -> None:
    """A message links its group's cluster; ClusterStale, stored among the raiser's rows but about another
    cluster, opens the fleet page and the silent cluster's dashboards; an Alertmanager alert's `cluster`
    label names the dashboards' cluster."""
    box = make_outbox()
    group = NotificationGroup(group_key="k", receiver="chat", route="0", labels={}, cluster="east")
    jobs = box.message(group, [alert("a")])
    assert jobs.links["api"] == "http://watchdog:9747/ui/alerts?state=firing&cluster=east"
    assert jobs.links["grafana"].endswith("var-cluster=east")
    stale = AlertItem(kind=CLUSTER_STALE, severity="warning", status="firing", summary="west is silent",
                      subject="west", fingerprint="fp-west")
    told = box.message(group, [stale])
    assert told.links["api"] == "http://watchdog:9747/ui/fleet"
    assert told.links["grafana"] == "http://grafana/d/volcano-overview?var-cluster=west"
    mixed = box.message(group, [stale, alert("a")])  # about east and west: the alerts list, Grafana for all
    assert mixed.links["api"].endswith("cluster=east") and "var-cluster" not in mixed.links["grafana"]
    # One Alertmanager may post a fleet's alerts to one watchdog: Grafana opens the cluster their label names.
    forwarded = AlertItem(kind="VolcanoQueueStarved", severity="warning", status="firing", summary="starved",
                          source="alertmanager", labels={"alertname": "VolcanoQueueStarved", "cluster": "west"})
    assert box.message(group, [forwarded]).links["grafana"].endswith("var-cluster=west")
    unlabelled = AlertItem(kind="VolcanoQueueStarved", severity="warning", status="firing", summary="starved",
                           source="alertmanager", labels={"alertname": "VolcanoQueueStarved"})
    assert box.message(group, [unlabelled]).links["grafana"].endswith("var-cluster=east")
    namesake = AlertItem(kind=CLUSTER_STALE, severity="warning", status="firing", summary="a rule of that name",
                         subject="some-pod", source="alertmanager", labels={"alertname": CLUSTER_STALE})
    told = box.message(group, [namesake])  # an Alertmanager rule named ClusterStale is no silent cluster
    assert told.links["grafana"].endswith("var-cluster=east") and "/ui/alerts?state=firing" in told.links["api"]
