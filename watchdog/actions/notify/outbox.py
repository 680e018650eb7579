"""The durable outbox: alerts placed into message groups (in the transaction that changes the alert),
groups turned into messages when due, messages claimed and marked as they are delivered.

Three tables (watchdog/state/db/models.py): `notification_groups` (one per route x receiver x group-by
values, with the time the next message is due), `notification_entries` (each alert's latest state in
the group and the state last told), `notification_deliveries` (the messages: pending -> sending ->
sent | pending again later | dead | uncertain).

Timing follows Alertmanager: a new group's first message waits `group_wait` (alerts arriving
meanwhile join it); after a message, changes wait until `group_interval` has passed since it;
a group that still fires is told again after `repeat_interval`. Silenced alerts are left out of
messages (they stay in the group, so they are told about once the silence ends and the group repeats).

Every function here works in the caller's session and transaction; the caller commits.

Two writers meet in a group: the worker's `enqueue` (inside the transaction that changes the alert)
and the leader's sender (`flush_due`). Both read the group and its entries and write them back, so
each first *claims* the group: on PostgreSQL it is read `FOR UPDATE` (the other writer waits until
commit), and on every database its `version` is bumped compare-and-set, only if it is still the
version read. SQLite has no row locks and pysqlite starts its transaction only at the first write,
so a change committed between a reader's SELECT and its first write would otherwise be overwritten;
the failed compare-and-set makes the writer read again (it then holds SQLite's one write lock, so
the second read is the last word). A change is therefore never lost between read and write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from sqlalchemy import ColumnElement, and_, delete, exists, func, select, update
from sqlalchemy.orm import Session, aliased
from sqlalchemy.orm.attributes import set_committed_value

from volcano_monitor.core.matchers import Matcher, parse_matcher
from volcano_monitor.watchdog.actions.notify.describe import cluster_about, cluster_stale
from volcano_monitor.watchdog.actions.notify.message import AlertItem, Message, MessageMentions
from volcano_monitor.watchdog.actions.notify.routing import (
    Placement,
    ResolvedRoute,
    group_key,
    match_routes,
    resolve_tree,
)
from volcano_monitor.watchdog.actions.notify.settings import Notifications
from volcano_monitor.watchdog.state.db.models import NotificationDelivery, NotificationEntry, NotificationGroup, Silence

__all__ = ["DEAD", "PENDING", "SENDING", "SENT", "UNCERTAIN", "GroupContended", "Outbox", "alert_labels"]

PENDING, SENDING, SENT, DEAD, UNCERTAIN = "pending", "sending", "sent", "dead", "uncertain"
FIRING, RESOLVED = "firing", "resolved"
# An item with this label set to "true" is a one-time notice (a queue capability change): told once,
# never repeated, never resolved.
NOTICE_LABEL = "notice"
# Reads before a writer gives up claiming a group. One retry suffices in practice: after a failed
# compare-and-set the writer holds SQLite's write lock (PostgreSQL's claims never fail: FOR UPDATE).
CLAIM_ATTEMPTS = 5


class GroupContended(RuntimeError):
    """A group kept changing under a writer for CLAIM_ATTEMPTS reads (not expected to happen)."""


def _read_group(session: Session, where: ColumnElement[bool]) -> NotificationGroup | None:
    """The group as committed now, locked for this transaction on PostgreSQL (FOR UPDATE; a no-op on
    SQLite). `populate_existing`: a retry must see the new row, not the session's copy."""
    return session.scalars(select(NotificationGroup).where(where).with_for_update()
                           .execution_options(populate_existing=True)).first()


def _claim(session: Session, group: NotificationGroup) -> bool:
    """Bump the group's version if it is still the one read: False when another writer changed the
    group (or its entries) since, so what was read is stale and must be read again."""
    result = session.execute(update(NotificationGroup)
                             .where(NotificationGroup.id == group.id, NotificationGroup.version == group.version)
                             .values(version=group.version + 1), execution_options={"synchronize_session": False})
    if getattr(result, "rowcount", 0) != 1:
        return False
    set_committed_value(group, "version", group.version + 1)
    return True


