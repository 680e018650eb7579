"""ClusterStale (periodic, on the leader's heartbeat pass; one alert per stale cluster): the fleet watches
itself. Several clusters' watchdogs share one database, each cluster's leader writing its heartbeat
(`watchdog.state.fleet.beat`, every `cluster.heartbeat_interval_seconds`); a cluster whose heartbeat is
older than `cluster.stale_after_seconds` has no watchdog writing for it (the Deployment is gone, its
nodes are down, it cannot reach the database), and nobody in that cluster can say so.

Who raises it. Any other cluster's leader could; if all did, a dead cluster would be announced N-1 times
in chat. So exactly one does: the *live cluster with the smallest name*, a cluster being live while its
heartbeat is fresh (the judging cluster counts itself live: it is running this check). Every leader
computes the same raiser from the same table, so no coordination is needed:
- the raiser alerts for each other cluster whose heartbeat is stale (the fingerprint names that cluster),
  and resolves the alert when that cluster writes again;
- if the raiser itself dies, it goes stale, and the next smallest live cluster becomes the raiser and
  raises for the dead raiser and for whatever else is stale;
- a cluster that is not (or no longer) the raiser states nothing, so its detector's round resolves any
  ClusterStale it still holds: when a former raiser comes back, the stand-in resolves its alerts (the
  clusters they named are either fresh again or carried by the returning raiser).
A cluster alone in its database (only its own heartbeat) never raises anything. The alert is stored
among the raiser's rows (its cluster column is the raiser's), like everything its leader writes.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.fleet import Heartbeat, heartbeats
from volcano_monitor.watchdog.state.signals import Signal, fingerprint

__all__ = ["CLUSTER_STALE", "ClusterStaleDetector", "raiser"]

CLUSTER_STALE = "ClusterStale"


def raiser(own: str, beats: list[Heartbeat], now: datetime, stale_after_seconds: float) -> str:
    """The cluster that raises ClusterStale: the smallest name among the live ones (`own` always live)."""
    live = {own} | {h.cluster for h in beats if _age(h, now) <= stale_after_seconds}
    return min(live)


def _age(beat: Heartbeat, now: datetime) -> float:
    seen = beat.seen_at if beat.seen_at.tzinfo is not None else beat.seen_at.replace(tzinfo=UTC)
    return (now - seen).total_seconds()


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)  # whole minutes: the summary changes (one row update) at most once a minute
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} days"


class ClusterStaleDetector:
    KINDS = frozenset({CLUSTER_STALE})

    def __init__(self, own: str, stale_after_seconds: float) -> None:
        self.own, self.stale_after_seconds = own, stale_after_seconds

    def check(self, session: Session, now: datetime) -> list[Signal]:
        return self.judge(heartbeats(session), now)

    def judge(self, beats: list[Heartbeat], now: datetime) -> list[Signal]:
        """A full round: an active signal per stale other cluster when this cluster is the raiser, else
        nothing (what this cluster held is then resolved by the round)."""
        if raiser(self.own, beats, now, self.stale_after_seconds) != self.own:
            return []
        out: list[Signal] = []
        for beat in beats:
            age = _age(beat, now)
            if beat.cluster == self.own or age <= self.stale_after_seconds:
                continue
            details = {"cluster": beat.cluster, "last_heartbeat": beat.seen_at.isoformat(),
                       "seconds_since_heartbeat": round(age), "last_identity": beat.identity,
                       "stale_after_seconds": self.stale_after_seconds, "raised_by": self.own}
            out.append(Signal(
                CLUSTER_STALE, fingerprint(CLUSTER_STALE, beat.cluster), True, severity="warning",
                subject=beat.cluster, details=details,
                summary=f"cluster {beat.cluster}'s watchdog has written no heartbeat for {_duration(age)} "
                        f"(last {beat.seen_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC, by {beat.identity or '?'})"))
        return out
