"""The clusters sharing one database: each watchdog's heartbeat (written by its cluster's leader) and the
check that a watchdog knows which cluster it is before it writes into a database others share.

Why heartbeats rather than "the newest row of each cluster": a quiet cluster (no jobs for a night) still
has a live watchdog, and an ended one must be told apart from it (ClusterStale, raised by the other
clusters' leaders: watchdog.findings.detectors.fleet).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.models import ClusterHeartbeat


class ClusterNameRequired(Exception):
    """The database holds other clusters' rows and this watchdog was not told its cluster's name."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    cluster: str
    identity: str
    started_at: datetime
    seen_at: datetime


def beat(session: Session, cluster: str, identity: str, now: datetime) -> None:
    """Record that `cluster`'s watchdog is alive (in the caller's transaction). Update first, insert when
    the cluster has no row: a racing second writer of a new cluster fails on the primary key and retries."""
    done = session.execute(update(ClusterHeartbeat).where(ClusterHeartbeat.cluster == cluster)
                           .values(identity=identity, seen_at=now))
    if not getattr(done, "rowcount", 0):
        session.add(ClusterHeartbeat(cluster=cluster, identity=identity, started_at=now, seen_at=now))


def heartbeats(session: Session) -> list[Heartbeat]:
    """Every cluster's last heartbeat, by name."""
    rows = session.execute(select(ClusterHeartbeat).order_by(ClusterHeartbeat.cluster)).scalars()
    return [Heartbeat(r.cluster, r.identity, r.started_at, r.seen_at) for r in rows]


def check_cluster_name(session: Session, name: str, explicit: bool) -> None:
    """A watchdog whose name was only defaulted (no `cluster.name`) may not write into a database that
    already holds another cluster's heartbeat: it would mix its rows into a name it guessed."""
    others = sorted(h.cluster for h in heartbeats(session) if h.cluster != name)
    if others and not explicit:
        raise ClusterNameRequired(
            f"the database holds clusters {', '.join(others)}; set cluster.name (--cluster-name, "
            f"VOLCANO_WATCHDOG_CLUSTER__NAME) to say which cluster this watchdog watches (it would be {name!r})")
