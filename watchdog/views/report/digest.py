"""Scheduled report digests: on the leader, when a digest's cron schedule comes due, its report of the
period just ended is put into the notification outbox as one message to its receiver, with a link to
the HTML report. The sender delivers it like any message (retries, dead letters, at most once).

Exactly once per period: the message and a `report_digests` row (unique on name + period start) are
written in one transaction. A replica that is no longer leader, or a new leader after a failover,
finds the row and does nothing; two writers racing both insert and the database refuses the second
(IntegrityError: its transaction, message included, is rolled back).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.cron import parse_cron
from volcano_monitor.watchdog.actions.notify.message import AlertItem, Message, rfc3339
from volcano_monitor.watchdog.actions.notify.outbox import FIRING, NOTICE_LABEL, PENDING
from volcano_monitor.watchdog.actions.notify.sender import Leader
from volcano_monitor.watchdog.state.db.engine import describe_error
from volcano_monitor.watchdog.state.db.models import NotificationDelivery, NotificationGroup, ReportDigestSent
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.views.report.compute import Report, compute_report
from volcano_monitor.watchdog.views.report.settings import Digest, Reports

__all__ = ["DigestScheduler", "digest_message", "due_period", "queue_digest", "report_link"]

log = logging.getLogger(__name__)
KIND = "ReportDigest"


def due_period(digest: Digest, now: datetime, max_delay_seconds: float) -> tuple[datetime, datetime] | None:
    """The period of the digest last due at or before `now` ([end - period, end), end = the scheduled
    time); None when it was due longer than `max_delay_seconds` ago, or never."""
    end = parse_cron(digest.schedule).previous(now)
    if end is None or (now - end).total_seconds() > max_delay_seconds:
        return None
    return end - timedelta(seconds=digest.period), end


def report_link(api_url: str | None, report: Report, cluster: str | None = None) -> str:
    """The HTML report of exactly this period in the watchdog API ("" without `notifications.api_url`);
    `cluster`: the digest's (the API's report reads every cluster unless told)."""
    if not api_url:
        return ""
    query = urlencode({"since": rfc3339(report.since), "until": rfc3339(report.until), "by": report.by,
                       "format": "html", **({"cluster": cluster} if cluster else {})})
    return f"{api_url.rstrip('/')}/api/v1/reports?{query}"


def _hours(used: float, requested: float, unit: str) -> str:
    share = f" ({used / requested:.0%})" if requested > 0 else ""
    return f"{unit} {used:.1f} of {requested:.1f} h used{share}"


def digest_message(digest: Digest, report: Report, link: str) -> Message:
    """One message: totals in the summary, the most wasteful groups and runs as its lines."""
    total = report.total
    alerts = sum(total.alerts.values())
    summary = (f"Report {digest.name} by {report.by}, {rfc3339(report.since)} to {rfc3339(report.until)}: "
               f"{total.runs} runs, {total.failed} failed, {alerts} alerts; "
               f"{_hours(total.cpu.used, total.cpu.requested, 'CPU core')}, "
               f"{_hours(total.memory.used, total.memory.requested, 'memory GiB')}, "
               f"{_hours(total.gpu.used, total.gpu.requested, 'GPU')}")
    groups = sorted(report.groups, key=lambda g: (-g.gpu.wasted, -g.cpu.wasted, g.name))[:digest.top]
    lines = [f"{report.by} {g.name or '-'}: {g.runs} runs, {g.failed} failed, wasted {g.cpu.wasted:.1f} core-h, "
             f"{g.memory.wasted:.1f} GiB-h, {g.gpu.wasted:.1f} GPU-h" for g in groups]
    lines += [f"top waster {w.namespace}/{w.name}: {w.cpu_core_hours:.1f} core-h, {w.memory_gib_hours:.1f} GiB-h, "
              f"{w.gpu_hours:.1f} GPU-h unused" for w in report.top_wasters[:digest.top]]
    item = AlertItem(kind=KIND, severity="info", status=FIRING, summary=summary, subject=digest.name,
                     reasons=tuple(lines), started_at=rfc3339(report.until), url=link,
                     fingerprint=hashlib.sha256(f"{digest.name}|{report.since.isoformat()}".encode()).hexdigest(),
                     labels={NOTICE_LABEL: "true", "report": digest.name})
    return Message(receiver=digest.receiver, group_key=_group_key(digest.name), group_labels={"report": digest.name},
                   status=FIRING, alerts=(item,))


def _group_key(name: str) -> str:
    return "report:" + hashlib.sha256(name.encode()).hexdigest()[:40]


def queue_digest(session: Session, digest: Digest, period: tuple[datetime, datetime], api_url: str | None,
                 now: datetime, identity: str = "") -> bool:
    """Put the digest of `period` into the outbox, in the caller's transaction; False when it was
    queued before. A racing writer's insert of the same (name, period start) raises IntegrityError."""
    start, end = period
    if session.scalars(select(ReportDigestSent.id).where(ReportDigestSent.name == digest.name,
                                                         ReportDigestSent.period_start == start)).first() is not None:
        return False
    report = compute_report(session, start, end, digest.by, top=digest.top)
    message = digest_message(digest, report, report_link(api_url, report, cluster_of(session)))
    key = _group_key(digest.name)
    group = session.scalars(select(NotificationGroup).where(NotificationGroup.group_key == key)).first()
    if group is None:  # a group of its own: never flushed (no entries), it only orders the digest's messages
        group = NotificationGroup(group_key=key, receiver=digest.receiver, route="report",
                                  labels={"report": digest.name}, flush_at=None, last_flush_at=None, version=0,
                                  created_at=now, updated_at=now)
        session.add(group)
        session.flush()
    group.last_flush_at = group.updated_at = now
    delivery = NotificationDelivery(group_id=group.id, receiver=digest.receiver, state=PENDING,
                                    message=message.to_dict(), attempts=0, next_attempt_at=now, claimed_by=None,
                                    claimed_at=None, sent_at=None, last_error="", created_at=now, updated_at=now)
    session.add(delivery)
    session.flush()
    session.add(ReportDigestSent(name=digest.name, period_start=start, period_end=end, receiver=digest.receiver,
                                 delivery_id=delivery.id, identity=identity, created_at=now))
    session.flush()  # the unique key is checked here: a second writer fails before it commits
    return True


