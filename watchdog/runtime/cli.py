"""`volcano-watchdog`: usage history, failure and waste alerts, recommendations and queue capability."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core import gpushare
from volcano_monitor.core.flags import Parser, env_flag, host_port, log_level_flag
from volcano_monitor.core.kube.config import ClusterConfigError, current_context, load_configuration
from volcano_monitor.watchdog.config import ConfigError, Settings, load
from volcano_monitor.watchdog.findings.recommendations.book import compute_recommendations, render
from volcano_monitor.watchdog.findings.recommendations.output import OUTPUTS
from volcano_monitor.watchdog.runtime.settings import cluster_name_from_context
from volcano_monitor.watchdog.state.db.engine import (
    NotReadable,
    check_readable,
    describe_error,
    display_url,
    make_engine,
    migrate,
)
from volcano_monitor.watchdog.state.db.scope import cluster_of
from volcano_monitor.watchdog.state.fleet import ClusterNameRequired, check_cluster_name

log = logging.getLogger("volcano-watchdog")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="volcano-watchdog",
        description="Watch Volcano workloads, keep their resource usage history, compare it with what "
        "they requested, raise failure and waste alerts, recommend right-sized requests.",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file; otherwise $KUBECONFIG, the in-cluster service "
                        "account, ~/.kube/config [env VOLCANO_WATCHDOG_KUBECONFIG]")
    parser.add_argument("--listen", help="HOST:PORT to serve the API, /metrics, /healthz and /readyz on "
                        "(default: 0.0.0.0:9747) [env VOLCANO_WATCHDOG_LISTEN]")
    parser.add_argument("--database-url", help="SQLAlchemy URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
                        "(default: sqlite:///volcano-watchdog.db) [env VOLCANO_WATCHDOG_DATABASE_URL]")
    parser.add_argument("--cluster-name", help="this cluster's name, when several clusters share one database "
                        "(default: the kubeconfig's current context, else \"default\") [env "
                        "VOLCANO_WATCHDOG_CLUSTER__NAME]")
    env_flag(parser, "--config", "VOLCANO_WATCHDOG_CONFIG",
             help="YAML configuration file (every key: docs/configuration.md)")
    log_level_flag(parser, "VOLCANO_WATCHDOG")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("run", help="watch, collect, detect and serve (the default)")
    commands.add_parser("migrate", help="bring the database schema up to date, then exit")
    recommend = commands.add_parser("recommend", help="print request recommendations from the stored history")
    recommend.add_argument("--namespace", help="only this namespace")
    recommend.add_argument("-o", "--output", choices=list(OUTPUTS), default="table",
                           help="table (people), csv (spreadsheets), json (programs, base units) or yaml (a Job "
                                "patch per workload; below recommendations.min_confidence none, only the reason)")
    report = commands.add_parser("report", help="print requested vs used hours, cost, waste, failures and wait/run "
                                 "times")
    report.add_argument("--since", default="7d", help="start: a duration before --until (7d, 36h) or an ISO 8601 "
                        "time (default: 7d)")
    report.add_argument("--until", help="end: a duration before now or an ISO 8601 time (default: now)")
    report.add_argument("--by", choices=["queue", "namespace", "workload", "cluster"], default="queue",
                        help="group by (default: queue; a parent queue includes its children; cluster: every "
                             "cluster in the database, the others this watchdog's cluster)")
    report.add_argument("--top", type=int, default=10, help="top wasters listed (default: 10)")
    report.add_argument("-o", "--output", choices=["table", "csv", "json", "html", "md", "focus"], default="table",
                        help="table, csv, json, html, md, or focus (the runs' costs as FinOps FOCUS CSV)")
    test = commands.add_parser("notify-test", help="send a sample message to one receiver, to check its webhook")
    test.add_argument("--receiver", required=True, help="receiver name from the notifications configuration")
    parser.set_defaults(command="run")
    return parser


def database_failure(doing: str, engine: Engine, exc: SQLAlchemyError) -> int:
    """One line (no password, no SQL) and exit code 1."""
    print(f"volcano-watchdog: cannot {doing} {display_url(engine)}: {describe_error(exc)}", file=sys.stderr)
    return 1


def run_recommend(settings: Settings, namespace: str | None, output: str) -> int:
    """Read-only: never creates or migrates the database it reads, and says which one it read."""
    return read_only(settings, "recommendations", lambda session: render(
        compute_recommendations(session, settings.recommendations, datetime.now(UTC), namespace), output))


def read_only(settings: Settings, what: str, read: Callable[[Session], str], fleet_wide: bool = False) -> int:
    """A read-only command: never creates or migrates the database, names the one it read and the cluster,
    prints what `read` made of it. A defaulted cluster name in a database other clusters share is refused as
    `run` refuses it (exit 2): read as a guessed name, the command would print an empty answer as if true.
    `fleet_wide`: the command reads every cluster (`report --by cluster`), so no name is needed."""
    engine = make_engine(settings.database_url, cluster=cluster_name(settings))
    try:
        check_readable(engine)
        with Session(engine) as session:
            if not fleet_wide:
                check_cluster_name(session, cluster_of(engine), explicit=settings.cluster.name is not None)
            text = read(session)
    except NotReadable as exc:
        print(f"volcano-watchdog: {exc}", file=sys.stderr)
        return 1
    except ClusterNameRequired as exc:
        print(f"volcano-watchdog: {exc}", file=sys.stderr)
        return 2
    except SQLAlchemyError as exc:
        return database_failure("read", engine, exc)
    finally:
        engine.dispose()
    scope = "every cluster" if fleet_wide else f"cluster {cluster_of(engine)}"
    print(f"volcano-watchdog: {what} of {scope} from {display_url(engine)}", file=sys.stderr)
    print(text, end="")
    return 0


def run_report(settings: Settings, args: argparse.Namespace) -> int:
    """Read-only like `recommend`: never creates or migrates the database it reads, and names it."""
    from volcano_monitor.watchdog.views.report.compute import compute_report, parse_moment
    from volcano_monitor.watchdog.views.report.render import render as render_report

    now = datetime.now(UTC)
    try:
        until = parse_moment(args.until, now) if args.until else now
        since = parse_moment(args.since, until)
    except ValueError as exc:
        print(f"volcano-watchdog: {exc}", file=sys.stderr)
        return 2
    if since >= until or args.top < 0:
        print("volcano-watchdog: --since must be before --until, --top at least 0", file=sys.stderr)
        return 2
    return read_only(settings, "report", lambda session: render_report(
        compute_report(session, since, until, args.by, args.top, settings.costs), args.output),
        fleet_wide=args.by == "cluster")


def run_watchdog(settings: Settings) -> int:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn re-raises SIGTERM after its shutdown, which would kill us before the final flush."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    from volcano_monitor.core import memory
    from volcano_monitor.core.kube.config import api_client
    from volcano_monitor.core.kube.leaderelection import make_leader
    from volcano_monitor.core.kube.reviews import Reviews
    from volcano_monitor.watchdog.actions.capability.api import capability_router
    from volcano_monitor.watchdog.actions.capability.controller import CapabilityController
    from volcano_monitor.watchdog.actions.capability.metrics import render_capability_metrics
    from volcano_monitor.watchdog.actions.gpu_idle.abort import GpuIdleAborter
    from volcano_monitor.watchdog.actions.gpu_idle.api import gpu_idle_router
    from volcano_monitor.watchdog.actions.gpu_idle.metrics import render_gpu_idle_metrics
    from volcano_monitor.watchdog.actions.oomscale.api import oom_router, outbox_notice, render_oom_metrics
    from volcano_monitor.watchdog.actions.oomscale.controller import OomScaleUpController
    from volcano_monitor.watchdog.findings.detectors.stranded import render_stranded_metrics
    from volcano_monitor.watchdog.findings.why import why_router
    from volcano_monitor.watchdog.runtime.app import Watchdog
    from volcano_monitor.watchdog.views.api import create_app
    from volcano_monitor.watchdog.views.health import CollectorHealth, Health, QueueView
    from volcano_monitor.watchdog.views.report.digest import DigestScheduler
    from volcano_monitor.watchdog.views.tenancy import Tenancy

    memory.tune_allocator()  # before any thread starts (see core/memory.py)
    host, port = host_port(settings.listen)
    try:  # before anything starts: a taken port is one line and exit 2, as for the exporter
        listener = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                        backlog=2048)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).split(" (while")[0]
        print(f"volcano-watchdog: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return 2
    port = listener.getsockname()[1]
    memory.start_trimmer()
    engine = make_engine(settings.database_url, cluster=cluster_name(settings))
    try:
        claim_cluster(engine, settings)
    except ClusterNameRequired as exc:
        print(f"volcano-watchdog: {exc}", file=sys.stderr)
        return 2
    except SQLAlchemyError as exc:
        return database_failure("prepare", engine, exc)
    log.info("watching cluster %r (database %s)", cluster_of(engine), display_url(engine))
    api = api_client(settings.kubeconfig)
    # One leader (a Lease) sends messages and patches queues; the others watch and store.
    leader = make_leader(api, settings.leader_election).start()
    watchdog = Watchdog(settings, engine, api, leader=leader)
    capability: CapabilityController | None = None
    oom: OomScaleUpController | None = None
    # The opt-in GPU idle abort (leader only; RBAC create on Volcano Commands only when enabled).
    aborter = GpuIdleAborter(settings.gpu_idle, engine, api, leader, outbox=watchdog.outbox,
                             wake=watchdog.notifier.wake, identity=leader.identity)
    # Expected starts of waiting jobs: a round every 30 s on a thread of its own (every replica serves /why;
    # the leader's detectors put them into GangUnschedulable and QueueStarved).
    expected = watchdog.expected
    expected_thread = threading.Thread(target=expected.run, name="watchdog-expected-starts", daemon=True)
    try:
        watchdog.start()
        expected_thread.start()
        if settings.gpu_idle.abort.enabled:
            aborter.start()
        if settings.capability.enabled:
            capability = CapabilityController(settings.capability, engine, api, leader,
                                              announce=watchdog.announce_capability,
                                              namespaces=settings.namespaces).start()
        if settings.oom_scale_up.enabled:
            oom = OomScaleUpController(settings.oom_scale_up, engine, api, leader,
                                       notify=outbox_notice(watchdog.outbox), wake=watchdog.notifier.wake,
                                       namespaces=settings.namespaces).start()
    except SQLAlchemyError as exc:
        leader.stop(release=True)
        return database_failure("prepare", engine, exc)

    def dcgm_style() -> str | None:
        """The Prometheus collector's DCGM label style ("unknown" until auto found one), None without it."""
        source = watchdog.usage_source("prometheus")
        if source is None:
            return None
        return getattr(source, "dcgm_style", None) or "unknown"

    def collectors() -> dict[str, CollectorHealth]:
        return {name: CollectorHealth(c.enabled, c.last_success, c.errors, c.samples)
                for name, c in watchdog.collectors.items()}

    def queues() -> list[QueueView]:
        return [QueueView(*row) for row in watchdog.index.queue_snapshot()]

    def notifications() -> dict[tuple[str, str], int]:
        counts = {(name, outcome): 0 for name in watchdog.outbox.receivers
                  for outcome in ("sent", "failed", "dead", "uncertain")}
        counts.update(watchdog.notifier.stats.outcomes)
        return counts

    def extra_metrics() -> str:
        return ((render_capability_metrics(capability) if capability else "")
                + (render_oom_metrics(oom.count_snapshot) if oom else "")
                + render_gpu_idle_metrics(watchdog.gpu_idle.snapshot(), aborter.counts(), dcgm_style())
                + render_stranded_metrics(watchdog.stranded)
                + watchdog.topology.render_metrics()
                + expected.render_metrics()
                + (watchdog.backfiller.render_metrics() if watchdog.backfiller else ""))

    health = Health(watchdog.ready, collectors, leader=leader.is_leader, notifications=notifications,
                    extra_metrics=extra_metrics)
    digests = DigestScheduler(settings.reports, engine, leader, settings.notifications.api_url,
                              wake=watchdog.notifier.wake,
                              identity=settings.leader_election.identity or socket.gethostname())
    auth = settings.auth  # who may read what: tokens, or each caller's own RBAC (docs/auth.md)
    reviews = Reviews(api, ttl=auth.cache_ttl_seconds, verb=auth.verb, group=auth.group, resource=auth.resource,
                      timeout=auth.review_timeout_seconds) if auth.mode == "kubernetes" else None
    tenancy = Tenancy(auth, reviews, engine)
    app = create_app(engine, settings, health, queues=queues, outbox=watchdog.outbox, tenancy=tenancy,
                     wake_notifier=watchdog.notifier.wake, request_made=watchdog.request_made,
                     why=watchdog.topology.why,
                     expected=expected.get,
                     routers=[why_router(watchdog.topology.why, watchdog.index_synced, expected.get, tenancy.scope),
                              gpu_idle_router(engine, settings.gpu_idle, watchdog.gpu_idle.snapshot,
                                              leader.is_leader, tenancy.scope),
                              *([capability_router(engine, capability, tenancy.cluster_wide)] if capability else []),
                              oom_router(engine, tenancy.scope)])
    log.info("serving the API on %s:%d (database %s)", host, port, display_url(engine))
    # proxy_headers off: uvicorn would otherwise take the client address from X-Forwarded-For whenever the
    # peer is local (a sidecar, kubectl port-forward), and auth.trusted_proxies would judge a forged one.
    server = QuietServer(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                        proxy_headers=False))
    for sig in (signal.SIGINT, signal.SIGTERM):  # stop serving, then flush what the worker holds
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    try:
        digests.start()
        server.run(sockets=[listener])
    finally:
        digests.stop()
        if capability is not None:
            capability.stop()
        if oom is not None:
            oom.stop()
        aborter.stop()
        expected.stop.set()
        watchdog.stop()
        leader.stop(release=True)
        engine.dispose()
    return 0 if server.started else 1


