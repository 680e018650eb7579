"""The simulated API server answers as a kube-apiserver would, for raw HTTP and the official client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from tests.simtools import client_for, pod
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.runtime import SimulatorThread


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(bookmark_interval=0.1) as running:
        yield running


@pytest.fixture
def api(sim: SimulatorThread, tmp_path: Path) -> client.ApiClient:
    return client_for(sim, tmp_path)


def http(sim: SimulatorThread, path: str, method: str = "GET", body: Any = None,
         content_type: str = "application/json", accept: str = "application/json") -> tuple[int, Any]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(sim.url + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def watch_lines(sim: SimulatorThread, path: str, limit: int = 100) -> list[dict[str, Any]]:
    with urllib.request.urlopen(sim.url + path, timeout=10) as response:
        return [json.loads(line) for line in response.read().splitlines()[:limit] if line.strip()]


def seed_pods(sim: SimulatorThread, count: int, namespace: str = "default") -> None:
    sim.call(lambda: [sim.store.create(R.PODS, pod(f"p{i:02d}", namespace, {"i": str(i % 3)}), namespace)
                      for i in range(count)])


def test_discovery_lists_volcano_groups_with_short_names(sim: SimulatorThread) -> None:
    _, groups = http(sim, "/apis")
    names = {g["name"] for g in groups["groups"]}
    assert {"batch.volcano.sh", "scheduling.volcano.sh", "metrics.k8s.io", "coordination.k8s.io"} <= names
    _, resources = http(sim, "/apis/scheduling.volcano.sh/v1beta1")
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["queues"]["namespaced"] is False and "q" in by_name["queues"]["shortNames"]
    assert "podgroups/status" not in by_name and "queues/status" in by_name  # as Volcano's CRDs say
    _, core = http(sim, "/api/v1")
    assert {"pods", "pods/status", "nodes", "namespaces", "events"} <= {r["name"] for r in core["resources"]}
    assert http(sim, "/apis/nope.example/v1")[0] == 404


def test_paginated_list_is_a_consistent_snapshot(sim: SimulatorThread) -> None:
    seed_pods(sim, 7)
    status, first = http(sim, "/api/v1/namespaces/default/pods?limit=3")
    assert status == 200 and len(first["items"]) == 3 and first["metadata"]["remainingItemCount"] == 4
    sim.call(sim.store.create, R.PODS, pod("p00a"), "default")  # written after the first page
    sim.call(sim.store.delete, R.PODS, "default", "p05")
    token = first["metadata"]["continue"]
    _, second = http(sim, f"/api/v1/namespaces/default/pods?limit=3&continue={token}")
    _, third = http(sim, f"/api/v1/namespaces/default/pods?limit=3&continue={second['metadata']['continue']}")
    names = [o["metadata"]["name"] for page in (first, second, third) for o in page["items"]]
    assert names == [f"p{i:02d}" for i in range(7)]  # the list as of the first page's revision
    assert "continue" not in third["metadata"]
    assert first["metadata"]["resourceVersion"] == third["metadata"]["resourceVersion"]
    sim.call(sim.store.compact)
    status, expired = http(sim, f"/api/v1/namespaces/default/pods?limit=3&continue={token}")
    assert status == 410 and expired["reason"] == "Expired"


def test_label_and_field_selectors(sim: SimulatorThread) -> None:
    seed_pods(sim, 6)
    sim.call(sim.store.create, R.PODS, pod("other", "kube-system", {"i": "0"}), "kube-system")

    def names(query: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in http(sim, f"/api/v1/pods?{query}")[1]["items"])

    assert names("labelSelector=i%3D1") == ["p01", "p04"]
    assert names("labelSelector=i%20in%20(0,2),i!%3D2") == ["other", "p00", "p03"]
    assert names("labelSelector=!i") == []
    assert names("fieldSelector=metadata.namespace%3Dkube-system") == ["other"]
    assert http(sim, "/api/v1/pods?labelSelector=i%20in%20")[0] == 400


def test_crud_conflicts_and_status_subresource(sim: SimulatorThread) -> None:
    status, queue = http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues", "POST",
                         {"metadata": {"name": "q"}, "spec": {"weight": 1}, "status": {"state": "Open"}})
    assert status == 201 and queue["metadata"]["uid"] and "status" in queue
    assert http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues", "POST", {"metadata": {"name": "q"}})[0] == 409
    stale = queue["metadata"]["resourceVersion"]
    status, patched = http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues/q", "PATCH",
                           {"spec": {"weight": 3}, "status": {"state": "Closed"}}, "application/merge-patch+json")
    assert status == 200 and patched["spec"]["weight"] == 3 and patched["status"]["state"] == "Open"
    assert patched["metadata"]["generation"] == 2
    queue["spec"]["weight"] = 9
    status, conflict = http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues/q", "PUT", queue)
    assert status == 409 and conflict["reason"] == "Conflict" and stale != patched["metadata"]["resourceVersion"]
    status, st = http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues/q/status", "PATCH",
                      [{"op": "replace", "path": "/status/state", "value": "Closing"},
                       {"op": "replace", "path": "/spec/weight", "value": 100}], "application/json-patch+json")
    assert status == 200 and st["status"]["state"] == "Closing" and st["spec"]["weight"] == 3
    assert http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues/q/status", "PATCH",
                [{"op": "remove", "path": "/nope"}], "application/json-patch+json")[0] == 422
    # PodGroup has no status subresource: status is written through the object.
    status, pg = http(sim, "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups", "POST",
                      {"metadata": {"name": "pg"}, "spec": {"minMember": 1}, "status": {"phase": "Inqueue"}})
    assert status == 201 and pg["status"]["phase"] == "Inqueue" and pg["metadata"]["namespace"] == "ns"
    assert http(sim, "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/pg/status")[0] == 404
    status, deleted = http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues/q", "DELETE")
    assert status == 200 and deleted["metadata"]["deletionTimestamp"]
    assert http(sim, "/apis/scheduling.volcano.sh/v1beta1/queues/q")[0] == 404
    assert http(sim, "/api/v1/namespaces/default/pods", "POST", b"{not json")[0] == 400
    assert http(sim, "/api/v1/namespaces/default/pods", "POST", {"metadata": {"generateName": "w-"}})[1][
        "metadata"]["name"].startswith("w-")


def test_watch_resumes_bookmarks_times_out_and_answers_410(sim: SimulatorThread) -> None:
    seed_pods(sim, 2)
    start_rv = sim.store.rv
    sim.call(sim.store.mutate, R.PODS, "default", "p00", lambda o: o["metadata"].update(labels={"x": "1"}))
    sim.call(sim.store.delete, R.PODS, "default", "p01")
    t0 = time.monotonic()
    events = watch_lines(sim, f"/api/v1/pods?watch=1&resourceVersion={start_rv}&allowWatchBookmarks=true"
                              "&timeoutSeconds=1")
    assert 0.9 < time.monotonic() - t0 < 5  # the server closes the stream at timeoutSeconds
    kinds = [(e["type"], e["object"]["metadata"].get("name")) for e in events]
    assert kinds[:2] == [("MODIFIED", "p00"), ("DELETED", "p01")]
    assert ("BOOKMARK", None) in kinds[2:]
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) == sim.store.rv
    sim.call(sim.store.compact)
    gone = watch_lines(sim, f"/api/v1/pods?watch=1&resourceVersion={start_rv}")
    assert gone == [{"type": "ERROR", "object": gone[0]["object"]}] and gone[0]["object"]["code"] == 410


def test_selector_watch_turns_label_edges_into_added_and_deleted(sim: SimulatorThread) -> None:
    seed_pods(sim, 1)
    rv = sim.store.rv
    sim.call(sim.store.mutate, R.PODS, "default", "p00", lambda o: o["metadata"].update(labels={"i": "9"}))
    sim.call(sim.store.mutate, R.PODS, "default", "p00", lambda o: o["metadata"].update(labels={"i": "0"}))
    events = watch_lines(sim, f"/api/v1/pods?watch=1&resourceVersion={rv}&labelSelector=i%3D0&timeoutSeconds=1")
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]


def test_official_client_and_its_watch(sim: SimulatorThread, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team-a")))
    created = core.create_namespaced_pod("team-a", client.V1Pod(
        metadata=client.V1ObjectMeta(name="w", labels={"a": "b"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")])))
    assert created.metadata.uid and created.metadata.namespace == "team-a"
    page = core.list_namespaced_pod("team-a", limit=1)
    assert [p.metadata.name for p in page.items] == ["w"] and page.metadata._continue is None
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("nope", "team-a")
    assert missing.value.status == 404
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "team-a", "jobs",
                                           {"metadata": {"name": "j"}, "spec": {"queue": "default"}})
    job = custom.patch_namespaced_custom_object_status(
        "batch.volcano.sh", "v1alpha1", "team-a", "jobs", "j", {"status": {"state": {"phase": "Running"}}})
    assert job["status"]["state"]["phase"] == "Running"
    stream = watch.Watch().stream(core.list_namespaced_pod, "team-a", timeout_seconds=1)
    assert [(e["type"], e["object"].metadata.name) for e in stream] == [("ADDED", "w")]


def test_faults_endpoint(sim: SimulatorThread) -> None:
    status, faults = http(sim, "/sim/faults", "POST", {"error_count": 1, "error_code": 503, "forbidden": ["nodes"]})
    assert status == 200 and faults["error_count"] == 1
    assert http(sim, "/api/v1/pods")[0] == 503
    assert http(sim, "/api/v1/pods")[0] == 200
    assert http(sim, "/api/v1/nodes")[0] == 403
    assert http(sim, "/sim/faults", "POST", {"bogus": 1})[0] == 400
    seed_pods(sim, 1)
    rv = sim.store.rv - 1
    http(sim, "/sim/faults", "POST", {"expire": True})
    assert watch_lines(sim, f"/api/v1/pods?watch=1&resourceVersion={rv}")[0]["type"] == "ERROR"
