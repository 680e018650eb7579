"""Several clusters in one database (issue 32, "Must show"): two simulated clusters, east and west, each
watched by two watchdog processes: one writing the shared PostgreSQL database as its cluster
(`--cluster-name east|west`), and a reference writing a SQLite file of its own. Both of a cluster's watchdogs
watch the same simulator, so they see the same Jobs (the same UIDs): the shared database's rows of a cluster
must be its reference's rows. The two clusters play the same scenario, so they hold Jobs of the same names
in the same namespaces, which is where one cluster's statements would find the other's rows.

Comparisons are made with both simulated clusters held still (their scenario clock frozen, FreezableClock)
until every watchdog has stored what it saw, so no edge of the run separates the two sides. Usage numbers are
compared as in test_replicas (within 5 % plus two polls' share of the run): each process integrates its own
polls.

Then `kill -9` of east's watchdog: west's stored rows do not change because of it (finished rows are
snapshotted; west's shared rows keep matching its reference while east is away and after it returns), west's
leader raises ClusterStale for east (heartbeat every second, stale after four) and it resolves when east's
watchdog is started again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from tests.watchdog.conftest import POSTGRES_ADMIN
from tests.watchdog.harness import FAST_DETECTORS, alerts, runs
from tests.watchdog.test_replicas import last_poll, ready
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.db.scope import fleet
from volcano_monitor.watchdog.state.fleet import beat
from volcano_monitor.watchdog.views.report.compute import Group, compute_report

CLUSTERS = ("east", "west")
SPEED = 150
POLL_SECONDS = 0.5
FLUSH_SECONDS = 0.5
HEARTBEAT_SECONDS, STALE_SECONDS = 1.0, 5.0
# Usage is compared for finished runs this long: a run of a second or two (the scenario runs 150 times faster
# than life) gets one sample in one process and none in the other (test_replicas.comparable).
MIN_RUN = timedelta(seconds=4)
SEEN = timedelta(seconds=2)
# Columns both watchdogs of one cluster take from the same objects (the usage columns are integrals of
# each process's own polls; updated_at and deleted_at are when each process wrote or noticed; finished_at is
# the object's time, or for a job without one, e.g. a PyTorchJob, when the process saw it end: SEEN apart).
SAME = ("kind", "namespace", "name", "workload", "queue", "created_at", "started_at", "phase",
        "reason", "retry_count", "requested_cpu_cores", "requested_memory_bytes", "requested_gpus", "queue_path")
USED = ("cpu_core_seconds_used", "memory_byte_seconds_used")
EVENT_KINDS = {"JobFailed", "RetryExhausted", "JobRetrying", "PodRejected", "PodOOMKilled"}
HELD_KINDS = {"GangUnschedulable", "PartialGang", "QueueStarved", "GpuStranded"}
USAGE_KINDS = {"JobIdle", "OverRequested"}


class FreezableClock:
    """The simulated cluster's clock (real time), which a test can stop and start: while stopped the
    scenario does not move, so every watchdog catches up with the same cluster before rows are compared.
    Time spent stopped is skipped after, so the scenario resumes where it stood."""

    def __init__(self) -> None:
        self.paused = 0.0
        self.frozen_at: float | None = None
        # When it stood still: a pod running then is polled by each process while its usage stands still
        # too, which they integrate apart (their polls' timing decides), so such runs' usage is not compared.
        self.stood: list[tuple[datetime, datetime]] = []

    def __call__(self) -> float:
        return (self.frozen_at if self.frozen_at is not None else time.time()) - self.paused

    def freeze(self) -> None:
        self.frozen_at = time.time()

    def thaw(self) -> None:
        assert self.frozen_at is not None
        self.paused += time.time() - self.frozen_at
        self.stood.append((datetime.fromtimestamp(self.frozen_at, UTC), datetime.now(UTC)))
        self.frozen_at = None


@dataclass
class Process:
    """One watchdog process: which cluster it watches, which database it writes."""

    cluster: str
    database_url: str
    kubeconfig: Path
    config: Path
    log: Path
    cluster_name: str | None = None  # --cluster-name (None: left to its default)
    port: int = 0
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> Process:
        self.port = free_port()
        name = [] if self.cluster_name is None else ["--cluster-name", self.cluster_name]
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli", "--kubeconfig", str(self.kubeconfig),
             "--database-url", self.database_url, "--listen", f"127.0.0.1:{self.port}", "--config",
             str(self.config), *name, "run"],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.terminate()
            assert self.popen.wait(20) == 0, f"{self.cluster}: {self.log.read_text()[-3000:]}"

    def engine(self) -> Engine:
        return make_engine(self.database_url, cluster=self.cluster)


@pytest.fixture
def shared_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the clusters to share."""
    name = f"vm_fleet_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql+psycopg://{POSTGRES_ADMIN.rsplit('/', 1)[0].split('://', 1)[1]}/{name}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def config(path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "detectors": {**FAST_DETECTORS, "idle_window_seconds": 600},
        "sources": {"metrics_api": {"interval_seconds": POLL_SECONDS}, "flush_interval_seconds": FLUSH_SECONDS},
        "cluster": {"heartbeat_interval_seconds": HEARTBEAT_SECONDS, "stale_after_seconds": STALE_SECONDS},
    }))
    return path