def run_notify_test(settings: Settings, receiver_name: str) -> int:
    """Send a sample message straight to one receiver (not through the outbox) and say how it went."""
    import time

    import httpx

    from volcano_monitor.watchdog.actions.notify.channels import build_channel, send
    from volcano_monitor.watchdog.actions.notify.sample import sample_message

    receivers = {r.name: r for r in settings.notifications.receivers}
    receiver = receivers.get(receiver_name)
    if receiver is None:
        known = ", ".join(sorted(receivers)) or "none configured"
        print(f"volcano-watchdog: no receiver named {receiver_name!r} (receivers: {known})", file=sys.stderr)
        return 2
    message = sample_message(receiver.name, settings.grafana_url, settings.notifications.api_url)
    with httpx.Client(timeout=settings.notifications.delivery.timeout_seconds) as client:
        result = send(build_channel(receiver), message, client, time.time())
    if result.ok:
        print(f"volcano-watchdog: sample message delivered to {receiver.name} ({receiver.kind})")
        return 0
    print(f"volcano-watchdog: delivery to {receiver.name} ({receiver.kind}) failed: {result.error}", file=sys.stderr)
    return 1


def cluster_name(settings: Settings) -> str:
    """The cluster this watchdog writes as: `cluster.name`, else the kubeconfig's current context."""
    return settings.cluster.name or cluster_name_from_context(current_context(settings.kubeconfig))


