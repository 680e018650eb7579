"""Which cluster's rows a statement sees and writes: one database, many clusters (one watchdog each).

Every table carries a `cluster` column. The cluster is an execution option of the engine
(`make_engine(url, cluster=...)`), so code handed an engine is scoped without knowing it:
- an INSERT that does not name a cluster gets the engine's (the column's default reads the option);
- every ORM SELECT, UPDATE and DELETE run through a Session gets `cluster = <the engine's>` added to
  each clustered entity it touches (SQLAlchemy's `with_loader_criteria`, applied in `do_orm_execute`).
So retention, reconcile on takeover, capability and the outbox of one cluster's leader can never read
or change another cluster's rows, and a watchdog on its own SQLite file behaves exactly as before
(everything is cluster "default", or its configured name).

Reads across clusters (the fleet page, `?cluster=`, `report --by cluster`) say so on the statement:
`fleet(statement, clusters)`, None meaning every cluster. Driver-level SQL (watchdog.state.rollup_sql)
and Core statements on bare Tables bypass the ORM, so they name the cluster themselves
(`cluster_of(connection)`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TypeVar

from sqlalchemy import Connection, Engine, String, event
from sqlalchemy.engine.interfaces import ExecutionContext
from sqlalchemy.orm import Mapped, ORMExecuteState, Session, mapped_column, with_loader_criteria
from sqlalchemy.sql import Executable

DEFAULT_CLUSTER = "default"
CLUSTER_OPTION = "volcano_cluster"  # the engine's own cluster: what it writes and, unless told, reads
READ_OPTION = "volcano_read_clusters"  # a statement's clusters to read: a tuple, or None for all

_S = TypeVar("_S", bound=Executable)


def cluster_of(bind: Engine | Connection | Session) -> str:
    """The cluster an engine, connection or session (bound to one engine) writes as."""
    if isinstance(bind, Session):
        engine = bind.get_bind()
        return str(engine.get_execution_options().get(CLUSTER_OPTION, DEFAULT_CLUSTER))
    return str(bind.get_execution_options().get(CLUSTER_OPTION, DEFAULT_CLUSTER))


def scoped(engine: Engine, cluster: str) -> Engine:
    """The same engine (same pool) writing and reading as `cluster`."""
    return engine.execution_options(**{CLUSTER_OPTION: cluster})


def fleet(statement: _S, clusters: Collection[str] | None = None) -> _S:
    """`statement` reading the rows of `clusters` (None: of every cluster) instead of its engine's own."""
    return statement.execution_options(**{READ_OPTION: None if clusters is None else tuple(clusters)})


def insert_default(context: ExecutionContext) -> str:
    """The `cluster` column's default: the engine's cluster."""
    return str(context.execution_options.get(CLUSTER_OPTION, DEFAULT_CLUSTER))


class Clustered:
    """The mixin of every table's class (watchdog.state.db.models): the cluster a row belongs to. Every
    unique key leads with it; an insert that does not name it gets its engine's cluster."""

    cluster: Mapped[str] = mapped_column(String(253), default=insert_default)


@event.listens_for(Session, "do_orm_execute")
def _scope_to_cluster(state: ORMExecuteState) -> None:
    if not (state.is_select or state.is_update or state.is_delete):
        return
    options = state.execution_options
    if READ_OPTION in options:
        clusters = options[READ_OPTION]
        if clusters is None:
            return
        state.statement = state.statement.options(with_loader_criteria(
            Clustered, lambda cls: cls.cluster.in_(clusters), include_aliases=True))
        return
    cluster = cluster_of(state.session)
    state.statement = state.statement.options(with_loader_criteria(
        Clustered, lambda cls: cls.cluster == cluster, include_aliases=True))
