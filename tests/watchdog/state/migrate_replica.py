"""One replica's migration, run as its own process by tests/watchdog/state/test_migrate_lock.py.

`python -m tests.watchdog.state.migrate_replica URL RENDEZVOUS_DIR REPLICAS locked|unlocked`

Replicas are processes (as in a cluster, and because Alembic's `context` is process-global, so two
threads cannot migrate at once in any case). Each is held just before it creates `alembic_version`
— it has read that there is no schema yet — until every replica has got as far, or, once every
replica has started migrating, a grace period has passed (the others are waiting on the lock). That
makes the race certain where there is no lock, and gives the others time to reach the lock where
there is one.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import Engine, event

from volcano_monitor.watchdog.state.db.engine import alembic_config, make_engine, migrate

GRACE_SECONDS = 1.0
GIVE_UP_SECONDS = 30.0


def unlocked_upgrade(engine: Engine) -> None:
    """What `migrate` did before the lock."""
    command.upgrade(alembic_config(engine), "head")


class Rendezvous:
    def __init__(self, directory: Path, replicas: int) -> None:
        self.directory, self.replicas = directory, replicas

    def mark(self, what: str) -> None:
        (self.directory / f"{what}-{os.getpid()}").touch()

    def count(self, what: str) -> int:
        return len(list(self.directory.glob(f"{what}-*")))

    def hold(self, *args: Any) -> None:
        """before_cursor_execute: wait at the creation of the version table."""
        if "CREATE TABLE alembic_version" not in str(args[2]):
            return
        self.mark("arrived")
        deadline, all_started = time.monotonic() + GIVE_UP_SECONDS, None
        while time.monotonic() < deadline and self.count("arrived") < self.replicas:
            if all_started is None and self.count("started") >= self.replicas:
                all_started = time.monotonic()
            if all_started is not None and time.monotonic() - all_started > GRACE_SECONDS:
                return
            time.sleep(0.02)


def main(argv: list[str]) -> int:
    url, directory, replicas, mode = argv
    rendezvous = Rendezvous(Path(directory), int(replicas))
    engine = make_engine(url)
    event.listen(engine, "before_cursor_execute", rendezvous.hold)
    rendezvous.mark("started")
    try:
        (migrate if mode == "locked" else unlocked_upgrade)(engine)
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
