"""Running the simulated cluster: in the foreground for `volcano-sim`, or on a background thread
for tests and benchmarks (`SimulatorThread`), where `call()` runs code on the server's loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from volcano_monitor.simulator.releases import release_store
from volcano_monitor.simulator.request import Faults
from volcano_monitor.simulator.server import ApiServer
from volcano_monitor.simulator.store import Store

T = TypeVar("T")


def kubeconfig(server_url: str, context: str = "volcano-sim") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server_url}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }


def write_kubeconfig(path: str | Path, server_url: str) -> None:
    Path(path).write_text(yaml.safe_dump(kubeconfig(server_url), sort_keys=False))


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class SimulatorThread:
    """The simulated API server (and optionally a workload driver) on a daemon thread.

    The store lives on the thread's event loop; touch it only through `call()`.
    """

    def __init__(self, store: Store | None = None, host: str = "127.0.0.1", port: int = 0,
                 bookmark_interval: float = 5.0, scenario: str | None = None, speed: float = 1.0,
                 tick_interval: float = 0.5, auto_tick: bool = True, volcano_release: str | None = None,
                 clock: Callable[[], float] | None = None, **scenario_params: Any) -> None:
        self.host = host
        self.loop = asyncio.new_event_loop()
        self._requested_port = port
        self.port = 0
        # volcano_release: serve that release's kinds and object shapes (simulator.releases).
        if store is None and scenario is not None and volcano_release is None:
            from volcano_monitor.simulator.scenario import scenario_release  # scenario data only when asked

            volcano_release = scenario_release(scenario, None)
        self.store: Store = store if store is not None else release_store(volcano_release)
        self.faults = Faults()
        self.driver: Any = None
        if scenario is not None:
            from volcano_monitor.simulator.driver import Driver  # the driver pulls in scenario data only when asked

            # clock: the scenario's time (tests move a fake one and call `tick()`); default the real clock
            self.driver = Driver(self.store, scenario, speed, clock or time.time, **scenario_params)
        self.api = ApiServer(self.store, self.faults, bookmark_interval, metrics_source=self.driver)
        self._tick_interval = tick_interval
        self._auto_tick = auto_tick  # False: the scenario only moves when a test calls `tick()`
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="volcano-sim", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> SimulatorThread:
        self._thread.start()
        self.call_async(self._start_http())
        if self.driver is not None:
            self.call(self.driver.setup)
            if self._auto_tick:
                asyncio.run_coroutine_threadsafe(self.driver.run(self._tick_interval), self.loop)
        return self

    async def _start_http(self) -> None:
        self._runner = web.AppRunner(self.api.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        sock = bind_socket(self.host, self.port or self._requested_port)
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def _stop_http(self) -> None:
        if self._runner is not None:
            self.api.drop_watches()
            await self._runner.cleanup()
            self._runner = None

    def restart_http(self, downtime: float = 0.0) -> None:
        """Stop serving (connections refused), wait, serve again on the same port with the same store."""
        self.call_async(self._stop_http())
        if downtime:
            threading.Event().wait(downtime)
        self.call_async(self._start_http())

    def stop_http(self) -> None:
        self.call_async(self._stop_http())

    def start_http(self) -> None:
        self.call_async(self._start_http())

    def tick(self) -> None:
        """Advance the scenario to now (for tests that hold the simulated cluster still)."""
        self.call(self.driver.tick)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a synchronous function on the server's loop and return its result."""
        async def run() -> T:
            return fn(*args, **kwargs)

        result: T = self.call_async(run())
        return result

    def call_async(self, coro: Any, timeout: float = 60.0) -> Any:
        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self.call_async(self._stop_http(), timeout=10)

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.call_async(cancel_all(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> SimulatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
