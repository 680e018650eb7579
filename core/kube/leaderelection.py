"""Leader election with a coordination.k8s.io/v1 Lease, in the manner of client-go's leaderelection.

Watchdog replicas share one database but only one of them may write to the cluster (patch Queues) or
send chat messages; the holder of the Lease is that one. Safety rests on three rules:

- Every write of the Lease carries the resourceVersion that was read (optimistic concurrency): of two
  replicas racing for a free Lease, the API server accepts one and answers the other 409.
- A follower takes over only when the holder has been silent for `leaseDurationSeconds`, counted both
  from the Lease's `renewTime` and from the moment this replica first saw that renewal (the later of the
  two), so neither a clock ahead of the holder's nor a stale Lease read at start-up cuts the wait short.
- A leader that cannot renew stops calling itself leader after the renew deadline, which is shorter
  than the lease duration and measured from *before* its last successful renewal was sent: it steps
  down before any follower may take over, even when the API server is unreachable.

A clean `stop()` releases the Lease (empty holder) so a successor takes over at its next poll; a crash
leaves the Lease to expire. `AlwaysLeader` stands in when election is off (one replica).

It lives with the shared Kubernetes access (core/kube), as client-go's leaderelection package does: the
watchdog's controllers and notification sender take a `Leadership` from here, and only the watchdog's
runtime decides how it is configured (watchdog/runtime/settings.py `LeaderElection` satisfies
`LeaseSettings`).
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes import client

from volcano_monitor.core.kube.resources import LEASES
from volcano_monitor.core.kube.rest import ApiUnavailable, micro_time, parse_time, request_json, to_object

log = logging.getLogger(__name__)

__all__ = ["AlwaysLeader", "LeaderElector", "Leadership", "LeaseSettings", "make_leader"]

class LeaseSettings(Protocol):
    """What an elector needs to know (the watchdog's `leader_election` settings)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def namespace(self) -> str: ...
    @property
    def lease_name(self) -> str: ...
    @property
    def identity(self) -> str | None: ...
    @property
    def lease_duration_seconds(self) -> float: ...
    @property
    def renew_interval_seconds(self) -> float: ...


class Leadership(Protocol):
    """What the rest of the watchdog needs of an elector."""

    identity: str

    def start(self) -> Leadership: ...

    def stop(self, release: bool = True) -> None: ...

    def is_leader(self) -> bool: ...

    def wait_for_leadership(self, timeout: float | None = None) -> bool: ...

    def on_change(self, callback: Callable[[bool], None]) -> None: ...


class _Callbacks:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[bool], None]] = []

    def fire(self, leader: bool) -> None:
        for callback in list(self.callbacks):
            try:
                callback(leader)
            except Exception:  # one broken listener must not stop the election
                log.exception("leadership callback failed")


class AlwaysLeader:
    """Leader election switched off: this replica is the leader from start to stop."""

    def __init__(self, identity: str | None = None) -> None:
        self.identity = identity or socket.gethostname()
        self._callbacks = _Callbacks()
        self._leading = threading.Event()

    def start(self) -> AlwaysLeader:
        if not self._leading.is_set():
            self._leading.set()
            self._callbacks.fire(True)
        return self

    def stop(self, release: bool = True) -> None:
        if self._leading.is_set():
            self._leading.clear()
            self._callbacks.fire(False)

    def is_leader(self) -> bool:
        return True

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        return True

    def on_change(self, callback: Callable[[bool], None]) -> None:
        self._callbacks.callbacks.append(callback)