def alert_labels(item: AlertItem) -> dict[str, str]:
    """The labels routes and silences match on."""
    labels = dict(item.labels)
    labels.update({"alertname": item.kind, "kind": item.kind, "severity": item.severity, "source": item.source})
    for name in ("namespace", "queue", "job_name"):
        value = getattr(item, name)
        if value or name not in labels:
            labels[name] = value
    return labels


@dataclass(frozen=True)
class ActiveSilence:
    id: int
    matchers: tuple[Matcher, ...]

    def mutes(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self.matchers)


def active_silences(session: Session, now: datetime) -> list[ActiveSilence]:
    out = []
    for row in session.scalars(select(Silence).where(Silence.starts_at <= now, Silence.ends_at > now)):
        try:
            out.append(ActiveSilence(row.id, tuple(parse_matcher(m) for m in row.matchers)))
        except (ValueError, TypeError):  # validated on the way in; a hand-edited row must not stop messages
            continue
    return out


class Outbox:
    def __init__(self, settings: Notifications, grafana_url: str | None = None) -> None:
        self.settings = settings
        self.grafana_url = (grafana_url or "").rstrip("/")
        self.receivers = {r.name: r for r in settings.receivers}
        self.tree: ResolvedRoute | None = (resolve_tree(settings.route)
                                           if settings.enabled and settings.receivers else None)
        self._routes: dict[str, ResolvedRoute] = {}
        if self.tree is not None:
            stack = [self.tree]
            while stack:
                node = stack.pop()
                self._routes[node.path] = node
                stack.extend(node.children)

    @property
    def enabled(self) -> bool:
        return self.tree is not None

    # ---- in the alert's transaction ------------------------------------------------------------------

    def place(self, item: AlertItem) -> list[Placement]:
        """The groups an alert goes to (several with `continue`)."""
        if self.tree is None:
            return []
        labels = alert_labels(item)
        return [group_key(route, labels) for route in match_routes(self.tree, labels) if route.receiver]

    def enqueue(self, session: Session, item: AlertItem, now: datetime) -> int:
        """Record the alert's new state in each of its groups and schedule the groups' next message.
        Returns the number of groups touched. Groups are claimed in key order, so two writers that
        touch several groups (routes with `continue`) lock them in the same order."""
        placements = self.place(item)
        for placement in sorted(placements, key=lambda p: p.key):
            self._enqueue_one(session, placement, item, now)
        return len(placements)

    def _enqueue_one(self, session: Session, placement: Placement, item: AlertItem, now: datetime) -> None:
        group, entry = self._claim_for_enqueue(session, placement, item.fingerprint, now)
        if entry is None:
            if item.status == RESOLVED:
                return  # never told as firing here (e.g. the route changed): nothing to say
            session.add(NotificationEntry(group_id=group.id, fingerprint=item.fingerprint, status=item.status,
                                          notified_status=None, alert=_item_dict(item), changed_at=now))
        else:
            entry.status, entry.alert, entry.changed_at = item.status, _item_dict(item), now
        route = placement.route
        if group.last_flush_at is None:
            due = now + timedelta(seconds=route.group_wait)
        else:
            due = max(now, group.last_flush_at + timedelta(seconds=route.group_interval))
        group.flush_at = due if group.flush_at is None else min(group.flush_at, due)
        group.updated_at = now

    def _claim_for_enqueue(self, session: Session, placement: Placement, fingerprint: str,
                           now: datetime) -> tuple[NotificationGroup, NotificationEntry | None]:
        """The placement's group (made if new) and the alert's entry in it, read and then claimed,
        so the sender cannot change either before this transaction commits."""
        for _ in range(CLAIM_ATTEMPTS):
            group = _read_group(session, NotificationGroup.group_key == placement.key)
            if group is None:  # new: nobody else sees it before commit
                group = NotificationGroup(group_key=placement.key, receiver=placement.route.receiver,
                                          route=placement.route.path, labels=placement.group_labels, flush_at=None,
                                          last_flush_at=None, version=0, created_at=now, updated_at=now)
                session.add(group)
                session.flush()
                return group, None
            entry = session.scalars(select(NotificationEntry).where(
                NotificationEntry.group_id == group.id, NotificationEntry.fingerprint == fingerprint)
                .execution_options(populate_existing=True)).first()
            if _claim(session, group):
                return group, entry
        raise GroupContended(f"notification group {placement.key} kept changing")

    # ---- the sender's side -----------------------------------------------------------------------------

    def next_due(self, session: Session) -> datetime | None:
        """When the earliest group is due (None: none is)."""
        return session.scalars(select(NotificationGroup.flush_at).where(NotificationGroup.flush_at.is_not(None))
                               .order_by(NotificationGroup.flush_at).limit(1)).first()

    def flush_due(self, session: Session, now: datetime, limit: int = 500) -> int:
        """Turn every due group into a message (a pending delivery). Returns the number of messages made."""
        # SKIP LOCKED (PostgreSQL): a group a writer holds is left for the next round, so the sender
        # never waits while holding other groups' locks (no lock cycle with the worker).
        groups = session.scalars(select(NotificationGroup).where(NotificationGroup.flush_at <= now)
                                 .order_by(NotificationGroup.flush_at, NotificationGroup.id).limit(limit)
                                 .with_for_update(skip_locked=True)).all()
        silences = active_silences(session, now) if groups else []
        made = 0
        for group in groups:
            made += self._flush(session, group, silences, now)
        return made

    def _flush(self, session: Session, group: NotificationGroup, silences: list[ActiveSilence], now: datetime) -> int:
        entries = self._claim_for_flush(session, group, now)
        if entries is None:
            return 0
        route = self._routes.get(group.route)
        receiver = self.receivers.get(group.receiver)
        if route is None or receiver is None or route.receiver != group.receiver:
            # The configuration changed since this group was made: its alerts are re-placed by
            # their next change; the stale group is dropped (its undelivered messages are kept).
            group.flush_at = None
            session.execute(delete(NotificationEntry).where(NotificationEntry.group_id == group.id))
            return 0
        items = {e.id: AlertItem.from_dict(e.alert) for e in entries}
        visible = [e for e in entries if not any(s.mutes(alert_labels(items[e.id])) for s in silences)]
        firing = [e for e in visible if e.status == FIRING]
        resolved = [e for e in visible if e.status == RESOLVED and e.notified_status == FIRING
                    and receiver.send_resolved]
        changed = any(e.status != e.notified_status for e in visible)
        repeat = (group.last_flush_at is not None and bool(firing)
                  and now >= group.last_flush_at + timedelta(seconds=route.repeat_interval))
        made = 0
        if (firing or resolved) and (changed or repeat):
            message = self.message(group, [items[e.id] for e in firing + resolved])
            session.add(NotificationDelivery(group_id=group.id, receiver=group.receiver, state=PENDING,
                                             message=message.to_dict(), attempts=0, next_attempt_at=now,
                                             claimed_by=None, claimed_at=None, sent_at=None, last_error="",
                                             created_at=now, updated_at=now))
            group.last_flush_at = now
            made = 1
        for entry in visible:
            if entry.status == RESOLVED or items[entry.id].labels.get(NOTICE_LABEL) == "true":
                session.delete(entry)  # resolved, or a one-time notice: told, and done
            else:
                entry.notified_status = entry.status
        still_firing = any(e.status == FIRING and items[e.id].labels.get(NOTICE_LABEL) != "true" for e in entries)
        group.flush_at = (group.last_flush_at or now) + timedelta(seconds=route.repeat_interval) \
            if still_firing else None
        if group.flush_at is not None and group.flush_at <= now:  # silenced all along: look again later
            group.flush_at = now + timedelta(seconds=max(route.group_interval, 60.0))
        group.updated_at = now
        return made

    def _claim_for_flush(self, session: Session, group: NotificationGroup,
                         now: datetime) -> list[NotificationEntry] | None:
        """The group's entries, read and then claimed (the message and the new schedule are made from
        them). When a writer changed the group meanwhile, read both again; None when the group is gone
        or no longer due (it will be flushed when it is)."""
        for _ in range(CLAIM_ATTEMPTS):
            entries = list(session.scalars(select(NotificationEntry).where(NotificationEntry.group_id == group.id)
                                           .order_by(NotificationEntry.id).execution_options(populate_existing=True)))
            if _claim(session, group):
                return entries
            fresh = _read_group(session, NotificationGroup.id == group.id)
            if fresh is None or fresh.flush_at is None or fresh.flush_at > now:
                return None
        return None  # left due: the next round tries again

    def message(self, group: NotificationGroup, alerts: Iterable[AlertItem]) -> Message:
        items = tuple(alerts)
        links: dict[str, str] = {}
        cluster = quote(group.cluster or "", safe="")  # the group's cluster's pages: one UI serves the fleet
        # ClusterStale is about another cluster than the one storing it: the fleet page says which and since when
        stale = bool(items) and all(cluster_stale(a) for a in items)
        if self.settings.api_url:
            base = self.settings.api_url.rstrip("/")
            links["api"] = base + "/ui/fleet" if stale else base + "/ui/alerts?state=firing" + (
                f"&cluster={cluster}" if cluster else "")
        if self.grafana_url:
            about = quote(cluster_about(group.cluster or "", items), safe="")
            links["grafana"] = (self._grafana_link(items) + (f"var-cluster={about}" if about else "")).rstrip("?&")
        return Message(receiver=group.receiver, group_key=group.group_key,
                       group_labels={str(k): str(v) for k, v in (group.labels or {}).items()},
                       status=FIRING if any(a.status == FIRING for a in items) else RESOLVED,
                       alerts=items, links=links, mentions=self.mentions(items))

    def _grafana_link(self, items: tuple[AlertItem, ...]) -> str:
        """The Job dashboard for one job, the Queue dashboard for one queue, else the overview; ends in `?` or
        `&`, for the cluster variable."""
        jobs = {(a.namespace, a.job_name) for a in items if a.job_name}
        queues = {a.queue for a in items if a.queue}
        if len(jobs) == 1:
            namespace, job_name = next(iter(jobs))
            return f"{self.grafana_url}/d/volcano-job?var-namespace={namespace}&var-job_name={job_name}&"
        if len(queues) == 1:
            return f"{self.grafana_url}/d/volcano-queue?var-queue={next(iter(queues))}&"
        return f"{self.grafana_url}/d/volcano-overview?"

    def mentions(self, items: Iterable[AlertItem]) -> MessageMentions:
        owners = self.settings.owners
        found: dict[str, list[str]] = {name: [] for name in MessageMentions.__dataclass_fields__}
        for item in items:
            for who in (owners.namespaces.get(item.namespace), owners.queues.get(item.queue)):
                if who is None:
                    continue
                for name, values in found.items():
                    values.extend(v for v in getattr(who, name) if v not in values)
        return MessageMentions(**{name: tuple(values) for name, values in found.items()})


