from __future__ import annotations

import logging
import zlib
from typing import Any

import pytest
from kubernetes import client

from tests.simtools import pod, wait_for
from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.informer import BACKOFF, FORBIDDEN, NOT_FOUND, WATCHING, Informer
from volcano_monitor.core.kube.resources import PODS, QUEUES, ResourceKind
from volcano_monitor.simulator import resources as sim_types
from volcano_monitor.simulator.runtime import SimulatorThread

Event = tuple[str, str, str]  # type, name, resourceVersion


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.events.append((event_type, meta["name"], meta["resourceVersion"]))

    def of(self, name: str) -> list[str]:
        return [t for t, n, _ in self.events if n == name]


def start(api: client.ApiClient, started: list[Informer[Any]], kind: ResourceKind = PODS,
          **kwargs: Any) -> tuple[Informer[dict[str, Any]], Recorder]:
    kwargs.setdefault("backoff", Backoff(0.02, 0.2))
    kwargs.setdefault("forbidden_retry_seconds", 0.2)
    informer: Informer[dict[str, Any]] = Informer(api, kind, **kwargs)
    recorder = Recorder()
    informer.add_handler(recorder)
    started.append(informer.start())
    assert informer.wait_synced(10)
    return informer, recorder


def server_state(sim: SimulatorThread, rtype: sim_types.ResourceType = sim_types.PODS) -> dict[str, str]:
    def read() -> dict[str, str]:
        out = {}
        for obj in sim.store.objects(rtype):
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if rtype.namespaced else meta["name"]
            out[key] = meta["resourceVersion"]
        return out

    return sim.call(read)


def cache_state(informer: Informer[Any]) -> dict[str, str]:
    return {key: entry.resource_version for key, entry in informer.cache.items()}


def create_pods(sim: SimulatorThread, count: int, namespace: str = "default") -> None:
    def create() -> None:
        for i in range(count):
            sim.store.create(sim_types.PODS, pod(f"p{i}", namespace), namespace)

    sim.call(create)


def test_initial_state_is_streamed_where_the_server_offers_it(sim: SimulatorThread, api: client.ApiClient,
                                                              informers: list[Any]) -> None:
    """sendInitialEvents: the state as ADDED events and a marked bookmark; no list response at all."""
    create_pods(sim, 25)
    informer, rec = start(api, informers, page_size=10)
    assert (sim.api.streamed_lists, sim.api.lists_from_cache, sim.api.list_pages_from_storage) == (1, 0, 0)
    assert cache_state(informer) == server_state(sim) and len(rec.events) == 25
    assert informer.last_resource_version == str(sim.store.rv)
    sim.call(sim.store.delete, sim_types.PODS, "default", "p4")  # the same stream goes on as a watch
    wait_for(lambda: rec.of("p4") == ["ADDED", "DELETED"])
    assert sim.api.streamed_lists == 1


def test_without_streaming_the_first_list_is_served_by_the_cache(sim: SimulatorThread, api: client.ApiClient,
                                                                 informers: list[Any]) -> None:
    """WatchList off (Kubernetes 1.33's default): 422, then resourceVersion=0 as client-go's reflector."""
    sim.api.faults.watch_list = False
    create_pods(sim, 25)
    informer, rec = start(api, informers, page_size=10)
    assert (sim.api.lists_from_cache, sim.api.list_pages_from_storage) == (1, 0)
    assert not informer.stream_lists and informer.request_errors["422"] == 1
    assert cache_state(informer) == server_state(sim) and len(rec.events) == 25