def claim_cluster(engine: Engine, settings: Settings) -> None:
    """Migrate, then refuse a defaulted name in a database other clusters share (ClusterNameRequired)."""
    migrate(engine)
    with Session(engine) as session:
        check_cluster_name(session, cluster_of(engine), explicit=settings.cluster.name is not None)


def run_migrate(settings: Settings) -> int:
    engine = make_engine(settings.database_url, cluster=cluster_name(settings))
    try:
        migrate(engine)
        with engine.connect() as connection:
            revision = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except SQLAlchemyError as exc:
        return database_failure("migrate", engine, exc)
    finally:
        engine.dispose()
    print(f"volcano-watchdog: database schema is at revision {revision}")
    return 0


def quiet_libraries(level: str, *more: str) -> None:
    """HTTP clients log every request and retry at INFO (213 of 368 demo lines were theirs): below
    DEBUG they only speak when something is wrong."""
    if level == "DEBUG":
        return
    for name in ("httpx", "httpcore", "kubernetes", "uvicorn.access", *filter(None, more)):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its "Retrying" warnings, 3 per failed request


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load(args.config, kubeconfig=args.kubeconfig, listen=args.listen, database_url=args.database_url,
                        cluster=None if args.cluster_name is None else {"name": args.cluster_name})
        if args.command == "run":
            load_configuration(settings.kubeconfig)
    except (ConfigError, ClusterConfigError) as exc:
        print(f"volcano-watchdog: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    gpushare.configure(basis=settings.gpu_sharing.basis, card_memory_mib=settings.gpu_sharing.card_memory_mib)
    quiet_libraries(args.log_level, "alembic" if args.command in ("recommend", "report") else "")
    if args.command == "migrate":
        return run_migrate(settings)
    if args.command == "notify-test":
        return run_notify_test(settings, args.receiver)
    if args.command == "recommend":
        return run_recommend(settings, args.namespace, args.output)
    if args.command == "report":
        return run_report(settings, args)
    return run_watchdog(settings)


if __name__ == "__main__":
    sys.exit(main())