def _item_dict(item: AlertItem) -> dict[str, Any]:
    return asdict(item)


# ---- deliveries -------------------------------------------------------------------------------------------


def due_deliveries(session: Session, now: datetime, limit: int = 200) -> list[NotificationDelivery]:
    """Pending messages whose time has come and which are first in line in their group (order per
    group: a message waits while an older one of its group is pending or being sent)."""
    older = aliased(NotificationDelivery)
    blocked = exists().where(and_(older.group_id == NotificationDelivery.group_id, older.id < NotificationDelivery.id,
                                  older.state.in_((PENDING, SENDING))))
    return list(session.scalars(select(NotificationDelivery)
                                .where(NotificationDelivery.state == PENDING,
                                       NotificationDelivery.next_attempt_at <= now, ~blocked)
                                .order_by(NotificationDelivery.id).limit(limit)))


def claim(session: Session, delivery_id: int, owner: str, now: datetime) -> bool:
    """Mark a pending message as being sent by `owner`; False when someone else got there first."""
    result = session.execute(update(NotificationDelivery)
                             .where(NotificationDelivery.id == delivery_id, NotificationDelivery.state == PENDING)
                             .values(state=SENDING, claimed_by=owner, claimed_at=now, updated_at=now),
                             execution_options={"synchronize_session": False})
    return bool(getattr(result, "rowcount", 0) == 1)