class DigestScheduler:
    """A thread that, on the leader only, queues each digest when its schedule comes due."""

    def __init__(self, settings: Reports, engine: Engine, leader: Leader, api_url: str | None = None,
                 wake: Callable[[], None] = lambda: None, identity: str = "",
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.settings, self.engine, self.leader = settings, engine, leader
        self.api_url, self.wake, self.identity, self.clock = api_url, wake, identity, clock
        self.queued = 0  # digests this replica queued
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> DigestScheduler:
        if self.settings.digests:
            self._thread = threading.Thread(target=self._loop, name="report-digests", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a bug must not end digests
                self.errors += 1
                log.exception("report digest round failed")
            self._stop.wait(self.settings.check_interval_seconds)

    def run_once(self) -> int:
        """Queue every due digest not yet queued (leader only). Returns how many this call queued."""
        if not self.leader.is_leader():
            return 0
        queued = 0
        for digest in self.settings.digests:
            now = self.clock()
            period = due_period(digest, now, self.settings.max_delay_seconds)
            if period is None:
                continue
            try:
                with Session(self.engine) as session, session.begin():
                    if not self.leader.is_leader():
                        return queued
                    done = queue_digest(session, digest, period, self.api_url, now, self.identity)
            except IntegrityError:
                log.info("digest %s of %s already queued by another replica", digest.name, rfc3339(period[0]))
                continue
            except SQLAlchemyError as exc:
                self.errors += 1
                log.error("digest %s not queued: %s", digest.name, describe_error(exc))
                continue
            if done:
                queued += 1
                self.queued += 1
                log.info("digest %s of %s to %s queued", digest.name, rfc3339(period[1]), digest.receiver)
        if queued:
            self.wake()
        return queued
