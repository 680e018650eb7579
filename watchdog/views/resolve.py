"""The one change people make through the API and the UI: a manual resolve. Only the leader's worker writes
alert state, so a view stores a request and waits a moment for the worker's outcome.

Alerts are addressed by their database-wide id, so the UI and the API of any cluster's watchdog may resolve
another cluster's alert: the request carries the alert's cluster, and that cluster's leader carries it out
(the request's default cluster would be the serving watchdog's, whose leader never sees it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from fastapi import HTTPException
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.models import Alert, AlertRequest
from volcano_monitor.watchdog.state.db.scope import fleet


def any_alert(session: Session, alert_id: int) -> Alert | None:
    """The alert of that id, whichever cluster's it is (ids are database-wide)."""
    return session.scalars(fleet(select(Alert).where(Alert.id == alert_id))).first()


def store_resolve_request(engine: Engine, alert_id: int, clock: Callable[[], datetime]) -> int:
    """Store a manual resolve for the leader's worker (the only writer of alert state); its id.
    404 / 409 at once when the alert is unknown or already resolved."""
    with Session(engine) as session, session.begin():
        row = any_alert(session, alert_id)
        if row is None:
            raise HTTPException(404, "no such alert")
        if row.state == "resolved":
            raise HTTPException(409, "alert is already resolved")
        request = AlertRequest(cluster=row.cluster, alert_id=alert_id, action="resolve", requested_at=clock(),
                               outcome="")
        session.add(request)
        session.flush()
        return request.id


def wait_for_request(engine: Engine, request_id: int, seconds: float) -> str | None:
    """The outcome of a stored request once a worker carried it out, or None after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        with Session(engine) as session:
            done = session.scalars(fleet(select(AlertRequest).where(AlertRequest.id == request_id))).first()
            if done is not None and done.done_at is not None:
                return done.outcome
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