def mark(session: Session, delivery_id: int, owner: str, now: datetime, *, state: str, error: str = "",
         attempts: int | None = None, next_attempt_at: datetime | None = None) -> None:
    values: dict[str, Any] = {"state": state, "updated_at": now, "last_error": error[:2000]}
    if state == SENT:
        values["sent_at"] = now
    if attempts is not None:
        values["attempts"] = attempts
    if next_attempt_at is not None:
        values["next_attempt_at"] = next_attempt_at
    session.execute(update(NotificationDelivery)
                    .where(NotificationDelivery.id == delivery_id, NotificationDelivery.claimed_by == owner,
                           NotificationDelivery.state == SENDING)
                    .values(**values), execution_options={"synchronize_session": False})


def settle_inflight(session: Session, now: datetime) -> list[tuple[int, str]]:
    """Messages left `sending` by a process that died between sending and marking: their fate is
    unknown, and sending again could post twice (the chat services have no idempotency key). They
    become `uncertain` and are not sent again; a group that still fires is told again after its
    `repeat_interval`. Called when this process becomes the only sender (the leader). Returns
    (id, receiver) of each."""
    rows = session.execute(select(NotificationDelivery.id, NotificationDelivery.receiver)
                           .where(NotificationDelivery.state == SENDING)).all()
    if rows:
        session.execute(update(NotificationDelivery).where(NotificationDelivery.state == SENDING)
                        .values(state=UNCERTAIN, updated_at=now,
                                last_error="the sender stopped between sending and recording the result"),
                        execution_options={"synchronize_session": False})
    return [(int(i), str(r)) for i, r in rows]


