from __future__ import annotations

import copy
from typing import Any

from tests.exporter import objects
from tests.exporter.scrape import parse, select, value
from volcano_monitor.core.kube.informer import ADDED, DELETED, MODIFIED
from volcano_monitor.core.model import parse_job, parse_pod, parse_podgroup, parse_queue
from volcano_monitor.exporter.store import ExporterStore


def scrape(store: ExporterStore) -> dict[Any, float]:
    out: list[bytes] = []
    store.write(out)
    return parse(b"".join(out))


def kubeflow_pod(name: str, phase: str = "Running", cpu: str = "2") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "nlp", "uid": f"uid-{name}", "resourceVersion": "5",
                     "annotations": {"scheduling.k8s.io/group-name": "bert"}},
        "spec": {"schedulerName": "volcano", "nodeName": "gpu-1",
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1.5Gi"}}}]},
        "status": {"phase": phase},
    }


def test_job_series_follow_conditions_and_disappear_on_delete() -> None:
    store = ExporterStore()
    raw = objects.full_job()
    store.on_job(ADDED, parse_job(raw))
    s = scrape(store)
    created, started = 1714557600.0, 1714557660.0  # T0, T1
    assert value(s, "volcano_job_created_timestamp_seconds", job_name="j") == created
    assert value(s, "volcano_job_start_time_seconds", job_name="j") == started
    assert value(s, "volcano_job_wait_duration_seconds", job_name="j", queue="q") == started - created
    assert not select(s, "volcano_job_completion_time_seconds")  # still running
    assert not select(s, "volcano_job_run_duration_seconds")
    assert value(s, "volcano_job_status_phase", job_name="j", phase="Running") == 1
    assert value(s, "volcano_job_resource_requests", job_name="j", resource="cpu", unit="core") == 2
    assert value(s, "volcano_task_status_pods", task="w", phase="Running") == 2
    assert value(s, "volcano_queue_jobs", queue="q", phase="Running") == 1

    finished = copy.deepcopy(raw)
    finished["status"]["state"]["phase"] = "Failed"
    finished["status"]["conditions"].append({"status": "Failed", "lastTransitionTime": objects.T3})
    store.on_job(MODIFIED, parse_job(finished))
    s = scrape(store)
    assert value(s, "volcano_job_completion_time_seconds", job_name="j", phase="Failed") == 1714557780.0
    assert value(s, "volcano_job_run_duration_seconds", job_name="j") == 120
    assert select(s, "volcano_job_status_phase") == {
        frozenset({"namespace": "n", "job_name": "j", "queue": "q", "phase": "Failed"}.items()): 1}
    assert select(s, "volcano_queue_jobs") == {frozenset({"queue": "q", "phase": "Failed"}.items()): 1}

    store.on_job(DELETED, parse_job(finished))
    # Only the queue histograms stay (counters must not vanish with their Jobs); they observed nothing:
    # the Job's transitions (2024) are older than the store.
    left = scrape(store)
    assert {name for name, _ in left} == {f"volcano_queue_job_{kind}_duration_seconds_{part}"
                                          for kind in ("wait", "run") for part in ("bucket", "sum", "count")}
    assert set(left.values()) == {0}


def test_never_started_job_has_no_start_series() -> None:
    raw = objects.full_job()
    raw["status"] = {"state": {"phase": "Pending"}}
    store = ExporterStore()
    store.on_job(ADDED, parse_job(raw))
    s = scrape(store)
    assert not select(s, "volcano_job_start_time_seconds") and not select(s, "volcano_job_wait_duration_seconds")


def test_kubeflow_pods_get_queue_and_job_from_their_podgroup_even_when_it_comes_later() -> None:
    store = ExporterStore()
    store.on_pod(ADDED, parse_pod(kubeflow_pod("bert-worker-0")))
    s = scrape(store)
    assert value(s, "volcano_pod_info", pod="bert-worker-0")  # exported at once, attribution unknown yet
    assert value(s, "volcano_pod_info", pod="bert-worker-0", queue="", job_name="") == 1
    group = parse_podgroup(objects.kubeflow_podgroup())
    store.on_podgroup_owner(ADDED, group)
    store.on_podgroup(ADDED, group)
    s = scrape(store)
    assert value(s, "volcano_pod_info", pod="bert-worker-0", queue="nlp", job_name="bert", job_kind="PyTorchJob",
                 podgroup="bert", node="gpu-1") == 1
    assert value(s, "volcano_queue_pod_requests", queue="nlp", phase="running", resource="cpu") == 2
    assert not select(s, "volcano_queue_pod_requests", queue="")
    assert value(s, "volcano_podgroup_condition", type="Unschedulable", reason="NotEnoughResources") == 1
    assert value(s, "volcano_podgroup_info", podgroup="bert", job_kind="PyTorchJob", job_name="bert") == 1


