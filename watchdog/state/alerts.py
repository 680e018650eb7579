"""The alert state machine: detectors' `Signal`s in, stored alert episodes (`alerts` rows) and
`Transition`s out.

    (new) --active--> pending --active for >= for_seconds--> firing --inactive--> resolved
      |                  \\--inactive before it fired--> row deleted (quietly: no transition)
      \\--active, for_seconds elapsed (or 0)--> firing

- One unresolved row per fingerprint (the database enforces it with a partial unique index); a
  fingerprint that comes back after its episode resolved opens a new row — except for the
  once-per-run kinds (`ONCE_PER_RUN_KINDS`: JobFailed, RetryExhausted, JobRetrying, PodRejected,
  PodOOMKilled, OverRequested), whose fingerprint names one Job/Pod UID: if any row with that
  fingerprint exists, in any state, the signal is ignored. That is what makes a replay of old events
  (the informers relist everything after a restart) unable to fire a resolved alert again.
- Pending episodes that never fire are deleted rather than kept as resolved: transient conditions
  (a gang waiting a minute) would otherwise fill the table; nobody was told about them.
- Crash safety: the book holds the unresolved alerts in memory, loaded from the database by `load()`.
  A new process loads them, replays the relisted events, and finds every fingerprint already open
  (no second row, no second firing transition).
- Writes happen in the caller's session; the caller commits. If that transaction is rolled back, the
  book's memory is ahead of the database: call `load()` again before the next `apply()`.
- `last_seen_at` is written at most every `TOUCH_SECONDS` per alert (periodic detectors repeat
  themselves every round; a write per alert per round would be most of the database traffic).
- A pending episode is promoted when a signal for it arrives: periodic detectors re-send every round,
  event-driven ones use `for_seconds` 0.
- Resolved by hand (`resolve_by_hand`, reached only through the writer loop): the episode ends like any
  other (one "resolved" transition), and if the cause still holds the fingerprint is *held* (column
  `held`): its active signals are ignored until the detector reports the cause gone, so a persisting
  cause does not reopen at once and its end sends no second "resolved" message; a later recurrence
  opens a new episode.
- Not thread-safe, like the detectors: one thread (the app's writer loop) feeds and applies.
- Values are made safe for both databases: strings cut to their column sizes, NUL characters and lone
  surrogates replaced, non-finite floats in details stored as null, unknown severities as "warning".
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.state.signals import ONCE_PER_RUN_KINDS, SEVERITIES, Signal, fingerprint

__all__ = ["FIRING", "PENDING", "RESOLVED", "AlertBook", "Transition"]

log = logging.getLogger(__name__)

PENDING, FIRING, RESOLVED = "pending", "firing", "resolved"
TOUCH_SECONDS = 60.0
# Once-per-run fingerprints remembered as "already had its episode" (LRU), a cache in front of the indexed
# lookup: a run's signals repeat within its life (minutes), so ~40 minutes of them at 300k pods a day is
# plenty, and the cap is ~2 MB rather than the ~10 MB a week of uptime used to fill.
KNOWN_MAX = 10_000
NAME_LEN, SUMMARY_LEN, FINGERPRINT_LEN = 253, 4000, 64


@dataclass
class Transition:
    """An alert changed state; `old_state` None: the alert is new. A notifier acts on
    `new_state == "firing"` and on `old_state == "firing", new_state == "resolved"`."""

    fingerprint: str
    kind: str
    old_state: str | None
    new_state: str
    alert_id: int


@dataclass
class _Open:
    id: int
    kind: str
    state: str
    started_at: datetime
    last_seen_at: datetime
    severity: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


def _text(value: str, limit: int) -> str:
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value[:limit]


def _jsonable(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON both databases accept (and equal to what reading it back gives)."""
    if depth > 20:
        return None
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _text(value, 100_000)
    if isinstance(value, dict):
        return {_text(str(k), 1000): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1) for v in value]
    return _text(str(value), 1000)


