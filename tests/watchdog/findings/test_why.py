"""`GET /api/v1/jobs/{uid}/why` over the watchdog's own informer state: objects go through the worker's
observer path (as informer events do) into its ClusterIndex, and the API explains from there."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.exporter import objects
from tests.exporter.objects import job_podgroup, queue, waiting_job
from tests.simtools import wait_for
from tests.watchdog.harness import fast_settings, start_watchdog
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.model import parse_job, parse_podgroup, parse_queue
from volcano_monitor.core.pending import REASONS
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.findings.why import why_router
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health

GPU = "nvidia.com/gpu"


class Cluster:
    """A watchdog worker (no informers) fed events by hand, and its API."""

    def __init__(self, engine: Engine) -> None:
        self.watchdog = Watchdog(Settings(), engine, api=None)
        app = create_app(engine, Settings(), Health(ready=lambda: True, collectors=dict),
                         routers=[why_router(self.watchdog.index.why)])
        self.client = TestClient(app)

    def send(self, event_type: str, *, queues: list[dict[str, Any]] | None = None,
             jobs: list[dict[str, Any]] | None = None, groups: list[dict[str, Any]] | None = None) -> None:
        batch: list[tuple[str, str, Any]] = [("queues", event_type, parse_queue(q)) for q in queues or []]
        batch += [("podgroups", event_type, parse_podgroup(g)) for g in groups or []]
        batch += [("jobs", event_type, parse_job(j)) for j in jobs or []]
        self.watchdog.apply(batch, [])

    def why(self, uid: str) -> dict[str, Any]:
        response = self.client.get(f"/api/v1/jobs/{uid}/why")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def gpu_job(name: str, queue_name: str, gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    job = waiting_job(name, queue_name, gpus, {"cpu": "1", GPU: "1"})
    return job, job_podgroup(job, {"cpu": str(gpus), GPU: str(gpus)})


def research_queues(dev_allocated: str) -> list[dict[str, Any]]:
    return [queue("root", parent=None), queue("default"),
            queue("research", capability={GPU: "8"}, allocated={GPU: "6"}),
            queue("research-dev", parent="research", capability={GPU: "4"}, allocated={GPU: dev_allocated}),
            queue("archive", state="Closed")]


def test_why_names_the_reason_queue_and_resource(engine: Engine) -> None:
    cluster = Cluster(engine)
    big = waiting_job("biggang", "default", 4, {"cpu": "30", "memory": "1Gi"})
    train, train_group = gpu_job("train", "research-dev", 4)
    old, old_group = gpu_job("old", "archive", 1)
    cluster.send(ADDED, queues=research_queues("4"), jobs=[big, train, old],
                 groups=[job_podgroup(big, {"cpu": "120", "memory": "4Gi"}), train_group, old_group])

    got = cluster.why("uid-biggang")  # a gang larger than the cluster
    assert got == {"uid": "uid-biggang", "kind": "Job", "namespace": "ml", "job_name": "biggang", "phase": "Pending",
                   "pending": True, "reason": "cluster_too_small", "queue": "root", "resource": "cpu",
                   "message": "cluster: cpu 120 requested > allocatable 96 (never fits)",
                   "scheduler_reason": "", "scheduler_message": "",
                   "position": 1, "queue_waiting": 1, "priority": 0, "ahead": [], "ahead_other_namespaces": 0,
                   "ahead_other_namespaces_requests": {},
                   "expected_start": None, "expected_start_low": None, "expected_start_high": None,
                   "waits_for": None}  # no estimator in this app: the fields are there, null
    got = cluster.why("uid-train")  # a queue at capability under a parent at capability
    assert (got["reason"], got["queue"], got["resource"], got["message"]) == (
        "queue_capability", "research-dev", GPU,
        "queue research-dev: nvidia.com/gpu 4 allocated + 4 requested > capability 4")
    got = cluster.why("uid-old")  # a closed queue
    assert (got["reason"], got["queue"], got["resource"], got["message"]) == (
        "queue_closed", "archive", "", "queue archive is Closed")

    cluster.send(MODIFIED, queues=research_queues("0")[3:4])  # research-dev frees its GPUs: the parent blocks
    got = cluster.why("uid-train")
    assert (got["reason"], got["queue"], got["message"]) == (
        "queue_capability", "research", "queue research: nvidia.com/gpu 6 allocated + 4 requested > capability 8")
    assert cluster.why("pg-uid-train") == got  # asked by its PodGroup's UID: answered for the Job


def test_running_jobs_are_not_pending_and_gone_ones_are_404(engine: Engine) -> None:
    cluster = Cluster(engine)
    train, group = gpu_job("train", "research-dev", 4)
    cluster.send(ADDED, queues=research_queues("0"), jobs=[train], groups=[group])
    assert cluster.why("uid-train")["pending"] is True
    placed = copy.deepcopy(group)
    placed["status"] = {"phase": "Running", "running": 4}
    cluster.send(MODIFIED, groups=[placed])
    got = cluster.why("uid-train")
    assert (got["pending"], got["reason"], got["message"], got["phase"]) == (False, None, None, "Pending")
    cluster.send(DELETED, jobs=[train], groups=[placed])
    missing = cluster.client.get("/api/v1/jobs/uid-train/why")
    assert missing.status_code == 404 and missing.json() == {"detail": "no such live job or podgroup"}
    assert cluster.client.get("/api/v1/jobs/" + "x" * 65 + "/why").status_code == 422


def test_not_synced_is_503_not_a_missing_queue(engine: Engine) -> None:
    cluster = Cluster(engine)
    train, group = gpu_job("train", "research-dev", 4)
    cluster.send(ADDED, jobs=[train], groups=[group])  # the Queues have not been listed yet
    client = TestClient(create_app(engine, Settings(), Health(ready=lambda: True, collectors=dict),
                                   routers=[why_router(cluster.watchdog.index.why, lambda: False)]))
    response = client.get("/api/v1/jobs/uid-train/why")
    assert response.status_code == 503 and "not synced" in response.json()["detail"]


def test_other_operators_podgroups_and_the_schedulers_condition(engine: Engine) -> None:
    cluster = Cluster(engine)
    kubeflow = objects.kubeflow_podgroup()  # Pending, Unschedulable/NotEnoughResources, 4 GPUs asked
    cluster.send(ADDED, queues=[queue("root", parent=None), queue("nlp", capability={GPU: "8"})], groups=[kubeflow])
    got = cluster.why("pg-uid")
    assert (got["kind"], got["job_name"], got["reason"], got["scheduler_reason"], got["message"]) == (
        "PyTorchJob", "bert", "unschedulable", "NotEnoughResources",
        "NotEnoughResources: 3/4 tasks in gang unschedulable")


def test_openapi_documents_every_reason(engine: Engine) -> None:
    schema = Cluster(engine).client.get("/openapi.json").json()
    description = schema["paths"]["/api/v1/jobs/{uid}/why"]["get"]["description"]
    assert all(f"`{reason}`" in description for reason in REASONS)


def test_the_running_watchdog_explains_the_simulated_gang_too_big(engine: Engine, tmp_path: Path) -> None:
    """Informers, worker and index of a started watchdog, against the simulator's mirror of the recording."""
    sim = SimulatorThread(scenario="recorded-gang-too-big", speed=60).start()
    watchdog = start_watchdog(sim, engine, tmp_path, fast_settings(str(engine.url)))
    try:
        client = TestClient(create_app(engine, Settings(), Health(ready=lambda: True, collectors=dict),
                                       routers=[why_router(watchdog.index.why, watchdog.index_synced)]))

        def biggang() -> dict[str, Any] | None:
            uids = [uid for (_, name), uid in watchdog.index.job_uids.items() if name.startswith("biggang")]
            if not uids:
                return None
            was_ready = watchdog.index_synced()
            response = client.get(f"/api/v1/jobs/{uids[0]}/why")
            assert response.status_code in ((200,) if was_ready else (200, 503))
            body: dict[str, Any] = response.json()
            return body if body.get("reason") not in (None, "waiting") else None

        wait_for(lambda: biggang() is not None, timeout=30)
        got = biggang()
        assert got is not None
        assert (got["reason"], got["queue"], got["resource"]) == ("cluster_too_small", "root", "cpu")
    finally:
        watchdog.stop()
        sim.stop()


def test_the_api_docs_list_every_reason() -> None:
    text = (Path(__file__).parents[3] / "docs" / "watchdog.md").read_text()
    section = text[text.index("### Why is my job pending"):text.index("## Reliability")]
    assert all(f"`{reason}`" in section for reason in REASONS)