def test_queue_aggregates_are_incremental_and_exact() -> None:
    store = ExporterStore()
    group = parse_podgroup(objects.kubeflow_podgroup())
    store.on_podgroup_owner(ADDED, group)
    for i in range(30):
        store.on_pod(ADDED, parse_pod(kubeflow_pod(f"p{i}", "Pending", cpu="100m")))
    s = scrape(store)
    assert value(s, "volcano_queue_pod_requests", queue="nlp", phase="pending", resource="cpu") == 3.0
    assert value(s, "volcano_queue_pod_requests", queue="nlp", phase="pending", resource="memory",
                 unit="byte") == 30 * 1.5 * 2**30
    for i in range(30):  # pending -> running -> gone: sums must return to nothing, not to 1e-16
        store.on_pod(MODIFIED, parse_pod(kubeflow_pod(f"p{i}", "Running", cpu="100m")))
    assert value(scrape(store), "volcano_queue_pod_requests", phase="running", resource="cpu") == 3.0
    for i in range(30):
        store.on_pod(DELETED, parse_pod(kubeflow_pod(f"p{i}", "Running", cpu="100m")))
    assert select(scrape(store), "volcano_queue_pod_requests") == {}
    # A group moving to another queue moves its pods' requests with it.
    store.on_pod(ADDED, parse_pod(kubeflow_pod("x", "Running")))
    moved = objects.kubeflow_podgroup()
    moved["spec"]["queue"] = "other"
    store.on_podgroup_owner(MODIFIED, parse_podgroup(moved))
    s = scrape(store)
    assert value(s, "volcano_queue_pod_requests", queue="other", resource="cpu") == 2
    assert not select(s, "volcano_queue_pod_requests", queue="nlp")


def test_queue_series_and_odd_label_values_are_escaped() -> None:
    store = ExporterStore()
    raw = objects.full_queue()
    raw["metadata"]["name"] = 'we"ird\\q\nü'
    store.on_queue(ADDED, parse_queue(raw))
    s = scrape(store)
    q = 'we"ird\\q\nü'
    assert value(s, "volcano_queue_spec_capability", queue=q, resource="nvidia_com_gpu", unit="integer") == 8
    assert value(s, "volcano_queue_status_allocated", queue=q, resource="cpu") == 12.5
    assert value(s, "volcano_queue_spec_guarantee", queue=q, resource="memory", unit="byte") == 10 * 2**30
    assert value(s, "volcano_queue_info", queue=q, parent="root", reclaimable="true") == 1
    # Queue status counts (older releases) are not what the family reports: it counts PodGroups.
    assert value(s, "volcano_queue_status_podgroups", queue=q, phase="unknown") == 0
    quiet = ExporterStore(emit_queues=False)  # shards other than 0
    quiet.on_queue(ADDED, parse_queue(raw))
    assert scrape(quiet) == {}


def test_queue_podgroup_counts_are_derived_from_the_podgroups() -> None:
    """Volcano v1.12 writes no PodGroup counts into Queue status: the exporter counts the groups."""
    store = ExporterStore()
    queue = objects.full_queue()
    queue["metadata"]["name"] = "nlp"
    store.on_queue(ADDED, parse_queue(queue))
    groups = []
    for i, phase in enumerate(["Pending", "Inqueue", "Running", "Running", None]):
        raw = objects.kubeflow_podgroup()
        raw["metadata"]["name"] = f"g{i}"
        raw["status"] = {} if phase is None else {"phase": phase}  # a new group has no status yet
        groups.append(raw)
        store.on_podgroup_owner(ADDED, parse_podgroup(raw))
    counts = {phase: value(scrape(store), "volcano_queue_status_podgroups", queue="nlp", phase=phase)
              for phase in ("pending", "inqueue", "running", "completed", "unknown")}
    assert counts == {"pending": 2, "inqueue": 1, "running": 2, "completed": 0, "unknown": 0}
    groups[0]["status"] = {"phase": "Running"}
    store.on_podgroup_owner(MODIFIED, parse_podgroup(groups[0]))
    store.on_podgroup_owner(DELETED, parse_podgroup(groups[2]))
    groups[3]["spec"]["queue"] = "elsewhere"  # a queue that does not exist (yet): still counted
    store.on_podgroup_owner(MODIFIED, parse_podgroup(groups[3]))
    s = scrape(store)
    assert value(s, "volcano_queue_status_podgroups", queue="nlp", phase="pending") == 1
    assert value(s, "volcano_queue_status_podgroups", queue="nlp", phase="running") == 1
    assert value(s, "volcano_queue_status_podgroups", queue="elsewhere", phase="running") == 1
    assert not select(s, "volcano_queue_status_podgroups", queue="elsewhere", phase="pending")
    quiet = ExporterStore(emit_queues=False)  # other shards count too, but only shard 0 emits queue series
    quiet.on_podgroup_owner(ADDED, parse_podgroup(groups[1]))
    assert not select(scrape(quiet), "volcano_queue_status_podgroups")


def test_malformed_objects_are_exported_with_what_could_be_read_and_counted() -> None:
    store = ExporterStore()
    raw = objects.full_job()
    raw["spec"]["tasks"][0]["replicas"] = "many"
    raw["status"]["conditions"] = "not a list"
    store.on_job(ADDED, parse_job(raw))
    s = scrape(store)
    assert value(s, "volcano_job_info", job_name="j") == 1
    assert store.parse_problems["jobs"] >= 2


def test_finished_jobs_leave_nothing_behind() -> None:
    """Months of uptime: per-job state goes with the job's last pod and group (issue 12, no leaks)."""
    store = ExporterStore()
    for round_ in range(3):
        for j in range(200):
            pod = objects.full_pod()
            pod["metadata"]["name"] = f"job{j}-w-0"
            pod["metadata"]["uid"] = f"uid-{round_}-{j}"
            pod["metadata"]["labels"]["volcano.sh/job-name"] = f"job{j}-{round_}"
            store.on_pod(ADDED, parse_pod(pod))
        assert len(store._attributions) == 200
        for j in range(200):
            pod = objects.full_pod()
            pod["metadata"]["name"] = f"job{j}-w-0"
            store.on_pod(DELETED, parse_pod(pod))
        assert (len(store._attributions), len(store._pod_state), len(store._group_pods)) == (0, 0, 0)
        assert select(scrape(store), "volcano_pod_info") == {}