@pytest.mark.parametrize("stream", [True, False])
def test_relist_asks_for_no_older_state(sim: SimulatorThread, api: client.ApiClient, informers: list[Any],
                                        stream: bool) -> None:
    create_pods(sim, 25)
    informer, rec = start(api, informers, page_size=10, stream_lists=stream)
    sim.stop_http()
    sim.call(sim.store.delete, sim_types.PODS, "default", "p0")
    sim.call(sim.store.compact)
    sim.start_http()  # the watch gets 410: the state again, NotOlderThan what was seen, from the cache
    wait_for(lambda: informer.relists >= 1 and cache_state(informer) == server_state(sim))
    served = (sim.api.streamed_lists, sim.api.lists_from_cache, sim.api.list_pages_from_storage)
    assert served == ((2, 0, 0) if stream else (0, 2, 0))
    assert rec.of("p0") == ["ADDED", "DELETED"]  # what the new state does not name is gone


def test_a_stream_cut_before_the_initial_state_is_complete_starts_again(sim: SimulatorThread,
                                                                        api: client.ApiClient,
                                                                        informers: list[Any]) -> None:
    create_pods(sim, 6)
    sim.api.faults.truncate_streams = 1  # three pods, then the stream closes without the end bookmark
    informer, rec = start(api, informers)
    assert sim.api.streamed_lists == 1 and informer.relists == 0
    assert cache_state(informer) == server_state(sim)
    assert sorted(rec.events) == sorted(set(rec.events)) and len(rec.events) == 6  # nothing twice


def test_a_server_behind_our_resource_version_is_read_from_storage(sim: SimulatorThread,
                                                                   api: client.ApiClient) -> None:
    create_pods(sim, 25)
    informer: Informer[dict[str, Any]] = Informer(api, PODS, page_size=10)
    informer.last_resource_version = str(sim.store.rv + 1000)  # as after an etcd restore
    informer._list_and_reconcile()  # the relist a running informer would make
    assert sim.api.list_pages_from_storage == 3  # "too large resource version": a consistent read, paged
    assert cache_state(informer) == server_state(sim) and informer.last_resource_version == str(sim.store.rv)
    informer._list_and_reconcile()
    assert sim.api.lists_from_cache == 1  # and the cache again once the server has caught up


def test_paginated_list_then_watch(sim: SimulatorThread, api: client.ApiClient, informers: list[Any]) -> None:
    create_pods(sim, 25)
    before = sim.api.requests_total
    informer, rec = start(api, informers, page_size=10, list_from_cache=False, stream_lists=False)
    assert sim.api.requests_total - before >= 3  # three pages, then the watch
    assert sim.api.list_pages_from_storage == 3
    assert cache_state(informer) == server_state(sim)
    assert [t for t, _, _ in rec.events] == ["ADDED"] * 25
    sim.call(sim.store.mutate, sim_types.PODS, "default", "p3", lambda o: o["metadata"].update(labels={"x": "1"}))
    sim.call(sim.store.delete, sim_types.PODS, "default", "p4")
    wait_for(lambda: cache_state(informer) == server_state(sim))
    assert rec.of("p3") == ["ADDED", "MODIFIED"]
    assert rec.of("p4") == ["ADDED", "DELETED"]
    assert informer.state == WATCHING and informer.relists == 0


def test_bookmarks_advance_the_resume_point(sim: SimulatorThread, api: client.ApiClient,
                                            informers: list[Any]) -> None:
    informer, _ = start(api, informers)
    sim.call(sim.store.create, sim_types.QUEUES, {"metadata": {"name": "q"}})  # another resource moves rv
    rv = str(sim.store.rv)
    wait_for(lambda: informer.last_resource_version == rv, timeout=5)


def test_expired_resource_version_relists_and_reconciles(sim: SimulatorThread, api: client.ApiClient,
                                                         informers: list[Any]) -> None:
    create_pods(sim, 3)
    informer, rec = start(api, informers)
    sim.stop_http()  # the informer is cut off while the cluster changes ...
    sim.call(sim.store.delete, sim_types.PODS, "default", "p0")
    sim.call(sim.store.mutate, sim_types.PODS, "default", "p1", lambda o: o["metadata"].update(labels={"v": "2"}))
    sim.call(sim.store.compact)  # ... and the history it would resume from is gone
    sim.start_http()
    wait_for(lambda: informer.relists >= 1 and cache_state(informer) == server_state(sim))
    assert rec.of("p0") == ["ADDED", "DELETED"]  # synthetic delete for the vanished object
    assert rec.of("p1") == ["ADDED", "MODIFIED"]  # update for the changed one
    assert rec.of("p2") == ["ADDED"]  # nothing for the unchanged one


