"""Which clusters' rows a view reads, when several clusters' watchdogs share one database (docs/fleet.md,
"API and UI").

The defaults, the same in the API and the UI:
- Lists (jobs, alerts, recommendations, queues, silences, notifications, OOM resubmissions, GPU-idle aborts,
  reports) read every cluster in the database: the fleet. `?cluster=a&cluster=b` or `?cluster=a,b` narrows
  them; a cluster the database does not hold is an empty list, not an error (it may simply not have
  written yet); a name that cannot be a cluster's is a 422 whose one error says so in one line.
- Item pages addressed by namespace/name or uid (a job run, a queue) take one `?cluster=` and default to
  the serving watchdog's own cluster: two clusters seeded alike hold the same names and uids. Alerts,
  silences and messages are addressed by a database-wide id, so they need no cluster.
- Writes made through the API or the UI for a row of another cluster (a manual resolve, a silence from an
  alert's page) carry that row's cluster explicitly: the row's own leader carries them out.
- /metrics stays the serving watchdog's own cluster: each cluster's Prometheus scrapes its own watchdog.

Reading is the engine's business (`watchdog.state.db.scope`): a Session reads its engine's cluster unless a
statement says `fleet(statement, clusters)`. `Own` keeps that default where a caller (the CLI, a digest)
means "this watchdog's cluster".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum
from typing import Annotated, TypeVar

from fastapi import Query, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session
from sqlalchemy.sql import Executable

from volcano_monitor.watchdog.state.db.scope import cluster_of, fleet
from volcano_monitor.watchdog.state.fleet import heartbeats

# The rule of `cluster.name` (watchdog.runtime.settings, a layer above): 1-63 letters, digits, '.', '_', '-'.
CLUSTER_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
INVALID = "cluster: {name!r} is not a cluster name (1-63 letters, digits, '.', '_' or '-')"
_S = TypeVar("_S", bound=Executable)


class Own(Enum):
    """The engine's own cluster: what a statement reads when it does not say otherwise."""

    OWN = "own"


OWN = Own.OWN
Clusters = tuple[str, ...] | None  # None: every cluster


def parse_clusters(values: Sequence[str] | None) -> Clusters:
    """`?cluster=a&cluster=b,c` as ("a", "b", "c"); None when not given (every cluster). ValueError with
    one line for a name a cluster cannot have."""
    if not values:
        return None
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    for name in names:
        if not CLUSTER_NAME.fullmatch(name):
            raise ValueError(INVALID.format(name=name[:80]))
    return tuple(dict.fromkeys(names)) or None


def parse_cluster(value: str | None, own: str) -> str:
    """An item page's one cluster: `value`, or the serving watchdog's own."""
    if not value:
        return own
    if not CLUSTER_NAME.fullmatch(value):
        raise ValueError(INVALID.format(name=value[:80]))
    return value


# One string in the schema (an array parameter made schemathesis and clients guess its encoding); a repeated
# `cluster=` is read from the request too.
ClusterParam = Annotated[str | None, Query(
    max_length=2000, pattern=r"^[A-Za-z0-9._,-]*$",
    description="Only these clusters: comma-separated, or the parameter repeated. Default: every cluster.")]
OneCluster = Annotated[str | None, Query(
    max_length=253, pattern=r"^[^\x00]*$", description="The cluster (default: the serving watchdog's own).")]


def invalid_cluster(value: object, reason: str) -> RequestValidationError:
    """A malformed name, answered as FastAPI answers a parameter that fails validation (the 422 the schema
    declares), with one line naming it."""
    return RequestValidationError([{"type": "value_error", "loc": ("query", "cluster"), "msg": reason,
                                    "input": value}])


def cluster_filter(request: Request, cluster: ClusterParam = None) -> Clusters:
    """The API's dependency for lists: the clusters asked for (None: every one); a one-line 422."""
    values = request.query_params.getlist("cluster")
    try:
        return parse_clusters(values)
    except ValueError as exc:
        raise invalid_cluster(cluster, str(exc)) from None


def across(statement: _S, clusters: Clusters | Own) -> _S:
    """`statement` reading `clusters` (None: all; OWN: the engine's own, the Session's default)."""
    return statement if clusters is OWN else fleet(statement, clusters)


def known_clusters(session: Session) -> list[str]:
    """The clusters of the database: those that wrote a heartbeat, and the serving watchdog's own."""
    return sorted({h.cluster for h in heartbeats(session)} | {cluster_of(session)})
