"""`volcano-sim`: a simulated Volcano cluster that kubectl, the official client and volcano-monitor
talk to as they would to a real API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from volcano_monitor.core.flags import Parser, env_flag, host_port, log_level_flag, positive_float
from volcano_monitor.simulator.authn import load_authn
from volcano_monitor.simulator.releases import release_name, release_store
from volcano_monitor.simulator.runtime import bind_socket, write_kubeconfig
from volcano_monitor.simulator.scenario import SCENARIOS, scenario_release
from volcano_monitor.simulator.server import ApiServer

log = logging.getLogger("volcano-sim")


def _release(text: str) -> str:
    try:
        return release_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="volcano-sim",
        description="Run a simulated Volcano cluster: a Kubernetes-API-compatible server (core/v1, "
        "batch.volcano.sh, scheduling.volcano.sh, metrics.k8s.io, coordination.k8s.io) with a workload "
        "that succeeds, fails, OOMs, idles and gets stuck. cAdvisor/DCGM-style usage metrics are "
        "served on /metrics; faults are injected with POST /sim/faults.",
    )
    env_flag(parser, "--listen", "VOLCANO_SIM_LISTEN", default="127.0.0.1:8001", type=host_port,
             help="address to serve the API on, HOST:PORT (port 0 picks a free one)")
    env_flag(parser, "--kubeconfig-out", "VOLCANO_SIM_KUBECONFIG_OUT",
             help="write a kubeconfig pointing at this server to PATH")
    env_flag(parser, "--scenario", "VOLCANO_SIM_SCENARIO", default="default", choices=sorted(SCENARIOS),
             help="workload to play")
    env_flag(parser, "--speed", "VOLCANO_SIM_SPEED", default="1", type=positive_float,
             help="scenario seconds per real second (60 plays an hour a minute)")
    env_flag(parser, "--volcano-release", "VOLCANO_SIM_VOLCANO_RELEASE", type=_release,
             help="serve the kinds and object shapes of this Volcano release (v1.9 ... v1.16), from its CRDs in "
             "shared/volcano (or $VOLCANO_SIM_CRDS); default: Jobs, PodGroups and Queues as written, unpruned "
             "(the vgpu-* scenarios need v1.12+ and default to v1.12)")
    env_flag(parser, "--authn", "VOLCANO_SIM_AUTHN",
             help="YAML file of users (token -> user, groups) and RBAC-like rules for TokenReview and "
             "SubjectAccessReview (simulator/authn.py); default: no token is authenticated")
    env_flag(parser, "--bookmark-interval", "VOLCANO_SIM_BOOKMARK_INTERVAL", default="30", type=positive_float,
             help="seconds between watch bookmarks")
    log_level_flag(parser, "VOLCANO_SIM")
    return parser


async def serve(args: argparse.Namespace) -> None:
    from volcano_monitor.simulator.driver import Driver

    store = release_store(scenario_release(args.scenario, args.volcano_release))
    try:
        driver = Driver(store, args.scenario, args.speed)
    except ValueError as exc:  # a scenario the release cannot serve (vgpu-* before v1.12)
        raise SystemExit(f"volcano-sim: {exc}") from None
    driver.setup()
    api = ApiServer(store, bookmark_interval=args.bookmark_interval, metrics_source=driver)
    if args.authn:
        try:
            api.authn = load_authn(args.authn)
        except ValueError as exc:
            raise SystemExit(f"volcano-sim: {exc}") from None
    runner = web.AppRunner(api.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    host, port = args.listen
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        raise SystemExit(f"volcano-sim: cannot listen on {host}:{port}: {exc.strerror}") from None
    await web.SockSite(runner, sock).start()
    bound = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}"
    if args.kubeconfig_out:
        write_kubeconfig(args.kubeconfig_out, url)
    release = scenario_release(args.scenario, args.volcano_release)
    served = f", Volcano {release}" if release else ""
    print(f"volcano-sim: serving scenario {args.scenario!r} at {url} (speed {args.speed:g}x{served})", flush=True)
    if args.kubeconfig_out:
        print(f"volcano-sim: kubeconfig written to {args.kubeconfig_out}; try "
              f"`kubectl --kubeconfig {args.kubeconfig_out} get vcjob,podgroup,queue -A`", flush=True)
    print(f"volcano-sim: usage metrics at {url}/metrics", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    driver_task = asyncio.create_task(driver.run())
    await stop.wait()
    driver_task.cancel()
    api.drop_watches()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args))
    except OSError as exc:
        print(f"volcano-sim: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