def test_expired_continue_token_restarts_the_list(sim: SimulatorThread, api: client.ApiClient,
                                                  informers: list[Any]) -> None:
    create_pods(sim, 30)
    expired = {"done": False}
    original = sim.store.snapshot

    def snapshot_expiring_once(token: str) -> Any:
        if not expired["done"]:
            expired["done"] = True
            sim.store.compact()
        return original(token)

    sim.store.snapshot = snapshot_expiring_once  # type: ignore[method-assign]
    informer, rec = start(api, informers, page_size=10, list_from_cache=False, stream_lists=False)
    assert expired["done"] and informer.relists == 1
    assert cache_state(informer) == server_state(sim)
    assert len(rec.events) == 30 and len(set(rec.events)) == 30  # nothing delivered twice


def test_server_errors_back_off_and_recover_keeping_the_cache(sim: SimulatorThread, api: client.ApiClient,
                                                              informers: list[Any]) -> None:
    create_pods(sim, 5)
    informer, rec = start(api, informers)
    wait_for(lambda: sim.api.active_watches == 1)
    sim.faults.error_count, sim.faults.error_code = 4, 503
    sim.call(sim.api.drop_watches)
    wait_for(lambda: informer.request_errors["503"] == 4)
    assert len(informer.cache) == 5  # kept while the server fails
    sim.call(sim.store.create, sim_types.PODS, pod("late"), "default")
    wait_for(lambda: cache_state(informer) == server_state(sim))
    assert informer.relists == 0 and rec.of("late") == ["ADDED"]


def test_connection_refused_keeps_cache_and_state_says_backoff(sim: SimulatorThread, api: client.ApiClient,
                                                               informers: list[Any]) -> None:
    create_pods(sim, 2)
    informer, _ = start(api, informers)
    sim.stop_http()
    wait_for(lambda: informer.state == BACKOFF)
    assert len(informer.cache) == 2
    sim.start_http()
    wait_for(lambda: informer.state == WATCHING)


def test_forbidden_logs_once_and_recovers(sim: SimulatorThread, api: client.ApiClient, informers: list[Any],
                                          caplog: pytest.LogCaptureFixture) -> None:
    sim.faults.forbidden = ["pods"]
    informer: Informer[Any] = Informer(api, PODS, backoff=Backoff(0.02, 0.2), forbidden_retry_seconds=0.05)
    informers.append(informer.start())
    with caplog.at_level(logging.ERROR):
        wait_for(lambda: informer.request_errors["403"] >= 4)
    assert informer.state == FORBIDDEN and not informer.synced.is_set()
    assert len([r for r in caplog.records if "forbidden" in r.getMessage()]) == 1
    sim.faults.forbidden = []
    assert informer.wait_synced(5)


def test_missing_crd_is_reported_as_not_found(api: client.ApiClient, informers: list[Any]) -> None:
    kind = ResourceKind("example.volcano.sh", "v1", "widgets", "Widget", True)
    informer: Informer[Any] = Informer(api, kind, forbidden_retry_seconds=0.05)
    informers.append(informer.start())
    wait_for(lambda: informer.state == NOT_FOUND)


