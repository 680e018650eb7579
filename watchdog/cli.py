"""`volcano-watchdog`: usage history, failure and waste alerts, recommendations and queue capability."""

from __future__ import annotations

import argparse
import sys

from sqlalchemy.exc import SQLAlchemyError

from exporter.flags import Parser, env_flag, log_level_flag
from exporter.kube.config import ClusterConfigError, load_configuration
from watchdog.config import ConfigError, Settings, load
from watchdog.db.engine import make_engine, migrate


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
    env_flag(parser, "--config", "VOLCANO_WATCHDOG_CONFIG",
             help="YAML configuration file (every key: docs/configuration.md)")
    log_level_flag(parser, "VOLCANO_WATCHDOG")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("run", help="watch, collect, detect and serve (the default)")
    commands.add_parser("migrate", help="bring the database schema up to date, then exit")
    parser.set_defaults(command="run")
    return parser


def run_migrate(settings: Settings) -> int:
    engine = make_engine(settings.database_url)
    try:
        migrate(engine)
        with engine.connect() as connection:
            revision = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except SQLAlchemyError as exc:
        print(f"volcano-watchdog: cannot migrate {engine.url.render_as_string(hide_password=True)}: "
              f"{str(getattr(exc, 'orig', None) or exc).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(f"volcano-watchdog: database schema is at revision {revision}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load(args.config, kubeconfig=args.kubeconfig, listen=args.listen, database_url=args.database_url)
        if args.command == "run":
            load_configuration(settings.kubeconfig)
    except (ConfigError, ClusterConfigError) as exc:
        print(f"volcano-watchdog: {exc}", file=sys.stderr)
        return 2
    if args.command == "migrate":
        return run_migrate(settings)
    print("volcano-watchdog: configuration is valid; the watchdog is not built yet "
          "(tracked in the watchdog issue)", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
