"""Random creates/updates/deletes interleaved with dropped streams, 410s, corrupted lines and 5xx:
afterwards the informer's cache equals the server's state, and no handler saw one object's events
out of order. Runs `HYPOTHESIS_PROFILE`'s example count (200 in CI; HYPOTHESIS_PROFILE=long for 2000)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from tests.simtools import client_for, pod, wait_for
from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.resources import PODS
from volcano_monitor.simulator import resources as sim_types
from volcano_monitor.simulator.runtime import SimulatorThread

NAMES = [f"o{i}" for i in range(4)]  # few names, so operations often hit existing objects

operations = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(NAMES)),
    st.tuples(st.just("update"), st.sampled_from(NAMES)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES)),
    st.tuples(st.just("drop"), st.none()),
    st.tuples(st.just("expire"), st.none()),
    st.tuples(st.just("malformed"), st.integers(1, 2)),
    st.tuples(st.just("truncate"), st.none()),
    st.tuples(st.just("error"), st.integers(1, 3)),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 0.005, 0.02])),
    # The informer goes blind (every request fails) while the cluster changes, until "heal":
    # with an "expire" in between, only a relist and reconcile can catch it up.
    st.tuples(st.just("blind"), st.none()),
    st.tuples(st.just("heal"), st.none()),
    # An outage: blind, some writes, maybe a compaction, then healed.
    st.tuples(st.just("outage"), st.tuples(
        st.lists(st.tuples(st.sampled_from(["create", "update", "delete"]), st.sampled_from(NAMES)), max_size=6),
        st.booleans())),
)


@pytest.fixture(scope="module")
def shared_sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(bookmark_interval=0.05) as sim:
        yield sim


@pytest.fixture(scope="module")
def shared_api(shared_sim: SimulatorThread, tmp_path_factory: pytest.TempPathFactory) -> client.ApiClient:
    return client_for(shared_sim, Path(tmp_path_factory.mktemp("kube")))


_namespaces = itertools.count()


def apply(sim: SimulatorThread, namespace: str, op: str, arg: Any) -> None:
    store, faults = sim.store, sim.faults
    if op == "create":
        if store.get(sim_types.PODS, namespace, arg) is None:
            store.create(sim_types.PODS, pod(arg, namespace), namespace)
    elif op == "update":
        store.mutate(sim_types.PODS, namespace, arg,
                     lambda o: o["metadata"].setdefault("labels", {}).update(n=str(store.rv)))
    elif op == "delete":
        if store.get(sim_types.PODS, namespace, arg) is not None:
            store.delete(sim_types.PODS, namespace, arg)
    elif op == "drop":
        sim.api.drop_watches()
    elif op == "expire":
        store.compact()
    elif op == "malformed":
        faults.malformed_lines += arg
    elif op == "truncate":
        faults.truncate_streams += 1
    elif op == "error":
        faults.error_count, faults.error_code = faults.error_count + arg, 500
    elif op == "blind":
        faults.error_count, faults.error_code = 10**9, 503
        sim.api.drop_watches()
    elif op == "heal":
        faults.error_count = 0
    elif op == "outage":
        writes, expire = arg
        apply(sim, namespace, "blind", None)
        for write in writes:
            apply(sim, namespace, *write)
        if expire:
            store.compact()
        apply(sim, namespace, "heal", None)


def check_order(events: list[tuple[str, str, int]]) -> None:
    """Per object: ADDED, MODIFIED*, DELETED, ... with strictly growing resourceVersions
    (a synthetic DELETED from a relist carries the last version seen, so it may repeat it)."""
    by_name: dict[str, list[tuple[str, int]]] = {}
    for event_type, name, rv in events:
        by_name.setdefault(name, []).append((event_type, rv))
    for name, seq in by_name.items():
        present, last_rv = False, -1
        for event_type, rv in seq:
            if event_type == "ADDED":
                assert not present, f"{name}: ADDED while present: {seq}"
                assert rv > last_rv, f"{name}: resourceVersion went back: {seq}"
                present = True
            elif event_type == "MODIFIED":
                assert present and rv > last_rv, f"{name}: bad MODIFIED: {seq}"
            else:
                assert present and rv >= last_rv, f"{name}: bad DELETED: {seq}"
                present = False
            last_rv = rv


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(ops=st.lists(st.tuples(operations, st.booleans()), min_size=1, max_size=25))
def test_cache_converges_in_order(shared_sim: SimulatorThread, shared_api: client.ApiClient,
                                  ops: list[tuple[tuple[str, Any], bool]]) -> None:
    sim = shared_sim
    namespace = f"prop-{next(_namespaces)}"
    events: list[tuple[str, str, int]] = []
    informer: Informer[dict[str, Any]] = Informer(
        shared_api, PODS, namespace=namespace, backoff=Backoff(0.005, 0.05), watch_timeout_seconds=5
    )
    informer.add_handler(lambda t, o: events.append((t, o["metadata"]["name"], int(o["metadata"]["resourceVersion"]))))
    # Half of the operations run before the informer starts, so the first list sees some state.
    split = len(ops) // 2
    try:
        for (op, arg), _ in ops[:split]:
            if op != "pause":
                sim.call(apply, sim, namespace, op, arg)
        informer.start()
        for (op, arg), batch in ops[split:]:
            if op == "pause":
                time.sleep(arg)
            elif op == "outage":  # the informer must notice the outage: wait until it is failing
                errors = informer.request_errors["503"]
                sim.call(apply, sim, namespace, "blind", None)
                wait_for(lambda errors=errors: informer.request_errors["503"] > errors, timeout=5)  # type: ignore[misc]
                sim.call(apply, sim, namespace, op, arg)
            elif batch:
                sim.call(apply, sim, namespace, op, arg)
            else:  # give the informer a moment, so faults hit a live stream
                sim.call(apply, sim, namespace, op, arg)
                time.sleep(0.002)
        sim.call(apply, sim, namespace, "heal", None)

        def server_state() -> dict[str, str]:
            return {f"{namespace}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
                    for o in sim.store.objects(sim_types.PODS, namespace)}

        wait_for(lambda: informer.synced.is_set()
                 and {k: e.resource_version for k, e in informer.cache.items()} == sim.call(server_state),
                 timeout=20)
    finally:
        informer.stop()
        sim.faults.malformed_lines = sim.faults.truncate_streams = sim.faults.error_count = 0
    check_order(events)
    final = {name for _, name, _ in events}
    assert {k.split("/")[1] for k in informer.cache} <= final
