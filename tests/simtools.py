"""Helpers shared by tests that talk to the simulated cluster over HTTP."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from volcano_monitor.core.kube.config import api_client
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig

# ../shared next to the checkout (/work/main -> /work/shared); a git worktree one level deeper
# (/work/wt/NAME) finds the same directory further up.
SHARED = next((p / "shared" for p in Path(__file__).resolve().parents[1:] if (p / "shared" / "volcano").is_dir()),
              Path(__file__).resolve().parents[1].parent / "shared")


def pod(name: str, namespace: str = "default", labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Pending", **status},
    }


def client_for(sim: SimulatorThread, tmp_path: Path) -> client.ApiClient:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "kubeconfig"
    write_kubeconfig(path, sim.url)
    return api_client(str(path))


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


class FakeClock:
    """A clock tests move by hand: `clock.t += 60`."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@contextlib.contextmanager
def serving_exporter(sim: SimulatorThread, directory: Path) -> Iterator[str]:
    """A real exporter watching `sim` with its /metrics on a free port: host:port, once it has synced."""
    from volcano_monitor.exporter.app import Exporter
    from volcano_monitor.exporter.server import make_server, serve_in_background

    running = Exporter(client_for(sim, directory)).start()
    server = make_server(running, "127.0.0.1", 0)
    serve_in_background(server)
    try:
        wait_for(running.ready, timeout=10)
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        running.stop()
