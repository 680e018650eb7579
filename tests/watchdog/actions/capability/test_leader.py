"""Lease leader election against the simulated API server with the real kubernetes client: step by step
with a controlled clock, then threaded with the real one."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kubernetes import client

from tests.simtools import FakeClock, client_for, wait_for
from tests.watchdog.actions.capability.conftest import stored
from volcano_monitor.core.kube.leaderelection import AlwaysLeader, LeaderElector, make_leader
from volcano_monitor.core.kube.rest import request_json
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.runtime.settings import LeaderElection

T0 = 1_700_000_000.0


def elector(api: client.ApiClient, identity: str, clock: FakeClock | None = None, duration: float = 10,
            renew: float = 2) -> LeaderElector:
    settings = LeaderElection(enabled=True, identity=identity, lease_duration_seconds=duration,
                              renew_interval_seconds=renew, lease_name="wd")
    return LeaderElector(api, settings, clock) if clock is not None else LeaderElector(api, settings)


def holder(sim: SimulatorThread) -> str:
    return str(stored(sim, R.LEASES, "wd", "default")["spec"].get("holderIdentity") or "")


def test_a_silent_leader_is_replaced_only_after_the_lease_duration(sim: SimulatorThread, api: client.ApiClient) -> None:
    clock = FakeClock(T0)
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    a.tick()
    assert a.is_leader() and holder(sim) == "a"
    b.tick()
    assert not b.is_leader()
    clock.t = T0 + 9.9  # a has not renewed since T0 (crashed): not expired yet
    b.tick()
    assert not b.is_leader() and holder(sim) == "a"
    assert not a.is_leader()  # but a stopped calling itself leader at its renew deadline (T0 + 8)
    clock.t = T0 + 10
    b.tick()
    assert b.is_leader() and holder(sim) == "b"
    assert stored(sim, R.LEASES, "wd", "default")["spec"]["leaseTransitions"] == 1
    a.tick()  # a comes back: b holds a live lease
    assert not a.is_leader() and b.is_leader()


def test_a_leader_that_cannot_renew_steps_down_before_anyone_may_take_over(sim: SimulatorThread,
                                                                           api: client.ApiClient) -> None:
    clock = FakeClock(T0)
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    changes: list[tuple[float, bool]] = []
    a.on_change(lambda leading: changes.append((clock.t, leading)))
    a.tick()
    b.tick()
    sim.faults.error_resource, sim.faults.error_code, sim.faults.error_count = "leases", 503, 10**6
    clock.t = T0 + 4
    a.tick()  # renewal fails: still within the deadline
    assert a.is_leader() and "503" in a.last_error
    clock.t = T0 + 8  # the renew deadline (lease duration 10 - renew interval 2)
    assert not a.is_leader()
    a.tick()
    assert changes == [(T0, True), (T0 + 8, False)]
    sim.faults.error_count = 0
    b.tick()
    assert not b.is_leader()  # the lease a renewed at T0 is valid until T0 + 10: b must wait
    clock.t = T0 + 10
    b.tick()
    assert b.is_leader()


def test_a_stale_lease_found_at_start_is_waited_out_from_when_it_was_seen(sim: SimulatorThread,
                                                                         api: client.ApiClient) -> None:
    old = {"metadata": {"name": "wd", "namespace": "default"},
           "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 10, "renewTime": "2020-01-01T00:00:00.000000Z"}}
    sim.call(sim.store.create, R.LEASES, old, "default")
    clock = FakeClock(T0)
    c = elector(api, "c", clock)
    c.tick()
    assert not c.is_leader()  # this replica's clock could be ahead of the holder's: wait a full duration
    clock.t = T0 + 10
    c.tick()
    assert c.is_leader() and holder(sim) == "c"


def test_a_write_from_a_stale_read_is_refused(sim: SimulatorThread, api: client.ApiClient) -> None:
    clock = FakeClock(T0)
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    status, free = request_json(api, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                                {"metadata": {"name": "wd"}, "spec": {"holderIdentity": ""}})
    assert status == 201
    a.tick()  # a acquires the free lease
    b._write(free, T0, acquire=True)  # b read the lease while it was free and writes after a did
    assert a.is_leader() and not b.is_leader() and holder(sim) == "a"


def test_two_replicas_release_and_crash_hand_over(sim: SimulatorThread, tmp_path: Path) -> None:
    duration, renew = 2.0, 0.2
    electors = [elector(client_for(sim, tmp_path / name), name, duration=duration, renew=renew) for name in "ab"]
    timeline: list[tuple[float, str, bool]] = []
    lock = threading.Lock()

    def recorder(who: str) -> object:
        def record(leading: bool) -> None:
            with lock:
                timeline.append((time.monotonic(), who, leading))
        return record

    for e in electors:
        e.on_change(recorder(e.identity))
    for e in electors:
        e.start()
    try:
        wait_for(lambda: any(e.is_leader() for e in electors), timeout=5)
        first = next(e for e in electors if e.is_leader())
        other = next(e for e in electors if e is not first)
        assert not other.is_leader()
        released = time.monotonic()
        first.stop(release=True)  # clean stop: the successor need not wait for expiry
        wait_for(other.is_leader, timeout=duration)
        assert time.monotonic() - released < duration
        first.start()  # back as a follower
        time.sleep(3 * renew)
        assert not first.is_leader() and other.is_leader()
        crashed = time.monotonic()
        other.stop(release=False)  # a crash: the lease is left to expire
        wait_for(first.is_leader, timeout=duration + 4 * renew)
        took = time.monotonic() - crashed
        assert duration - 2 * renew <= took <= duration + 4 * renew, took
    finally:
        for e in electors:
            e.stop()
    with lock:
        events = sorted(timeline)
    assert {who for _, who, leading in events if leading} == {"a", "b"}  # both led, one after the other
    leaders: set[str] = set()
    for _, who, leading in events:  # never two leaders at once
        (leaders.add if leading else leaders.discard)(who)
        assert len(leaders) <= 1, events


def test_always_leader_and_the_factory(api: client.ApiClient) -> None:
    seen: list[bool] = []
    always = make_leader(api, LeaderElection(enabled=False, identity="solo"))
    assert isinstance(always, AlwaysLeader) and always.identity == "solo"
    always.on_change(seen.append)
    always.start()
    assert always.is_leader() and always.wait_for_leadership(0)
    always.stop()
    assert seen == [True, False]
    assert isinstance(make_leader(api, LeaderElection(enabled=True)), LeaderElector)
    assert isinstance(make_leader(None, LeaderElection(enabled=True)), AlwaysLeader)