def outbox_counts(session: Session) -> dict[tuple[str, str], tuple[int, datetime | None]]:
    """(receiver, state) -> (messages, oldest created_at) of unfinished and dead messages, for metrics."""
    rows = session.execute(select(NotificationDelivery.receiver, NotificationDelivery.state, func.count(),
                                  func.min(NotificationDelivery.created_at))
                           .where(NotificationDelivery.state.in_((PENDING, SENDING, DEAD)))
                           .group_by(NotificationDelivery.receiver, NotificationDelivery.state))
    return {(str(r), str(s)): (int(n), oldest) for r, s, n, oldest in rows}


def forget_delivered(session: Session, now: datetime, days: float) -> int:
    """Retention: finished messages (sent, dead, uncertain) older than `days`, and groups left empty
    with nothing said for as long. Returns the number of messages removed."""
    cutoff = now - timedelta(days=days)
    result = session.execute(delete(NotificationDelivery).where(
        NotificationDelivery.state.in_((SENT, DEAD, UNCERTAIN)), NotificationDelivery.updated_at < cutoff),
        execution_options={"synchronize_session": False})
    has_entries = exists().where(NotificationEntry.group_id == NotificationGroup.id)
    has_messages = exists().where(NotificationDelivery.group_id == NotificationGroup.id)
    session.execute(delete(NotificationGroup).where(NotificationGroup.updated_at < cutoff, ~has_entries,
                                                    ~has_messages), execution_options={"synchronize_session": False})
    return int(getattr(result, "rowcount", 0) or 0)
