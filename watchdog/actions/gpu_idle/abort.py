"""The GPU idle abort action: the leader aborts a Job whose GpuIdle alert has been firing for the grace
period, in a queue whose policy says so, through Volcano's own bus Command (`bus.volcano.sh/v1alpha1`
Command, action `AbortJob`, `target` the Job): Volcano's job controller consumes (deletes) the
Command and moves the Job Aborting -> Aborted, keeping its finished pods and its history.

Exactly one Command per run, whatever fails when:
1. In one transaction, per eligible alert, a `gpu_idle_aborts` row is inserted unless the run's UID has
   one (`ON CONFLICT DO NOTHING`): state `pending` (apply) or `dry_run`, and the chat notice is queued
   in the same transaction — so a retried pass, or a second replica that believed it led, adds nothing.
2. For each `pending` row: the Job is read first; gone, another UID, or no longer Pending/Running (an
   earlier attempt's Command was already consumed) ends the row as `gone`. Else the Command is created
   under a name derived from the run's UID: 409 AlreadyExists is an earlier attempt's, not a second
   Command. Then the row becomes `created` (and a Normal Event on the Job says why).
Only the leader runs passes; a follower's loop waits.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.resources import EVENTS, JOBS, ResourceKind
from volcano_monitor.core.kube.rest import ApiUnavailable, request_json
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.actions.notify.message import AlertItem, rfc3339
from volcano_monitor.watchdog.actions.notify.outbox import NOTICE_LABEL, Outbox
from volcano_monitor.watchdog.actions.notify.sender import Leader
from volcano_monitor.watchdog.findings.detectors.gpuidle import GPU_IDLE
from volcano_monitor.watchdog.state.db.models import Alert, GpuIdleAbortRow
from volcano_monitor.watchdog.state.signals import fingerprint

log = logging.getLogger(__name__)

COMMANDS = ResourceKind("bus.volcano.sh", "v1alpha1", "commands", "Command", True)
PENDING, CREATED, DRY_RUN, GONE, FAILED = "pending", "created", "dry_run", "gone", "failed"
MAX_ATTEMPTS = 5
ABORTABLE_PHASES = ("Pending", "Running")
COMPONENT = "volcano-watchdog"


def command_name(job_name: str, uid: str) -> str:
    """A DNS-1123 name fixed by the run's UID: a retry asks for the same Command (409, not a second)."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:10]
    return f"{job_name[:200].rstrip('-.')}-gpu-idle-abort-{digest}"


def command_body(namespace: str, job_name: str, uid: str, message: str) -> dict[str, Any]:
    """An `AbortJob` Command as `vcctl job suspend` writes one: target and controller owner the Job."""
    target = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job_name, "uid": uid}
    return {"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
            "metadata": {"name": command_name(job_name, uid), "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": COMPONENT},
                         "ownerReferences": [{**target, "controller": True, "blockOwnerDeletion": True}]},
            "action": "AbortJob", "reason": "GpuIdle", "message": message[:1024], "target": target}


@dataclass(frozen=True)
class Eligible:
    alert: Alert
    limit: float