def ledger(engine: Engine) -> dict[str, JobRun]:
    return {run.uid: run for run in runs(engine)}


def row(run: JobRun) -> dict[str, Any]:
    return {column: getattr(run, column) for column in SAME}


def finished_rows(engine: Engine) -> dict[str, tuple[Any, ...]]:
    """The finished runs' rows as stored (usage included): nothing should change them any more."""
    return {uid: (run.namespace, run.name, *row(run).values(), run.finished_at, *(getattr(run, c) for c in USED))
            for uid, run in ledger(engine).items() if run.finished_at is not None}


def finished_count(engine: Engine, since: datetime) -> int:
    """Finished runs stored so far that started after `since` and ran MIN_RUN at least (their usage is
    compared)."""
    try:
        return sum(1 for run in runs(engine) if run.started_at is not None and run.started_at > since
                   and run.finished_at is not None and run.finished_at - run.started_at >= MIN_RUN)
    except SQLAlchemyError:
        return 0


def close(a: float, b: float, seconds: float) -> bool:
    """Two usage integrals of one run by two processes: within 5 % plus two seconds' share of the run. The
    simulator publishes PodMetrics once a second, so a process polling a little late at either end of a run
    (on a loaded machine, often) counts a report more or less than the other; test_replicas, one cluster
    and three processes, allows two polls. Another cluster's usage added in would be 100 % off."""
    return a == pytest.approx(b, rel=0.05 + 2 / max(seconds, 1), abs=1e-9)


def compare_ledgers(shared: Engine, own: Engine, collecting: datetime, clock: FreezableClock,
                    keep: Any = lambda run: True) -> int:
    """The shared database's runs of one cluster are its reference's (the runs `keep` admits). Usage is
    compared for the finished runs that started once both processes were polling (`collecting`), ran
    MIN_RUN at least and not while the cluster stood still (`clock`): how many."""
    mine, theirs = ledger(shared), ledger(own)
    both = [uid for uid in theirs if keep(theirs[uid])]
    missing = sorted(f"{theirs[u].namespace}/{theirs[u].name} ({theirs[u].created_at:%T}, {theirs[u].started_at}, "
                     f"{theirs[u].finished_at}, {theirs[u].deleted_at})" for u in both if u not in mine)
    if missing:
        names = {theirs[u].name for u in both if u not in mine}
        with Session(shared) as session:
            anywhere = [(r.cluster, r.uid, r.name, r.finished_at, r.deleted_at, r.updated_at) for r in
                        session.scalars(fleet(select(JobRun).where(JobRun.name.in_(names))))]
        assert not missing, f"runs only the reference stored: {missing}; in the shared database: {anywhere}"
    extra = sorted(f"{r.namespace}/{r.name}" for u, r in mine.items() if keep(r) and u not in theirs)
    assert not extra, f"runs only the shared database holds: {extra}"
    apart, compared = [], 0
    for uid in both:
        a, b = mine[uid], theirs[uid]
        assert row(a) == row(b), f"run {b.namespace}/{b.name}: {row(a)} != {row(b)}"
        assert (a.finished_at is None) == (b.finished_at is None), f"run {b.namespace}/{b.name}: {a.finished_at}"
        assert a.finished_at is None or b.finished_at is None or abs(a.finished_at - b.finished_at) <= SEEN, (
            f"run {b.namespace}/{b.name} finished at {a.finished_at} and {b.finished_at}")
        if (b.started_at is not None and b.started_at > collecting and b.finished_at is not None
                and b.finished_at - b.started_at >= MIN_RUN
                and not any(b.started_at <= end + SEEN and start <= b.finished_at for start, end in clock.stood)):
            seconds = (b.finished_at - b.started_at).total_seconds()
            compared += 1
            apart += [f"{b.cluster} {b.namespace}/{b.name} {b.started_at:%T}..{b.finished_at:%T} {column}: "
                      f"{getattr(a, column):.3f} vs {getattr(b, column):.3f}" for column in USED
                      if not close(getattr(a, column), getattr(b, column), seconds)]
    assert not apart, f"{datetime.now(UTC):%T} usage apart (shared vs own):\n" + "\n".join(apart)
    return compared