def test_malformed_and_truncated_lines_are_counted_and_nothing_is_lost(
    sim: SimulatorThread, api: client.ApiClient, informers: list[Any]
) -> None:
    informer, rec = start(api, informers)
    sim.faults.truncate_streams = 1  # a line cut off, then the stream ends
    create_pods(sim, 3)
    wait_for(lambda: cache_state(informer) == server_state(sim))
    # Cut at a chunk boundary it is an undecodable last line; cut inside a chunk, a protocol error.
    assert informer.decode_errors + informer.request_errors["connection"] == 1
    decode_errors = informer.decode_errors
    sim.faults.malformed_lines = 1  # a garbage line in the middle of a healthy stream
    sim.call(lambda: [sim.store.create(sim_types.PODS, pod(f"q{i}"), "default") for i in range(3)])
    wait_for(lambda: cache_state(informer) == server_state(sim))
    assert informer.decode_errors == decode_errors + 1
    assert sorted(n for _, n, _ in rec.events) == ["p0", "p1", "p2", "q0", "q1", "q2"]


def test_predicate_filters_and_a_handler_failure_is_contained(sim: SimulatorThread, api: client.ApiClient,
                                                               informers: list[Any]) -> None:
    def shard0(raw: dict[str, Any]) -> bool:  # UID-hash sharding, as the exporter does it
        return zlib.crc32(raw["metadata"]["uid"].encode()) % 2 == 0

    def broken(_: str, __: Any) -> None:
        raise RuntimeError("boom")

    create_pods(sim, 40)
    informer: Informer[Any] = Informer(api, PODS, predicate=shard0)
    rec = Recorder()
    informer.add_handler(broken)
    informer.add_handler(rec)
    informers.append(informer.start())
    assert informer.wait_synced(5)
    expected = {f"default/{o['metadata']['name']}" for o in sim.call(sim.store.objects, sim_types.PODS)
                if shard0(o)}
    assert set(informer.cache) == expected and 0 < len(expected) < 40
    assert len(rec.events) == informer.handler_errors == len(expected)


def test_transform_errors_are_counted_not_fatal(sim: SimulatorThread, api: client.ApiClient,
                                                informers: list[Any]) -> None:
    def picky(raw: dict[str, Any]) -> str:
        if raw["metadata"]["name"] == "bad":
            raise ValueError("cannot parse")
        return str(raw["metadata"]["name"])

    sim.call(sim.store.create, sim_types.PODS, pod("bad"), "default")
    sim.call(sim.store.create, sim_types.PODS, pod("good"), "default")
    informer: Informer[str] = Informer(api, PODS, transform=picky)
    informers.append(informer.start())
    assert informer.wait_synced(5)
    assert set(informer.cache) == {"default/good"} and informer.decode_errors == 1


def test_namespace_and_cluster_scope(sim: SimulatorThread, api: client.ApiClient, informers: list[Any]) -> None:
    create_pods(sim, 2, "a")
    create_pods(sim, 3, "b")
    sim.call(sim.store.create, sim_types.QUEUES, {"metadata": {"name": "root"}})
    only_b, _ = start(api, informers, namespace="b")
    queues, _ = start(api, informers, kind=QUEUES)
    assert set(only_b.cache) == {"b/p0", "b/p1", "b/p2"}
    assert set(queues.cache) == {"root"}


def test_an_unreachable_server_is_named_in_one_short_line(caplog: pytest.LogCaptureFixture) -> None:
    """No urllib3 retries and no wrapping: "cannot reach the API server URL: [Errno 111] Connection refused"."""
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    settings = client.Configuration(host=url)
    settings.retries = 0
    informer: Informer[Any] = Informer(client.ApiClient(settings), PODS, backoff=Backoff(0.05, 0.1))
    with caplog.at_level(logging.WARNING):
        informer.start()
        wait_for(lambda: informer.request_errors["connection"] >= 1)
        informer.stop()
    assert "Connection refused" in informer.last_error and "HTTPConnectionPool" not in informer.last_error
    lines = [r.getMessage() for r in caplog.records if "cannot reach" in r.getMessage()]
    assert lines and lines[0].startswith(f"pods: cannot reach the API server {url}: [Errno 111]")
    assert not [r for r in caplog.records if r.name.startswith("urllib3")]