class AlertBook:
    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}
        self._known: OrderedDict[str, None] = OrderedDict()
        self._held: dict[str, str] = {}  # fingerprint -> kind, resolved by hand while the cause held

    # ---- reading ---------------------------------------------------------------------------------------

    def load(self, session: Session) -> None:
        """(Re)build the in-memory view from the database: every pending or firing alert."""
        self._open = {}
        self._known.clear()
        for row in session.scalars(select(Alert).where(Alert.state != RESOLVED)):
            self._open[row.fingerprint] = self._entry(row)
        self._held = {fp: kind for fp, kind in session.execute(
            select(Alert.fingerprint, Alert.kind).where(Alert.held.is_(True)))}

    @staticmethod
    def _entry(row: Alert) -> _Open:
        return _Open(row.id, row.kind, row.state, row.started_at, row.last_seen_at, row.severity, row.summary,
                     row.details if isinstance(row.details, dict) else {})

    def state(self, fingerprint: str) -> str | None:
        """"pending" / "firing" for an open alert, else None."""
        entry = self._open.get(fingerprint)
        return entry.state if entry is not None else None

    def open_counts(self) -> dict[tuple[str, str, str], int]:
        """(kind, severity, state) -> number of open alerts, for metrics."""
        counts: dict[tuple[str, str, str], int] = {}
        for entry in self._open.values():
            key = (entry.kind, entry.severity, entry.state)
            counts[key] = counts.get(key, 0) + 1
        return counts

    # ---- the state machine -----------------------------------------------------------------------------

    def apply(self, signals: Iterable[Signal], session: Session, now: datetime) -> list[Transition]:
        transitions: list[Transition] = []
        for signal in signals:
            if len(signal.fingerprint) > FINGERPRINT_LEN:  # not from fingerprint(): make it fit the column
                signal = replace(signal, fingerprint=fingerprint(signal.kind, signal.fingerprint))
            if signal.fingerprint in self._held:
                if not signal.active:
                    self._release(signal.fingerprint, session)
                continue
            entry = self._open.get(signal.fingerprint)
            if not signal.active:
                if entry is not None:
                    self._resolve(signal.fingerprint, entry, session, now, transitions)
            elif entry is None:
                self._open_episode(signal, session, now, transitions)
            else:
                self._continue(signal, entry, session, now, transitions)
        return transitions

    def resolve_missing(self, kinds: AbstractSet[str], seen: AbstractSet[str], session: Session,
                        now: datetime) -> list[Transition]:
        """Resolve every open alert of `kinds` whose fingerprint is not in `seen`: a periodic detector's
        full round reports everything that holds, so what it left out no longer holds."""
        transitions: list[Transition] = []
        gone = [(fp, e) for fp, e in self._open.items() if e.kind in kinds and fp not in seen]
        for fp, entry in gone:
            self._resolve(fp, entry, session, now, transitions)
        for fp in [fp for fp, kind in self._held.items() if kind in kinds and fp not in seen]:
            self._release(fp, session)
        return transitions

    def resolve_by_hand(self, alert_id: int, session: Session, now: datetime) -> tuple[str, list[Transition]]:
        """A person resolved the alert (API request). Returns the outcome — "resolved",
        "already_resolved" or "no_such_alert" — and the transitions to announce."""
        row = session.get(Alert, alert_id, populate_existing=True)
        if row is None:
            return "no_such_alert", []
        entry = self._open.get(row.fingerprint)
        if row.state == RESOLVED or entry is None or entry.id != alert_id:
            return "already_resolved", []
        transitions: list[Transition] = []
        self._resolve(row.fingerprint, entry, session, now, transitions, keep_pending=True)
        self._held[row.fingerprint] = row.kind
        session.execute(update(Alert).where(Alert.id == alert_id).values(held=True),
                        execution_options={"synchronize_session": False})
        return "resolved", transitions

    def _release(self, fp: str, session: Session) -> None:
        """The cause of a held alert is gone: the next occurrence is a new episode."""
        self._held.pop(fp, None)
        session.execute(update(Alert).where(Alert.fingerprint == fp, Alert.held.is_(True)).values(held=False),
                        execution_options={"synchronize_session": False})

    def apply_round(self, kinds: AbstractSet[str], signals: list[Signal], session: Session,
                    now: datetime) -> list[Transition]:
        """`apply` a periodic detector's full round, then `resolve_missing` for its kinds."""
        transitions = self.apply(signals, session, now)
        seen = {s.fingerprint if len(s.fingerprint) <= FINGERPRINT_LEN else fingerprint(s.kind, s.fingerprint)
                for s in signals if s.active}
        return transitions + self.resolve_missing(kinds, seen, session, now)

    def _open_episode(self, signal: Signal, session: Session, now: datetime, transitions: list[Transition]) -> None:
        fp = signal.fingerprint
        once = signal.kind in ONCE_PER_RUN_KINDS
        if once and fp in self._known:
            self._known.move_to_end(fp)
            return
        # The memory may lag the database (another writer, a rolled-back load): look before inserting.
        query = select(Alert).where(Alert.fingerprint == fp)
        if not once:
            query = query.where(Alert.state != RESOLVED)
        existing = session.scalars(query.order_by(Alert.id.desc()).limit(1)
                                   .execution_options(populate_existing=True)).first()
        if existing is not None:
            if existing.state != RESOLVED:
                entry = self._open[fp] = self._entry(existing)
                self._continue(signal, entry, session, now, transitions)
            else:
                self._remember(fp)
            return
        started = now
        if signal.since is not None and signal.since.tzinfo is not None and signal.since < now:
            started = signal.since
        firing = (now - started).total_seconds() >= signal.for_seconds
        severity = signal.severity if signal.severity in SEVERITIES else "warning"
        summary = _text(signal.summary, SUMMARY_LEN)
        details = _jsonable(signal.details) if isinstance(signal.details, dict) else {}
        row = Alert(
            fingerprint=fp, kind=_text(signal.kind, 64), severity=severity,
            state=FIRING if firing else PENDING, namespace=_text(signal.namespace, NAME_LEN),
            queue=_text(signal.queue, NAME_LEN), job_name=_text(signal.job_name, NAME_LEN),
            subject=_text(signal.subject, NAME_LEN), summary=summary, details=details, started_at=started,
            fired_at=now if firing else None, resolved_at=None, last_seen_at=now, updated_at=now,
        )
        session.add(row)
        session.flush()
        self._open[fp] = _Open(row.id, row.kind, row.state, started, now, severity, summary, details)
        transitions.append(Transition(fp, row.kind, None, row.state, row.id))

    def _continue(self, signal: Signal, entry: _Open, session: Session, now: datetime,
                  transitions: list[Transition]) -> None:
        values: dict[str, Any] = {}
        if entry.state == PENDING and (now - entry.started_at).total_seconds() >= signal.for_seconds:
            values.update(state=FIRING, fired_at=now)
            transitions.append(Transition(signal.fingerprint, entry.kind, PENDING, FIRING, entry.id))
            entry.state = FIRING
        severity = signal.severity if signal.severity in SEVERITIES else "warning"
        summary = _text(signal.summary, SUMMARY_LEN)
        details = _jsonable(signal.details) if isinstance(signal.details, dict) else {}
        if severity != entry.severity:
            values["severity"] = entry.severity = severity
        if summary and summary != entry.summary:
            values["summary"] = entry.summary = summary
        if details and details != entry.details:
            values["details"] = entry.details = details
        if values or (now - entry.last_seen_at).total_seconds() >= TOUCH_SECONDS:
            values.update(last_seen_at=now, updated_at=now)
            entry.last_seen_at = now
            session.execute(update(Alert).where(Alert.id == entry.id).values(**values),
                            execution_options={"synchronize_session": False})

    def _resolve(self, fp: str, entry: _Open, session: Session, now: datetime, transitions: list[Transition],
                 keep_pending: bool = False) -> None:
        del self._open[fp]
        if entry.state == PENDING and not keep_pending:  # never fired: nobody heard of it
            session.execute(delete(Alert).where(Alert.id == entry.id), execution_options={"synchronize_session": False})
            return
        result = session.execute(update(Alert).where(Alert.id == entry.id, Alert.state != RESOLVED)
                                 .values(state=RESOLVED, resolved_at=now, last_seen_at=now, updated_at=now),
                                 execution_options={"synchronize_session": False})
        if entry.kind in ONCE_PER_RUN_KINDS:
            self._remember(fp)
        if getattr(result, "rowcount", 1) != 0:  # 0: resolved meanwhile by an old leader's last transaction
            transitions.append(Transition(fp, entry.kind, entry.state, RESOLVED, entry.id))

    def _remember(self, fp: str) -> None:
        self._known[fp] = None
        self._known.move_to_end(fp)
        while len(self._known) > KNOWN_MAX:
            self._known.popitem(last=False)