class LeaderElector:
    """Lease-based election on a thread: `start()`, then `is_leader()` any time from any thread."""

    def __init__(self, api: client.ApiClient, settings: LeaseSettings,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.settings = settings
        self.clock = clock
        self.identity = settings.identity or socket.gethostname()
        self.namespace = settings.namespace
        self.name = settings.lease_name
        self.lease_duration = settings.lease_duration_seconds
        # Poll/renew at least three times per lease duration, or a single slow request would cost the lease.
        self.retry_period = min(settings.renew_interval_seconds, self.lease_duration / 3)
        if self.retry_period < settings.renew_interval_seconds:
            log.warning("leader election: renew_interval_seconds %g is too long for lease_duration_seconds %g; "
                        "renewing every %gs", settings.renew_interval_seconds, self.lease_duration, self.retry_period)
        # Step down this long after the last renewal was sent: before any follower may take over.
        self.renew_deadline = max(self.lease_duration - self.retry_period, self.lease_duration / 2)
        self.request_timeout = max(0.2, self.retry_period)
        self.transitions = 0  # times this replica became leader
        self.last_error = ""
        self._lock = threading.Lock()
        self._renewed_at: float | None = None  # when the last successful acquire/renew was sent (None: follower)
        self._reported_leader = False
        self._observed: tuple[str, Any] | None = None  # (holder, renewTime) last seen in the Lease
        self._observed_at = 0.0
        self._callbacks = _Callbacks()
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- public -----------------------------------------------------------------------------------------

    def on_change(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(is_leader)` whenever leadership is gained or lost (on the elector's thread)."""
        self._callbacks.callbacks.append(callback)

    def is_leader(self) -> bool:
        """True while the last renewal is younger than the renew deadline: exact even while the elector's
        thread is stuck in a request."""
        with self._lock:
            renewed = self._renewed_at
        return renewed is not None and self.clock() < renewed + self.renew_deadline

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout) and self.is_leader()

    def start(self) -> LeaderElector:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop taking part. `release`: give the Lease up (a clean shutdown) so a successor need not wait
        for it to expire; without it the Lease is left as a crash would leave it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.request_timeout * 3 + 1)
        with self._lock:
            was_leader = self._renewed_at is not None
            self._renewed_at = None
        self._publish()
        if release and was_leader:
            self._release()

    def tick(self) -> None:
        """One round: read the Lease, then renew, acquire or follow. The thread calls it every retry period;
        tests call it directly with a controlled clock."""
        now = self.clock()
        try:
            self._round(now)
        except ApiUnavailable as exc:
            self._note_error(f"cannot reach the API server: {exc}")
        self._publish()

    # ---- the election -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.retry_period)

    def _path(self, with_name: bool = True) -> str:
        return LEASES.path(self.namespace, self.name if with_name else None)

    def _round(self, now: float) -> None:
        status, lease = request_json(self.api, "GET", self._path(), timeout=self.request_timeout)
        if status == 404:
            self._create(now)
            return
        if status != 200 or not isinstance(lease, dict):
            self._note_error(f"reading Lease {self.namespace}/{self.name} answered HTTP {status}")
            return
        spec = to_object(lease.get("spec"))
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder == self.identity:
            self._write(lease, now, acquire=False)
        elif not holder or self._expired(spec, now):
            self._write(lease, now, acquire=True)
        else:
            self._follow()

    def _expired(self, spec: dict[str, Any], now: float) -> bool:
        duration = spec.get("leaseDurationSeconds")
        seconds = float(duration) if isinstance(duration, int | float) and duration > 0 else self.lease_duration
        renewed = parse_time(spec.get("renewTime")) or 0.0
        return now >= max(renewed, self._observed_at) + seconds

    def _spec(self, now: float, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": math.ceil(self.lease_duration),
                "acquireTime": acquire_time, "renewTime": micro_time(now), "leaseTransitions": transitions}

    def _create(self, now: float) -> None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, micro_time(now), 0)}
        status, _ = request_json(self.api, "POST", self._path(with_name=False), body, timeout=self.request_timeout)
        if status in (200, 201):
            self._lead(now, acquired=True)
        elif status == 409:
            self._follow()  # another replica created it first
        else:
            self._note_error(f"creating Lease {self.namespace}/{self.name} answered HTTP {status}")

    def _write(self, lease: dict[str, Any], now: float, acquire: bool) -> None:
        spec = to_object(lease.get("spec"))
        found = spec.get("leaseTransitions")
        transitions = found if isinstance(found, int) else 0
        if acquire:
            new_spec = self._spec(now, micro_time(now), transitions + 1)
        else:
            new_spec = self._spec(now, spec.get("acquireTime") or micro_time(now), transitions)
        body = {**lease, "spec": new_spec}  # metadata keeps the resourceVersion we read
        status, _ = request_json(self.api, "PUT", self._path(), body, timeout=self.request_timeout)
        if status == 200:
            self._lead(now, acquired=acquire)
        elif status == 409:
            self._follow()  # someone wrote the Lease since we read it: re-read next round
        else:
            self._note_error(f"writing Lease {self.namespace}/{self.name} answered HTTP {status}")

    def _lead(self, sent_at: float, acquired: bool) -> None:
        with self._lock:
            self._renewed_at = sent_at
        self.last_error = ""
        if acquired:
            log.info("leader election: %s acquired Lease %s/%s", self.identity, self.namespace, self.name)

    def _follow(self) -> None:
        with self._lock:
            self._renewed_at = None

    def _note_error(self, message: str) -> None:
        if message != self.last_error:
            log.warning("leader election: %s", message)
        self.last_error = message
        # Keep `_renewed_at`: a leader stays leader until its deadline passes without a renewal.

    def _publish(self) -> None:
        """Tell the callbacks when `is_leader()` changed since the last time they heard."""
        leader = self.is_leader()
        if leader == self._reported_leader:
            return
        self._reported_leader = leader
        if leader:
            self.transitions += 1
            self._leading.set()
        else:
            self._leading.clear()
            log.info("leader election: %s is no longer the leader", self.identity)
        self._callbacks.fire(leader)

    def _release(self) -> None:
        """Empty the holder, if it is still us (the read resourceVersion guards against a new leader)."""
        try:
            status, lease = request_json(self.api, "GET", self._path(), timeout=self.request_timeout)
            if status != 200 or not isinstance(lease, dict):
                return
            spec = to_object(lease.get("spec"))
            if spec.get("holderIdentity") != self.identity:
                return
            now = self.clock()
            released = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time(now)}
            status, _ = request_json(self.api, "PUT", self._path(), {**lease, "spec": released},
                                     timeout=self.request_timeout)
            if status == 200:
                log.info("leader election: %s released Lease %s/%s", self.identity, self.namespace, self.name)
        except ApiUnavailable as exc:
            log.warning("leader election: could not release the Lease (%s); it expires by itself", exc)


def make_leader(api: client.ApiClient | None, settings: LeaseSettings,
                clock: Callable[[], float] = time.time) -> LeaderElector | AlwaysLeader:
    """The elector the settings ask for: a Lease elector, or `AlwaysLeader` when election is off."""
    if not settings.enabled or api is None:
        return AlwaysLeader(settings.identity)
    return LeaderElector(api, settings, clock)