class GpuIdleAborter:
    def __init__(self, settings: GpuIdleSettings, engine: Engine, api: client.ApiClient | None, leader: Leader,
                 clock: Callable[[], float] = time.time, outbox: Outbox | None = None,
                 wake: Callable[[], None] = lambda: None, identity: str = "") -> None:
        self.settings = settings
        self.engine = engine
        self.api = api
        self.leader = leader
        self.clock = clock
        self.outbox = outbox
        self.wake = wake
        self.identity = identity
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (queue, outcome) -> count, for /metrics
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GpuIdleAborter:
        self._thread = threading.Thread(target=self._run, name="gpu-idle-aborter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.settings.abort.interval_seconds):
            try:
                self.run_once()
            except SQLAlchemyError as exc:
                log.error("gpu idle abort pass failed (database): %s", exc)
            except Exception:  # a bug must not end the loop
                log.exception("gpu idle abort pass failed")

    def counts(self) -> dict[tuple[str, str], int]:
        return dict(self.outcomes)

    # ---- one pass -----------------------------------------------------------------------------------

    def run_once(self) -> int:
        """Record newly eligible runs, then act on the pending ones; how many Commands were created."""
        if not self.settings.abort.enabled or not self.leader.is_leader():
            return 0
        now = datetime.fromtimestamp(self.clock(), UTC)
        with Session(self.engine) as session, session.begin():
            added = self._record_eligible(session, now)
        if self.settings.abort.mode != "apply":  # counted once committed (a rolled-back pass recorded nothing)
            for queue in added:
                self.outcomes[(queue, DRY_RUN)] += 1
        if added and self.outbox is not None and self.outbox.enabled:
            self.wake()
        created = 0
        with Session(self.engine) as session:
            pending = list(session.scalars(select(GpuIdleAbortRow).where(GpuIdleAbortRow.state == PENDING)
                                           .order_by(GpuIdleAbortRow.id)))
            session.expunge_all()
        for row in pending:
            if not self.leader.is_leader():
                break
            created += self._act(row, now)
        return created

    def _eligible(self, session: Session, now: datetime) -> list[Eligible]:
        grace = timedelta(seconds=self.settings.abort.grace_seconds)
        found = []
        for alert in session.scalars(select(Alert).where(Alert.kind == GPU_IDLE, Alert.state == "firing")):
            policy = self.settings.policy(alert.queue)
            if not self.settings.aborts(alert.queue) or policy.gpu_idle_limit_seconds is None:
                continue
            if alert.fired_at is None or alert.fired_at + grace > now:
                continue
            details = alert.details if isinstance(alert.details, dict) else {}
            if details.get("job_uid"):
                found.append(Eligible(alert, policy.gpu_idle_limit_seconds))
        return found

    def _record_eligible(self, session: Session, now: datetime) -> list[str]:
        """Insert the rows of newly eligible runs; the queues of those inserted (one entry per run)."""
        mode = self.settings.abort.mode
        insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        added: list[str] = []
        for item in self._eligible(session, now):
            alert, uid = item.alert, str(item.alert.details["job_uid"])
            values = {"job_uid": uid, "namespace": alert.namespace, "job_name": alert.job_name, "queue": alert.queue,
                      "mode": mode, "state": PENDING if mode == "apply" else DRY_RUN,
                      "command_name": command_name(alert.job_name, uid) if mode == "apply" else "",
                      "alert_id": alert.id, "idle_seconds": float(alert.details.get("idle_seconds") or 0.0),
                      "limit_seconds": item.limit, "grace_seconds": self.settings.abort.grace_seconds,
                      "attempts": 0, "last_error": "", "identity": self.identity, "created_at": now,
                      "acted_at": None if mode == "apply" else now}
            # RETURNING, not rowcount: psycopg reports -1 for an INSERT ... ON CONFLICT DO NOTHING.
            inserted = session.execute(insert(GpuIdleAbortRow).values(**values)
                                       .on_conflict_do_nothing(
                                           index_elements=[GpuIdleAbortRow.cluster, GpuIdleAbortRow.job_uid])
                                       .returning(GpuIdleAbortRow.id)).first()
            if inserted is None:
                continue  # this run has its row: recorded (and announced) before
            added.append(alert.queue)
            log.info("gpu idle: %s job %s/%s (uid %s, idle %.0f s)", "aborting" if mode == "apply" else
                     "would abort (dry-run)", alert.namespace, alert.job_name, uid, values["idle_seconds"])
            self._announce(session, alert, mode, now)
        return added

    def _announce(self, session: Session, alert: Alert, mode: str, now: datetime) -> None:
        """One chat notice per recorded run, queued in the transaction that records it."""
        if self.outbox is None or not self.outbox.enabled:
            return
        verb = "is being aborted" if mode == "apply" else "would be aborted (dry-run)"
        item = AlertItem(kind="GpuIdleAbort", severity="info", status="firing",
                         summary=f"Job {alert.namespace}/{alert.job_name} {verb}: its GPUs stayed idle past queue "
                                 f"{alert.queue}'s limit and the grace period",
                         namespace=alert.namespace, queue=alert.queue, job_name=alert.job_name,
                         subject=alert.job_name, reasons=(alert.summary,), started_at=rfc3339(now),
                         fingerprint=fingerprint("GpuIdleAbort", alert.namespace, alert.job_name,
                                                 str(alert.details.get("job_uid", ""))),
                         labels={NOTICE_LABEL: "true", "mode": mode})
        self.outbox.enqueue(session, item, now)

    def _act(self, row: GpuIdleAbortRow, now: datetime) -> int:
        """Create the Command for one pending row (see the module docstring); 1 when created."""
        state, error, created = PENDING, "", 0
        try:
            state = self._create(row)
        except (ApiUnavailable, OSError) as exc:
            error = str(exc)[:500]
        if state == CREATED:
            created = 1
            self._event(row, now)
        attempts = row.attempts + 1
        if state == PENDING and attempts >= MAX_ATTEMPTS:
            state = FAILED
        with Session(self.engine) as session, session.begin():
            stored = session.get(GpuIdleAbortRow, row.id)
            if stored is None or stored.state != PENDING:
                return created
            stored.state, stored.attempts, stored.identity = state, attempts, self.identity
            stored.last_error = error or stored.last_error
            if state != PENDING:
                stored.acted_at = now
        if state != PENDING:
            self.outcomes[(row.queue, state)] += 1
        return created

    def _create(self, row: GpuIdleAbortRow) -> str:
        if self.api is None:
            raise ApiUnavailable("no Kubernetes API client")
        status, job = request_json(self.api, "GET", JOBS.path(row.namespace, row.job_name))
        if status == 404:
            return GONE
        if status != 200 or not isinstance(job, dict):
            raise ApiUnavailable(f"reading job {row.namespace}/{row.job_name}: HTTP {status}")
        meta, phase = job.get("metadata") or {}, ((job.get("status") or {}).get("state") or {}).get("phase", "")
        if meta.get("uid") != row.job_uid or (phase and phase not in ABORTABLE_PHASES):
            return GONE  # a newer run of the name, or this run already aborting or done
        message = (f"volcano-watchdog: GPUs idle for {row.idle_seconds / 60:.0f} min (queue {row.queue}'s limit "
                   f"{row.limit_seconds / 60:g} min, grace {row.grace_seconds / 60:g} min)")
        body = command_body(row.namespace, row.job_name, row.job_uid, message)
        status, answer = request_json(self.api, "POST", COMMANDS.path(row.namespace), body)
        if status in (200, 201, 409):  # 409: an earlier attempt's Command, not yet consumed
            return CREATED
        raise ApiUnavailable(f"creating Command {body['metadata']['name']}: HTTP {status} {str(answer)[:200]}")

    def _event(self, row: GpuIdleAbortRow, now: datetime) -> None:
        """A Normal Event on the Job (a courtesy: the database holds the record)."""
        assert self.api is not None
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{row.job_name[:200]}.gpu-idle-", "namespace": row.namespace},
                "involvedObject": {"kind": "Job", "apiVersion": "batch.volcano.sh/v1alpha1", "name": row.job_name,
                                   "namespace": row.namespace, "uid": row.job_uid},
                "reason": "GpuIdleAbort", "type": "Normal",
                "message": f"Aborting: GPUs idle for {row.idle_seconds / 60:.0f} min (Command {row.command_name})",
                "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
                "reportingInstance": self.identity, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
        try:
            status, _ = request_json(self.api, "POST", EVENTS.path(row.namespace), body)
        except Exception as exc:  # never fail the action for its Event
            log.warning("gpu idle: no Event for job %s/%s: %s", row.namespace, row.job_name, exc)
            return
        if status not in (200, 201):
            log.warning("gpu idle: creating the Event for job %s/%s answered HTTP %s", row.namespace, row.job_name,
                        status)