def alert_keys(engine: Engine, since: datetime, runs_of: dict[tuple[str, str], JobRun]) -> set[tuple[str, ...]]:
    """What two processes watching one cluster both store, told apart from what each decides on its own
    timers and polls:
    - an event-driven alert (a Job failed, a pod was rejected): each one that fired since `since`;
    - a state held for a while (a gang unschedulable, a queue starved): firing now, the cluster standing
      still (a short episode, shorter than a detector pass or two, reaches one process and not the other);
    - a usage verdict (idle, over-requested) on a run long enough for its usage to agree (MIN_RUN; on a run of
      a second one process may hold a sample and the other none): firing now.
    The fleet's own (ClusterStale) are not a cluster's: left out."""
    out: set[tuple[str, ...]] = set()
    for a in alerts(engine):
        if a.kind in EVENT_KINDS and a.fired_at is not None and a.fired_at >= since:
            out.add((a.kind, a.fingerprint))
        elif a.kind in HELD_KINDS and a.state == "firing":
            out.add((a.kind, a.fingerprint, a.state))
        elif a.kind in USAGE_KINDS and a.state == "firing":
            run = runs_of.get((a.namespace, a.job_name))
            if run is not None and run.started_at and run.finished_at and run.finished_at - run.started_at >= MIN_RUN:
                out.add((a.kind, a.fingerprint, a.state))
    return out


def same_alerts(shared: Engine, own: Engine, since: datetime) -> None:
    runs_of = {(run.namespace, run.name): run for run in runs(own)}
    mine, theirs = alert_keys(shared, since, runs_of), alert_keys(own, since, runs_of)
    if mine != theirs:
        differ = {key[1] for key in mine ^ theirs}
        with Session(shared) as a, Session(own) as b:
            rows = [(side, x.cluster, x.kind, x.state, x.namespace, x.job_name, x.subject, x.started_at, x.fired_at,
                     x.resolved_at) for side, session in (("shared", a), ("own", b))
                    for x in session.scalars(fleet(select(Alert).where(Alert.fingerprint.in_(differ))))]
        assert mine == theirs, "\n".join(map(str, rows))
    assert any(key[0] in EVENT_KINDS for key in theirs), "no event-driven alert to compare"


def compare_reports(shared: Engine, own: Engine, since: datetime) -> None:
    """`report`'s numbers (volcano-watchdog report and /api/v1/reports compute them alike) per queue."""
    until = datetime.now(UTC) + timedelta(seconds=1)
    with Session(shared) as a, Session(own) as b:
        mine, theirs = (compute_report(s, since, until, "queue") for s in (a, b))

    def counts(group: Group) -> tuple[Any, ...]:
        return group.name, group.runs, group.succeeded, group.failed, group.running

    def hours(group: Group) -> list[float]:
        """Requested hours of a running run grow until each process's last flush (a flush apart on a loaded
        machine is seconds of a 12-core gang's run): within 15 %. Each run's requests are equal (compare_ledgers)."""
        return [group.cpu.requested, group.memory.requested, group.gpu.requested]

    # A group without runs is there for its alerts, compared apart (same_alerts; the fleet's own have no queue)
    assert [counts(g) for g in mine.groups if g.runs] == [counts(g) for g in theirs.groups if g.runs]
    assert counts(mine.total) == counts(theirs.total)
    for ours, reference in zip([g for g in mine.groups if g.runs] + [mine.total],
                               [g for g in theirs.groups if g.runs] + [theirs.total], strict=True):
        assert hours(ours) == pytest.approx(hours(reference), rel=0.15, abs=1e-3), ours.name
        # Used hours sum each process's own polls, also of the runs that started before both polled (which
        # compare_ledgers leaves out): 20 %. Another cluster's usage mixed in would be 100 % off.
        assert ours.cpu.used == pytest.approx(reference.cpu.used, rel=0.2, abs=1e-3), ours.name


