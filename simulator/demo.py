"""`make demo`: the simulated Volcano cluster plus every volcano-monitor component that exists,
started as a user would start them (their real commands), with a summary of where to look."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from exporter.flags import Parser


def wait_http(url: str, timeout: float, name: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"demo: {name} exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    raise SystemExit(f"demo: {url} did not answer within {timeout:g}s")


def main(argv: list[str] | None = None) -> int:
    parser: argparse.ArgumentParser = Parser(prog="volcano-monitor demo",
                                             description="Run the simulated cluster and volcano-monitor.")
    parser.add_argument("--dir", default=".demo", help="where to write the kubeconfig and logs")
    parser.add_argument("--sim-port", type=int, default=8001)
    parser.add_argument("--exporter-port", type=int, default=9746)
    parser.add_argument("--speed", default="10", help="scenario speed (see volcano-sim --help)")
    args = parser.parse_args(argv)
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    python = sys.executable
    processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, *command: str) -> subprocess.Popen[bytes]:
        log = (workdir / f"{name}.log").open("wb")
        process = subprocess.Popen([python, "-m", *command], stdout=log, stderr=subprocess.STDOUT)
        processes[name] = process
        return process

    try:
        sim = start("volcano-sim", "simulator.cli", "--listen", f"127.0.0.1:{args.sim_port}",
                    "--kubeconfig-out", str(kubeconfig), "--speed", args.speed)
        sim_url = f"http://127.0.0.1:{args.sim_port}"
        wait_http(sim_url + "/healthz", 30, "volcano-sim", sim)
        exporter = start("volcano-exporter", "exporter.cli", "--kubeconfig", str(kubeconfig),
                         "--listen", f"127.0.0.1:{args.exporter_port}")
        exporter_url = f"http://127.0.0.1:{args.exporter_port}"
        wait_http(exporter_url + "/readyz", 60, "volcano-exporter", exporter)
        print(f"""
volcano-monitor demo is running (logs in {workdir}/). Ctrl-C stops everything.

  simulated cluster   {sim_url}   (scenario 'default' at {args.speed}x)
    kubectl --kubeconfig {kubeconfig} get vcjob,podgroup,queue -A
    kubectl --kubeconfig {kubeconfig} get pods -A -w
    curl -s {sim_url}/metrics | head            # cAdvisor/DCGM-style usage

  exporter            {exporter_url}/metrics
    curl -s {exporter_url}/metrics | grep -E '^volcano_(queue|job)_' | head -30
""", flush=True)
        stop = [False]
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.__setitem__(0, True))
        while not stop[0]:
            for name, process in processes.items():
                if process.poll() is not None:
                    print(f"demo: {name} exited with code {process.returncode}; see {workdir}/",
                          file=sys.stderr)
                    return 1
            time.sleep(0.5)
        return 0
    finally:
        for process in reversed(processes.values()):
            process.terminate()
        for process in processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    sys.exit(main())
