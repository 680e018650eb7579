"""`volcano-exporter`: Prometheus metrics for Volcano Jobs, PodGroups, Queues and their pods."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from volcano_monitor.core import gpushare, memory
from volcano_monitor.core.flags import Parser, boolean, env_flag, host_port, kubeconfig_flag, log_level_flag
from volcano_monitor.core.kube.config import ClusterConfigError, api_client
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.cardinality import Options, family_filter, labels_allowlist, max_objects
from volcano_monitor.exporter.server import make_server, serve_in_background

log = logging.getLogger("volcano-exporter")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="volcano-exporter",
        description="Watch Volcano Jobs, PodGroups, Queues and their pods through the Kubernetes API "
        "(list+watch) and serve them as Prometheus metrics on /metrics.",
    )
    kubeconfig_flag(parser, "VOLCANO_EXPORTER")
    env_flag(parser, "--listen", "VOLCANO_EXPORTER_LISTEN", default="0.0.0.0:9746", type=host_port,
             help="HOST:PORT to serve /metrics, /healthz and /readyz on")
    env_flag(parser, "--namespaces", "VOLCANO_EXPORTER_NAMESPACES", default="",
             help="comma-separated namespaces to watch for namespaced kinds (empty: all)")
    env_flag(parser, "--shard", "VOLCANO_EXPORTER_SHARD", default="0", type=int,
             help="this replica's shard index, 0-based")
    env_flag(parser, "--total-shards", "VOLCANO_EXPORTER_TOTAL_SHARDS", default="1", type=int,
             help="number of exporter replicas that split objects by UID hash (FNV-1a 64, as kube-state-metrics)")
    env_flag(parser, "--compat-kube-state-metrics-fork", "VOLCANO_EXPORTER_COMPAT_KUBE_STATE_METRICS_FORK",
             default="false", type=boolean, nargs="?", const=True, metavar="BOOL",
             help="also serve the kube_pod_volcano_* families of Volcano's forked kube-state-metrics, for the "
                  "dashboards Volcano's chart installs (docs/compat.md)")
    env_flag(parser, "--metric-allowlist", "VOLCANO_EXPORTER_METRIC_ALLOWLIST", default="",
             help="comma-separated families (exact names or anchored regular expressions) to serve; no other "
                  "(exclusive with --metric-denylist; self-metrics are always served)")
    env_flag(parser, "--metric-denylist", "VOLCANO_EXPORTER_METRIC_DENYLIST", default="",
             help="comma-separated families (exact names or anchored regular expressions) not to serve")
    env_flag(parser, "--metric-labels-allowlist", "VOLCANO_EXPORTER_METRIC_LABELS_ALLOWLIST", default="",
             help="Kubernetes labels to add to volcano_pod_info / volcano_job_info as label_<name>, "
                  "kube-state-metrics' syntax: pods=[team,app],jobs=[*]")
    env_flag(parser, "--max-objects", "VOLCANO_EXPORTER_MAX_OBJECTS", default="",
             help="at most N objects per kind get series, N or KIND=N,... for jobs, podgroups, pods, queues, "
                  "cronjobs, hypernodes, jobflows "
                  "(empty: no cap); the rest are counted in volcano_exporter_objects_dropped_total")
    env_flag(parser, "--gpu-share-basis", "VOLCANO_EXPORTER_GPU_SHARE_BASIS", default="max",
             choices=gpushare.BASES,
             help="physical GPUs of a shared-GPU (HAMi, Volcano vGPU) request: the larger of its cores and memory "
                  "shares of the card (max), or only one of them (docs/gpu-sharing.md)")
    env_flag(parser, "--gpu-card-memory-mib", "VOLCANO_EXPORTER_GPU_CARD_MEMORY_MIB", default="0", type=_mib,
             help="memory of one GPU card in MiB, for vGPU memory asked in MiB (the exporter does not watch nodes); "
                  "0: unknown, such a request counts its cores share, else whole cards")
    log_level_flag(parser, "VOLCANO_EXPORTER")
    return parser


def _mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MiB, a number >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected MiB, a number >= 0, got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.total_shards < 1:
        parser.error("--total-shards must be at least 1")
    if not 0 <= args.shard < args.total_shards:
        parser.error(f"--shard must be in [0, {args.total_shards - 1}]")
    if args.gpu_share_basis not in gpushare.BASES:  # from the environment: argparse checks only the command line
        parser.error(f"--gpu-share-basis must be one of {', '.join(gpushare.BASES)}")
    args.namespaces = [ns.strip() for ns in args.namespaces.split(",") if ns.strip()]
    try:
        args.options = Options(
            compat_ksm_fork=args.compat_kube_state_metrics_fork,
            families=family_filter(args.metric_allowlist, args.metric_denylist),
            labels=labels_allowlist(args.metric_labels_allowlist),
            max_objects=max_objects(args.max_objects),
        )
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    gpushare.configure(basis=args.gpu_share_basis, card_memory_mib=args.gpu_card_memory_mib)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "DEBUG":  # urllib3's "Retrying" lines (3 per attempt) say less than the informers'
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        api = api_client(args.kubeconfig)
    except ClusterConfigError as exc:
        print(f"volcano-exporter: {exc}", file=sys.stderr)
        return 2
    memory.tune_allocator()  # before any thread starts (see core/memory.py)
    host, port = args.listen
    exporter = Exporter(api, args.namespaces, args.shard, args.total_shards, options=args.options)
    known = [f.name for f in exporter.store.families()]
    for pattern in args.options.families.unmatched(known):
        log.warning("--metric-allowlist/--metric-denylist: %r names no family", pattern)
    try:
        server = make_server(exporter, host, port)
    except OSError as exc:
        print(f"volcano-exporter: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return 2
    exporter.start()
    memory.start_trimmer()
    serve_in_background(server)
    log.info("serving /metrics on %s:%d (shard %d of %d%s)", host, server.server_address[1], args.shard,
             args.total_shards, f", namespaces {','.join(args.namespaces)}" if args.namespaces else "")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    exporter.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
