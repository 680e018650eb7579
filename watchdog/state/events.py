"""What the scheduler says about PodGroups through core/v1 Events, for GangUnschedulable's reason.

Why Events: a gang bigger than the whole cluster never gets a PodGroup condition in Volcano v1.12 —
the group stays `Pending` with no conditions at all, and only the scheduler's Events say why
("queue resource quota insufficient", "0/0 tasks in gang unschedulable: pod group is not ready, 4
minAvailable"). Events are aggregated: the same Event object is MODIFIED with `count` + 1 every
scheduling cycle, so the store keeps one note per PodGroup — the latest message — not a history.

Only Events whose involvedObject is a PodGroup are kept. The informer's `predicate` (`about_podgroup`)
drops every other Event before it is parsed or cached, so a busy cluster's pod Events cost one dict
lookup each. Job Events (`PodGroupPending`, `ExecuteAction`) add nothing the Job's status does not
already say, so they are not kept. A malformed Event (wrong types, no involved name) is counted in
`SchedulerNotes.skipped` and logged, never raised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["INVOLVED_KINDS", "EventView", "Note", "SchedulerNotes", "about_podgroup"]

log = logging.getLogger(__name__)

INVOLVED_KINDS = frozenset({"PodGroup"})
MESSAGE_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class EventView:
    """The few fields of a core/v1 Event the watchdog reads."""

    uid: str
    namespace: str  # the involved object's namespace
    kind: str  # the involved object's kind
    name: str  # the involved object's name
    involved_uid: str
    type: str  # Normal / Warning
    reason: str
    message: str
    count: int
    last_time: float | None  # lastTimestamp, else series.lastObservedTime, else eventTime (unix seconds)


@dataclass(frozen=True, slots=True)
class Note:
    """The latest thing the scheduler said about one PodGroup."""

    event_uid: str
    involved_uid: str
    type: str
    reason: str
    message: str
    count: int
    at: float | None


def about_podgroup(raw: Any) -> bool:
    """Informer predicate: is this Event about a PodGroup? Cheap, and safe on any JSON value."""
    involved = raw.get("involvedObject") if isinstance(raw, dict) else None
    return isinstance(involved, dict) and involved.get("kind") in INVOLVED_KINDS


def _text(d: dict[str, Any], key: str) -> str:
    value = d.get(key)
    return value if isinstance(value, str) else ""


def _time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_event(raw: Any) -> EventView | None:
    """The EventView of a raw Event, or None when it does not name its involved object."""
    if not isinstance(raw, dict):
        return None
    meta = raw.get("metadata")
    involved = raw.get("involvedObject")
    if not isinstance(meta, dict) or not isinstance(involved, dict):
        return None
    name = _text(involved, "name")
    if not name:
        return None
    series = raw.get("series")
    last = _time(raw.get("lastTimestamp"))
    if last is None and isinstance(series, dict):
        last = _time(series.get("lastObservedTime"))
    if last is None:
        last = _time(raw.get("eventTime")) or _time(raw.get("firstTimestamp"))
    count = raw.get("count")
    return EventView(
        uid=_text(meta, "uid"), namespace=_text(involved, "namespace") or _text(meta, "namespace"),
        kind=_text(involved, "kind"), name=name, involved_uid=_text(involved, "uid"), type=_text(raw, "type"),
        reason=_text(raw, "reason")[:256], message=_text(raw, "message")[:MESSAGE_LIMIT],
        count=count if type(count) is int else 1, last_time=last,
    )


class SchedulerNotes:
    """Per PodGroup (namespace, name): the latest Event message. `parse` runs on the informer thread
    (it only reads its argument and bumps a counter); the rest on the watchdog's worker thread."""

    def __init__(self) -> None:
        self._notes: dict[tuple[str, str], Note] = {}
        self.skipped = 0  # malformed Events

    def parse(self, raw: Any) -> EventView | None:
        """The informer's transform. None (an Event the informer then skips) for a malformed one."""
        try:
            view = parse_event(raw)
        except Exception:  # a parser bug must not stop the watch
            log.exception("could not read an Event")
            view = None
        if view is None:
            self.skipped += 1
            log.warning("malformed Event skipped (%d so far)", self.skipped)
        return view

    def on_event(self, event_type: str, event: EventView) -> None:
        if event.kind not in INVOLVED_KINDS:
            return
        key = (event.namespace, event.name)
        old = self._notes.get(key)
        if event_type == "DELETED":  # expired (event TTL): forget it only if it is the one kept
            if old is not None and old.event_uid == event.uid:
                del self._notes[key]
            return
        if old is not None and old.involved_uid and event.involved_uid and old.involved_uid != event.involved_uid:
            old = None  # about an earlier PodGroup of the same name
        # Event times have whole seconds: on a tie the Event received later is the newer one.
        if old is not None and old.at is not None and event.last_time is not None and event.last_time < old.at:
            return
        self._notes[key] = Note(event.uid, event.involved_uid, event.type, event.reason, event.message,
                                event.count, event.last_time)

    def forget(self, namespace: str, name: str) -> None:
        """The PodGroup is gone."""
        self._notes.pop((namespace, name), None)

    def latest(self, namespace: str, name: str, uid: str = "") -> Note | None:
        note = self._notes.get((namespace, name))
        if note is not None and uid and note.involved_uid and note.involved_uid != uid:
            return None
        return note

    def __len__(self) -> int:
        return len(self._notes)
