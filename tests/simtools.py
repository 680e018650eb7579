"""Helpers shared by tests that talk to the simulated cluster over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
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