def settle(clocks: list[FreezableClock]) -> None:
    """Hold the clusters still until every watchdog stored what it saw: a few flushes and detector passes."""
    for clock in clocks:
        clock.freeze()
    time.sleep(4 * FLUSH_SECONDS + 4 * FAST_DETECTORS["check_interval_seconds"] + 1)


def converged(check: Callable[[], object], timeout: float = 15) -> None:
    """`check` passes, within `timeout` once the clusters stand still: two processes each run their own
    passes (OverRequested waits four flushes after a run ends, then the next waste pass), so one may store an
    alert a pass after the other, on a loaded machine seconds after."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def stale_alerts(engine: Engine) -> list[Alert]:
    """Every cluster's ClusterStale alerts (whichever cluster's leader stored them)."""
    with Session(engine) as session:
        return list(session.scalars(fleet(select(Alert).where(Alert.kind == "ClusterStale"))))


def about(alert: Alert, cluster: str) -> bool:
    """The alert says `cluster` is stale (its raiser's rows hold it: watchdog.findings.detectors.fleet)."""
    return alert.subject == cluster


@pytest.mark.slow(80)
def test_two_clusters_share_one_database_as_if_each_had_its_own(shared_url: str, tmp_path: Path) -> None:
    clocks = {name: FreezableClock() for name in CLUSTERS}
    for clock in clocks.values():
        clock.freeze()  # still until every watchdog has listed the cluster: none misses a Job gone meanwhile
    sims = {name: SimulatorThread(scenario="default", speed=SPEED, tick_interval=0.05, clock=clocks[name])
            for name in CLUSTERS}
    shared: dict[str, Process] = {}
    own: dict[str, Process] = {}
    log = tmp_path / "watchdog.log"
    try:
        for name, sim in sims.items():
            sim.start()
            kubeconfig = tmp_path / f"{name}.kubeconfig"
            write_kubeconfig(kubeconfig, sim.url)
            settings = config(tmp_path / f"{name}.yaml")
            shared[name] = Process(name, shared_url, kubeconfig, settings, log, cluster_name=name).start()
            own[name] = Process(name, f"sqlite:///{tmp_path / name}.db", kubeconfig, settings, log,
                                cluster_name=name).start()
        everyone = [*shared.values(), *own.values()]
        wait_for(lambda: all(ready(p.port) for p in everyone), timeout=40, interval=0.2)
        for clock in clocks.values():
            clock.thaw()
        synced = datetime.now(UTC)  # from here on both watchdogs of a cluster watch the same events
        wait_for(lambda: all(last_poll(p.port) for p in everyone), timeout=30, interval=0.2)
        collecting = datetime.now(UTC) + timedelta(seconds=1)  # every process polls usage (started_at: whole s)
        engines = {name: shared[name].engine() for name in CLUSTERS}
        references = {name: own[name].engine() for name in CLUSTERS}
        wait_for(lambda: all(finished_count(e, collecting) >= 2 for e in engines.values()), timeout=60, interval=0.5)

        # 1. One database, two clusters: each cluster's ledger, alerts and report are its reference's.
        settle(list(clocks.values()))
        for name in CLUSTERS:
            assert compare_ledgers(engines[name], references[name], collecting, clocks[name]) >= 2
            converged(lambda: same_alerts(engines[name], references[name], synced))  # noqa: B023
            compare_reports(engines[name], references[name], synced)
        early = stale_alerts(engines["east"])  # both alive: nothing is stale
        assert not early, [(a.cluster, a.state, a.details) for a in early]
        before = {name: finished_rows(engines[name]) for name in CLUSTERS}
        for clock in clocks.values():
            clock.thaw()

        # 2. kill -9 of east's watchdog: west's leader raises ClusterStale for east.
        shared["east"].kill()
        killed_at = datetime.now(UTC)
        wait_for(lambda: any(about(a, "east") and a.state == "firing" for a in stale_alerts(engines["west"])),
                 timeout=STALE_SECONDS + 15, interval=0.2)
        assert not [a for a in stale_alerts(engines["west"]) if about(a, "west")], "west is alive"
        wait_for(lambda: finished_count(engines["west"], killed_at) >= 1, timeout=40, interval=0.5)

        # 3. east's watchdog again: ClusterStale resolves.
        shared["east"].start()
        wait_for(lambda: ready(shared["east"].port), timeout=40, interval=0.2)
        wait_for(lambda: last_poll(shared["east"].port) is not None, timeout=30, interval=0.1)
        back_at = datetime.now(UTC)
        wait_for(lambda: all(a.state != "firing" for a in stale_alerts(engines["west"]) if about(a, "east")),
                 timeout=STALE_SECONDS + 15, interval=0.2)
        assert [a for a in stale_alerts(engines["west"]) if about(a, "east")], "ClusterStale vanished"
        wait_for(lambda: any(run.started_at and run.started_at > back_at for run in runs(references["east"])),
                 timeout=30, interval=0.5)  # a run of east's begun since its return, to compare

        # 4. West's rows: what had finished is untouched; the rest kept matching west's own watchdog, through
        # east's death and return. East's: what it stored before the kill and after its return.
        settle(list(clocks.values()))
        for name in CLUSTERS:
            after = finished_rows(engines[name])
            changed = [f"{before[name][uid]} -> {after.get(uid)}" for uid in before[name]
                       if after.get(uid) != before[name][uid]]
            assert not changed, f"{name}'s finished runs changed:\n" + "\n".join(changed)
        # One of them ran while east was away (step 2).
        assert compare_ledgers(engines["west"], references["west"], collecting, clocks["west"]) >= 3
        converged(lambda: same_alerts(engines["west"], references["west"], synced))
        compare_reports(engines["west"], references["west"], synced)

        # East's runs begun after its return match its reference's. (What it stored before the kill is
        # unchanged, checked above; a Job that began and was gone while it was away, or whose events its
        # killed process had not yet written, it never saw: kill -9 loses what is not yet written.)
        back = [run for run in runs(references["east"]) if (run.started_at or run.created_at or back_at) > back_at]
        assert back, f"no run of east began after its return at {back_at:%T.%f}"
        compare_ledgers(engines["east"], references["east"], collecting, clocks["east"],
                        lambda run: (run.started_at or run.created_at or back_at) > back_at)
        for process in everyone:
            process.stop()
    finally:
        for process in [*shared.values(), *own.values()]:
            if process.alive():
                assert process.popen is not None
                process.popen.kill()
        for sim in sims.values():
            sim.stop()


def test_a_defaulted_name_is_refused_where_another_cluster_beats(tmp_path: Path) -> None:
    """A watchdog that was not told its cluster's name, in a database holding another cluster's heartbeat,
    exits 2 with one line before it writes anything."""
    database = f"sqlite:///{tmp_path / 'fleet.db'}"
    engine = make_engine(database, cluster="east")
    migrate(engine)
    with Session(engine) as session, session.begin():
        beat(session, "east", "east-watchdog", datetime.now(UTC))
    engine.dispose()
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, "http://127.0.0.1:1")  # never reached: the refusal comes first
    done = subprocess.run(
        [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli", "--kubeconfig", str(kubeconfig),
         "--database-url", database, "--listen", "127.0.0.1:0", "run"],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "VOLCANO_WATCHDOG_CLUSTER__NAME"})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("volcano-watchdog:")]
    assert lines == ["volcano-watchdog: the database holds clusters east; set cluster.name (--cluster-name, "
                     "VOLCANO_WATCHDOG_CLUSTER__NAME) to say which cluster this watchdog watches (it would be "
                     "'volcano-sim')"], done.stderr
