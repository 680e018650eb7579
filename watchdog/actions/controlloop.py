"""What the watchdog's controllers (capability control, OOM auto scale-up) share: informers of their own,
and one thread that reconciles when told to (an informer saw a change that matters, this replica became
the leader) and every `interval_seconds` otherwise, never before every informer has listed once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from kubernetes import client

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.leaderelection import Leadership
from volcano_monitor.core.kube.resources import ResourceKind

log = logging.getLogger(__name__)


class ControlLoop:
    """Subclasses implement `reconcile()` and say how often (`interval_seconds`) and how long a burst of
    changes may settle before a triggered pass (`debounce_seconds`)."""

    thread_name = "controller"

    def __init__(self, api: client.ApiClient, leader: Leadership, informer_backoff: tuple[float, float]) -> None:
        self.api = api
        self.leader = leader
        self.informers: list[Informer[Any]] = []
        self._informer_backoff = informer_backoff
        self._trigger = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        leader.on_change(lambda leading: self._trigger.set() if leading else None)

    def interval_seconds(self) -> float:
        raise NotImplementedError

    def debounce_seconds(self) -> float:
        return 0.0

    def reconcile(self) -> object:
        raise NotImplementedError

    def informer(self, kind: ResourceKind, transform: Callable[[Any], Any], handler: Callable[[str, Any], None],
                 namespace: str | None = None, predicate: Callable[[Any], bool] | None = None) -> Informer[Any]:
        made: Informer[Any] = Informer(self.api, kind, namespace=namespace, transform=transform,
                                       predicate=predicate, backoff=Backoff(*self._informer_backoff))
        made.add_handler(handler)
        self.informers.append(made)
        return made

    def start(self, run_loop: bool = True) -> Self:
        """Start the informers and (unless `run_loop` is False: tests drive `reconcile()`) the loop."""
        for made in self.informers:
            made.start()
        if run_loop:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._trigger.set()
        for made in self.informers:
            made.stop()
        if self._thread is not None:
            self._thread.join(30)

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for made in self.informers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not made.wait_synced(left):
                return False
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.wait_synced(timeout=1.0):
                continue
            self._trigger.clear()
            try:
                self.reconcile()
            except Exception:  # the loop must outlive any one bad pass
                log.exception("%s: reconcile failed", self.thread_name)
            deadline = time.monotonic() + self.interval_seconds()
            while not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if self._trigger.wait(left):
                    self._stop.wait(self.debounce_seconds())  # let a burst of changes settle
                    break
