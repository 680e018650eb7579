"""`volcano-watchdog`: usage history, failure and waste alerts, recommendations and queue capability."""

from __future__ import annotations

import argparse
import sys

from exporter.flags import Parser, env_flag, host_port, kubeconfig_flag, log_level_flag
from exporter.kube.config import ClusterConfigError, load_configuration


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="volcano-watchdog",
        description="Watch Volcano workloads, keep their resource usage history, compare it with what "
        "they requested, raise failure and waste alerts, recommend right-sized requests.",
    )
    kubeconfig_flag(parser, "VOLCANO_WATCHDOG")
    env_flag(parser, "--listen", "VOLCANO_WATCHDOG_LISTEN", default="0.0.0.0:9747", type=host_port,
             help="HOST:PORT to serve the API, /metrics, /healthz and /readyz on")
    env_flag(parser, "--database-url", "VOLCANO_WATCHDOG_DATABASE_URL", default="sqlite:///volcano-watchdog.db",
             help="SQLAlchemy URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB")
    env_flag(parser, "--config", "VOLCANO_WATCHDOG_CONFIG", help="YAML configuration file")
    log_level_flag(parser, "VOLCANO_WATCHDOG")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        load_configuration(args.kubeconfig)
    except ClusterConfigError as exc:
        print(f"volcano-watchdog: {exc}", file=sys.stderr)
        return 2
    print("volcano-watchdog: cluster configuration is valid; the watchdog is not built yet "
          "(tracked in the watchdog issue)", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
