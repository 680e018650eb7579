from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import yaml

from tests.exporter.objects import (
    JOB_UID,
    T0,
    T1,
    T2,
    T3,
    full_node,
    full_queue,
    kubeflow_podgroup,
    volcano_pod,
)
from tests.simtools import SHARED
from volcano_monitor.core.fields import parse_timestamp
from volcano_monitor.core.model import (
    Job,
    Termination,
    parse_job,
    parse_node,
    parse_pod,
    parse_podgroup,
    parse_queue,
)
from volcano_monitor.core.podrequests import res_add, res_dict, res_from, res_get, res_max, res_scale, res_sum

EXAMPLES = SHARED / "volcano" / "examples"
GI = 1024**3
MI = 1024**2


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def load_examples() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


# ------------------------------------------------------------------------------------ examples


def test_examples_are_present() -> None:
    kinds = {doc["kind"] for _, doc in load_examples()}
    assert kinds == {"Job", "Queue"}


@pytest.mark.parametrize(("name", "doc"), load_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_example_parses_without_problems(name: str, doc: dict[str, Any]) -> None:
    view = parse_job(doc) if doc["kind"] == "Job" else parse_queue(doc)
    assert view.problems == ()
    assert view.name == doc["metadata"]["name"]


def examples_by_name() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in load_examples()}


def test_example_job_yaml() -> None:
    job = parse_job(examples_by_name()["test-job"])
    assert job.queue == "default"
    assert job.scheduler_name == "volcano"
    assert job.min_available == 3
    assert job.max_retry == 5
    assert [(t.name, t.replicas, t.min_available) for t in job.tasks] == [("default-nginx", 6, 6)]
    assert job.tasks[0].requests == (("cpu", 1.0),)
    assert job.requests == (("cpu", 6.0),)
    assert job.phase == "" and job.start_time is None and job.finish_time is None
    assert job.podgroup == "test-job"  # no uid yet


def test_example_jobs_requests_and_defaults() -> None:
    docs = examples_by_name()
    assert parse_job(docs["mindspore-cpu"]).requests == (("cpu", 8.0),)
    assert parse_job(docs["eng-prod-job"]).requests == (("cpu", 3.0),)
    assert parse_job(docs["eng-prod-job"]).queue == "root-eng-prod"
    mpi = parse_job(docs["lm-mpi-job"])
    assert mpi.max_retry == 3  # CRD default
    assert mpi.queue == "default"  # CRD default
    assert [t.replicas for t in mpi.tasks] == [1, 2]
    assert mpi.requests == ()
    paddle = parse_job(docs["ctr-volcano"])
    assert res_dict(paddle.requests) == {
        "cpu": 4.0,
        "memory": 4 * 100e6,
        "ephemeral-storage": 2 * GI + 2 * 10 * GI,
    }
    assert res_dict(paddle.tasks[0].requests) == {"cpu": 1.0, "memory": 100e6, "ephemeral-storage": GI}


def test_example_queues() -> None:
    docs = examples_by_name()
    test = parse_queue(docs["test"])
    assert (test.weight, test.reclaimable, test.capability, test.parent) == (1, False, (("cpu", 2.0),), "root")
    # The `volcano.sh/hierarchy` annotations are ignored by v1.12 (recorded): each is a child of root.
    for name in ["root-eng-prod", "root-eng-dev", "root-sci-prod", "root-sci-dev"]:
        q = parse_queue(docs[name])
        assert (q.weight, q.reclaimable, q.parent) == (1, None, "root")
    root = parse_queue({"metadata": {"name": "root"}, "spec": {}})
    assert root.parent == ""


# ---------------------------------------------------------------------------------------- Pod


def test_volcano_pod() -> None:
    pod = parse_pod(volcano_pod())
    assert pod.problems == ()
    assert (pod.namespace, pod.name, pod.node_name, pod.phase) == (
        "ml",
        "train-worker-1",
        "gpu-node-7",
        "Running",
    )
    assert (pod.job_name, pod.task, pod.task_index, pod.queue) == ("train", "worker", 1, "research")
    assert pod.podgroup == f"train-{JOB_UID}"
    assert (pod.owner_kind, pod.owner_name, pod.job_kind) == ("Job", "train", "Job")
    assert pod.is_volcano
    assert pod.creation_timestamp == ts("2024-05-01T10:00:00+00:00")
    assert pod.start_time == ts("2024-05-01T10:00:02+00:00")
    # a whole GPU: its physical share (core.gpushare) is the same 1, in requests only
    assert pod.requests == (("cpu", 4.0), ("memory", 16.0 * GI), ("nvidia.com/gpu", 1.0), ("physical-gpu", 1.0))
    assert pod.limits == (("cpu", 8.0), ("memory", 16.0 * GI), ("nvidia.com/gpu", 1.0))
    assert pod.restart_count == 0 and pod.terminations == ()
    assert not hasattr(pod, "__dict__")  # slots: the exporter keeps ~100k of these


def test_pod_keys_only_in_annotations_or_only_in_labels() -> None:
    raw = volcano_pod()
    raw["metadata"]["labels"] = {}
    pod = parse_pod(raw)
    assert (pod.job_name, pod.task, pod.task_index, pod.queue) == ("train", "worker", 1, "research")
    raw = volcano_pod()
    raw["metadata"]["annotations"] = {}
    pod = parse_pod(raw)
    assert (pod.job_name, pod.queue, pod.podgroup) == ("train", "research", "")


def test_kubeflow_pod_with_only_group_annotation() -> None:
    raw = {
        "metadata": {
            "name": "bert-worker-0",
            "namespace": "nlp",
            "uid": "u1",
            "annotations": {"scheduling.k8s.io/group-name": "bert"},
            "labels": {
                "training.kubeflow.org/job-name": "bert",
                "training.kubeflow.org/replica-type": "worker",
            },
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert", "controller": True}
            ],
        },
        "spec": {"schedulerName": "volcano", "containers": [{"name": "pytorch"}]},
        "status": {"phase": "Pending"},
    }
    pod = parse_pod(raw)
    assert pod.problems == ()
    assert (pod.podgroup, pod.job_name, pod.queue, pod.task) == ("bert", "", "", "")
    assert (pod.owner_kind, pod.owner_name, pod.job_kind) == ("PyTorchJob", "bert", "")
    assert pod.is_volcano
    assert pod.requests == () and pod.creation_timestamp is None


def test_pod_with_volcano_scheduling_keys_and_plain_pod() -> None:
    raw = {
        "metadata": {
            "name": "p",
            "namespace": "n",
            "annotations": {
                "scheduling.volcano.sh/queue-name": "batch",
                "scheduling.volcano.sh/group-name": "pg-1",
            },
        },
        "spec": {"schedulerName": "default-scheduler"},
    }
    pod = parse_pod(raw)
    assert (pod.queue, pod.podgroup, pod.is_volcano) == ("batch", "pg-1", True)
    plain = parse_pod({"metadata": {"name": "web", "namespace": "n"}, "spec": {"schedulerName": "default-scheduler"}})
    assert not plain.is_volcano
    assert parse_pod({"metadata": {"name": "x"}, "spec": {"schedulerName": "volcano"}}).is_volcano


def test_pod_restarts_and_terminations() -> None:
    raw = volcano_pod()
    raw["status"] = {
        "phase": "Running",
        "initContainerStatuses": [
            {
                "name": "fetch",
                "restartCount": 2,
                "state": {"terminated": {"reason": "Completed", "exitCode": 0}},
            }
        ],
        "containerStatuses": [
            {
                "name": "main",
                "restartCount": 3,
                "state": {"running": {}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
            },
            {
                "name": "sidecar",
                "restartCount": 1,
                "state": {"terminated": {"reason": "Error", "exitCode": 1}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 2}},
            },
        ],
    }
    pod = parse_pod(raw)
    assert pod.problems == ()
    assert pod.restart_count == 6
    assert pod.terminations == (
        Termination("fetch", "Completed", 0, True),
        Termination("main", "OOMKilled", 137, False),
        Termination("sidecar", "Error", 2, False),
        Termination("sidecar", "Error", 1, True),
    )


def test_pod_status_reason_for_kubelet_rejection() -> None:
    raw = volcano_pod()
    raw["status"] = {"phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected"}
    pod = parse_pod(raw)
    assert (pod.phase, pod.reason) == ("Failed", "OutOfcpu")


# ------------------------------------------------------------------------- effective requests


def spec_requests(spec: dict[str, Any]) -> tuple[dict[str, float], dict[str, float], tuple[str, ...]]:
    pod = parse_pod({"metadata": {"name": "p"}, "spec": spec})
    return res_dict(pod.requests), res_dict(pod.limits), pod.problems


def c(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def test_requests_sum_of_containers() -> None:
    reqs, lims, probs = spec_requests(
        {"containers": [c("a", {"cpu": "500m", "memory": "1Gi"}), c("b", {"cpu": "1500m"}, {"cpu": "2"})]}
    )
    assert probs == ()
    assert reqs == {"cpu": 2.0, "memory": GI}
    assert lims == {"cpu": 2.0}


def test_init_container_larger_than_sum() -> None:
    reqs, _, _ = spec_requests(
        {
            "initContainers": [c("init", {"cpu": "3", "memory": "512Mi"})],
            "containers": [c("a", {"cpu": "1", "memory": "1Gi"}), c("b", {"cpu": "1", "memory": "1Gi"})],
        }
    )
    assert reqs == {"cpu": 3.0, "memory": 2.0 * GI}


def test_sidecar_init_containers() -> None:
    spec = {
        "initContainers": [
            c("mesh", {"cpu": "500m", "memory": "100Mi"}, restartPolicy="Always"),
            c("migrate", {"cpu": "2", "memory": "50Mi"}),
            c("logs", {"cpu": "250m"}, restartPolicy="Always"),
        ],
        "containers": [c("main", {"cpu": "1", "memory": "1Gi"})],
    }
    reqs, _, _ = spec_requests(spec)
    # regular + sidecars: cpu 1 + 0.5 + 0.25 = 1.75; init "migrate" + the sidecar started before it: 2.5
    assert reqs == {"cpu": 2.5, "memory": GI + 100 * MI}
    spec["containers"] = [c("main", {"cpu": "3"})]
    reqs, _, _ = spec_requests(spec)
    assert reqs == {"cpu": 3.75, "memory": 150 * MI}  # memory: migrate 50Mi + mesh 100Mi > mesh 100Mi


def test_limits_only_container_gets_request_equal_to_limit() -> None:
    reqs, lims, _ = spec_requests(
        {
            "containers": [
                c("gpu", None, {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}),
                c("mixed", {"cpu": "100m"}, {"cpu": "1", "memory": "256Mi"}),
            ]
        }
    )
    assert reqs == {"cpu": 2.1, "memory": GI + 256 * MI, "nvidia.com/gpu": 1.0, "physical-gpu": 1.0}
    assert lims == {"cpu": 3.0, "memory": GI + 256 * MI, "nvidia.com/gpu": 1.0}


def test_overhead_added_to_requests_and_existing_limits() -> None:
    reqs, lims, _ = spec_requests(
        {
            "containers": [c("main", {"cpu": "1"}, {"cpu": "2"})],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        }
    )
    assert reqs == {"cpu": 1.25, "memory": 120.0 * MI}
    assert lims == {"cpu": 2.25}


def test_pod_level_resources_override() -> None:
    reqs, lims, _ = spec_requests(
        {
            "containers": [c("a", {"cpu": "1", "memory": "1Gi"}), c("b", {"cpu": "1"})],
            "resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "8", "memory": "4Gi"}},
        }
    )
    assert reqs == {"cpu": 4.0, "memory": 4.0 * GI}
    assert lims == {"cpu": 8.0, "memory": 4.0 * GI}


def test_job_task_uses_the_same_rule() -> None:
    raw = {
        "metadata": {"name": "j", "namespace": "n", "uid": "u"},
        "spec": {
            "tasks": [
                {
                    "name": "w",
                    "replicas": 3,
                    "template": {
                        "spec": {
                            "initContainers": [c("init", {"cpu": "4"})],
                            "containers": [c("main", None, {"cpu": "1", "memory": "1Gi"})],
                        }
                    },
                },
                {
                    "name": "ps",
                    "replicas": 2,
                    "minAvailable": 1,
                    "template": {"spec": {"containers": [c("m", {"cpu": "1"})]}},
                },
            ]
        },
    }
    job = parse_job(raw)
    assert job.problems == ()
    assert res_dict(job.tasks[0].requests) == {"cpu": 4.0, "memory": GI}
    assert res_dict(job.requests) == {"cpu": 14.0, "memory": 3.0 * GI}
    assert job.min_available == 4  # sum of task minAvailable (Volcano's admission default)
    assert job.podgroup == "j-u"


def test_single_container_memo_does_not_hide_problems() -> None:
    good = {"containers": [c("a", {"cpu": "1"})]}
    assert spec_requests(good) == ({"cpu": 1.0}, {}, ())
    assert spec_requests(good) == ({"cpu": 1.0}, {}, ())  # memo hit
    bad = {"containers": [c("a", {"cpu": True})]}  # type: ignore[dict-item]
    for _ in range(2):
        reqs, _, probs = spec_requests(bad)
        assert reqs == {}
        assert probs == (
            "spec.containers[0].resources.requests.cpu: invalid quantity True: expected string or number, got bool",
        )
    as_int = {"containers": [c("a", {"cpu": 1})]}  # type: ignore[dict-item]
    assert spec_requests(as_int) == ({"cpu": 1.0}, {}, ())


def test_resource_helpers() -> None:
    a = res_from({"memory": 2.0, "cpu": 1.0})
    b = res_from({"cpu": 0.5, "nvidia.com/gpu": 1.0})
    assert a == (("cpu", 1.0), ("memory", 2.0))
    assert res_add(a, b) == (("cpu", 1.5), ("memory", 2.0), ("nvidia.com/gpu", 1.0))
    assert res_max(a, b) == (("cpu", 1.0), ("memory", 2.0), ("nvidia.com/gpu", 1.0))
    assert res_scale(a, 3) == (("cpu", 3.0), ("memory", 6.0))
    assert res_sum([a, b, a]) == (("cpu", 2.5), ("memory", 4.0), ("nvidia.com/gpu", 1.0))
    assert res_get(a, "memory") == 2.0 and res_get(a, "gpu") == 0.0
    assert res_from({"cpu": 1.0, "memory": 2.0}) is a  # shared


# ------------------------------------------------------------------------ Job conditions/status


def job_with(conditions: list[dict[str, Any]], phase: str, **status: Any) -> Job:
    return parse_job(
        {
            "metadata": {"name": "j", "namespace": "n", "uid": "u", "creationTimestamp": T0},
            "spec": {"queue": "q", "tasks": [{"name": "w", "replicas": 2}]},
            "status": {"state": {"phase": phase}, "conditions": conditions, **status},
        }
    )


def test_job_never_started() -> None:
    job = job_with([{"status": "Pending", "lastTransitionTime": T0}], "Pending")
    assert (job.start_time, job.finish_time, job.finish_phase) == (None, None, "")
    assert job.problems == ()


def test_job_failed_after_running() -> None:
    job = job_with(
        [
            {"status": "Pending", "lastTransitionTime": T0},
            {"status": "Running", "lastTransitionTime": T1},
            {"status": "Failed", "lastTransitionTime": T2},
        ],
        "Failed",
        failed=2,
        retryCount=3,
    )
    assert job.start_time == parse_timestamp(T1)
    assert job.finish_time == parse_timestamp(T2)
    assert job.finish_phase == "Failed"
    assert (job.failed, job.retry_count, job.phase) == (2, 3, "Failed")


def test_job_restarting_then_running() -> None:
    job = job_with(
        [
            {"status": "Pending", "lastTransitionTime": T0},
            {"status": "Running", "lastTransitionTime": T1},
            {"status": "Restarting", "lastTransitionTime": T2},
            {"status": "Running", "lastTransitionTime": T3},
        ],
        "Running",
    )
    assert job.start_time == parse_timestamp(T3)
    assert (job.finish_time, job.finish_phase) == (None, "")


def test_job_resumed_after_abort_is_not_finished() -> None:
    job = job_with(
        [
            {"status": "Running", "lastTransitionTime": T1},
            {"status": "Aborted", "lastTransitionTime": T2},
            {"status": "Restarting", "lastTransitionTime": T3},
        ],
        "Restarting",
    )
    assert (job.start_time, job.finish_time) == (None, None)  # the new run has not started


def test_job_start_is_the_first_running_of_the_run() -> None:
    """Volcano v1.12 appends a Running condition on every status write while the job runs."""
    job = job_with(
        [
            {"status": "Pending", "lastTransitionTime": T0},
            {"status": "Pending", "lastTransitionTime": T0},
            {"status": "Running", "lastTransitionTime": T1},
            {"status": "Running", "lastTransitionTime": T2},
            {"status": "Completed", "lastTransitionTime": T3},
        ],
        "Completed",
    )
    assert (job.start_time, job.finish_time) == (parse_timestamp(T1), parse_timestamp(T3))


def test_job_failed_out_of_restarting_keeps_its_last_run() -> None:
    """maxRetry exhausted: Running, Restarting, Pending, Running, Restarting, Failed (recorded)."""
    job = job_with(
        [
            {"status": "Running", "lastTransitionTime": T0},
            {"status": "Restarting", "lastTransitionTime": T1},
            {"status": "Pending", "lastTransitionTime": T1},
            {"status": "Running", "lastTransitionTime": T2},
            {"status": "Running", "lastTransitionTime": T3},
            {"status": "Restarting", "lastTransitionTime": T3},
            {"status": "Failed", "lastTransitionTime": T3},
        ],
        "Failed",
    )
    assert (job.start_time, job.finish_time, job.finish_phase) == (parse_timestamp(T2), parse_timestamp(T3), "Failed")


def test_job_completed_latest_terminal_wins() -> None:
    job = job_with(
        [
            {"status": "Running", "lastTransitionTime": T1},
            {"status": "Completing", "lastTransitionTime": T2},
            {"status": "Terminated", "lastTransitionTime": T2},
            {"status": "Completed", "lastTransitionTime": T3},
        ],
        "Completed",
    )
    assert (job.finish_time, job.finish_phase) == (parse_timestamp(T3), "Completed")


def test_job_status_fields() -> None:
    job = job_with(
        [],
        "Running",
        pending=1,
        running=2,
        succeeded=3,
        failed=4,
        terminating=5,
        unknown=6,
        taskStatusCount={"worker": {"phase": {"Running": 2, "Pending": 1}}, "ps": {"phase": {"Running": 1}}},
    )
    assert (job.pending, job.running, job.succeeded, job.failed, job.terminating, job.unknown) == (
        1,
        2,
        3,
        4,
        5,
        6,
    )
    assert job.task_status_counts == (("ps", (("Running", 1),)), ("worker", (("Pending", 1), ("Running", 2))))
    assert job.creation_timestamp == parse_timestamp(T0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T10:00:00Z", 1714557600.0),
        ("2024-05-01T10:00:00.25Z", 1714557600.25),
        ("2024-05-01T12:00:00.5+02:00", 1714557600.5),
        ("2024-05-01T05:30:00-04:30", 1714557600.0),
        ("2024-05-01T10:00:00.123456789Z", 1714557600.123456789),
        ("2024-05-01", None),
        ("2024-13-01T10:00:00Z", None),
        ("2024-05-01T10:00:00", None),
        ("yesterday", None),
        ("", None),
    ],
)
def test_timestamps(text: str, expected: float | None) -> None:
    assert parse_timestamp(text) == expected


def test_bad_timestamp_is_a_problem() -> None:
    job = job_with([{"status": "Running", "lastTransitionTime": "soon"}], "Running")
    assert job.start_time is None
    assert job.problems == ("status.conditions[0].lastTransitionTime: invalid timestamp 'soon'",)


# --------------------------------------------------------------------- PodGroup, Queue, Node


def test_podgroup_min_resources_quota_keys() -> None:
    """As Volcano v1.12's job controller writes them (recorded): quota-style keys fold into resources."""
    raw = kubeflow_podgroup()
    raw["spec"]["minResources"] = {"count/pods": "3", "cpu": "3", "pods": "3", "requests.cpu": "3",
                                   "requests.memory": "6Gi", "requests.nvidia.com/gpu": "2", "limits.cpu": "9"}
    pg = parse_podgroup(raw)
    assert pg.problems == ()
    assert res_dict(pg.min_resources) == {"cpu": 3.0, "memory": 6.0 * GI, "nvidia.com/gpu": 2.0, "pods": 3.0}


def test_podgroup_of_a_kubeflow_job() -> None:
    pg = parse_podgroup(kubeflow_podgroup())
    assert pg.problems == ()
    assert (pg.namespace, pg.name, pg.uid, pg.creation_timestamp) == ("nlp", "bert", "pg-uid", parse_timestamp(T0))
    assert (pg.job_kind, pg.job_name) == ("PyTorchJob", "bert")  # the controller owner, not the first one
    assert (pg.queue, pg.min_member, pg.priority_class) == ("nlp", 4, "high")
    assert res_dict(pg.min_resources) == {"cpu": 16.0, "memory": 64.0 * GI, "nvidia.com/gpu": 4.0}
    assert (pg.phase, pg.running, pg.succeeded, pg.failed) == ("Pending", 1, 0, 0)
    (cond,) = pg.conditions
    assert (cond.type, cond.status, cond.reason) == ("Unschedulable", "True", "NotEnoughResources")
    assert cond.message == "3/4 tasks in gang unschedulable"
    assert cond.last_transition_time == parse_timestamp(T1)


def test_podgroup_defaults_and_first_owner() -> None:
    pg = parse_podgroup({"metadata": {"name": "j-u", "ownerReferences": [{"kind": "Job", "name": "j"}]}})
    assert (pg.queue, pg.job_kind, pg.job_name, pg.min_member, pg.conditions) == (
        "default",
        "Job",
        "j",
        0,
        (),
    )


def test_queue_full() -> None:
    q = parse_queue(full_queue())
    assert q.problems == ()
    assert (q.name, q.uid, q.parent, q.weight, q.reclaimable) == ("research", "q-uid", "root", 4, True)
    assert (q.priority, q.state) == (10, "Open")
    assert res_dict(q.capability) == {"cpu": 100.0, "memory": 400.0 * GI, "nvidia.com/gpu": 8.0}
    assert q.deserved == (("cpu", 50.0),)
    assert res_dict(q.guarantee) == {"cpu": 10.0, "memory": 10.0 * GI}
    assert res_dict(q.allocated) == {"cpu": 12.5, "memory": 32.0 * GI, "pods": 7.0}
    assert (q.pending, q.running, q.inqueue, q.completed, q.unknown) == (1, 2, 3, 4, 5)


def test_node() -> None:
    node = parse_node(full_node())
    assert node.problems == ()
    assert (node.name, node.uid) == ("gpu-node-7", "n-uid")
    assert node.labels == {"nvidia.com/gpu.product": "A100", "zone": "a"}
    assert res_get(node.allocatable, "cpu") == 63.5 and res_get(node.capacity, "nvidia.com/gpu") == 8.0
    assert (node.ready, node.unschedulable, node.taints) == (True, True, 2)
    raw = {"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    not_ready = parse_node(raw)
    assert (not_ready.ready, not_ready.unschedulable, not_ready.taints) == (False, False, 0)


# ------------------------------------------------------------------------------ wrong types


def test_documented_problem_strings() -> None:
    job = parse_job({"spec": {"tasks": [{"name": "a", "replicas": 1}, {"name": "b", "replicas": "2"}]}})
    assert job.problems == ("spec.tasks[1].replicas: expected integer, got str",)
    assert [t.replicas for t in job.tasks] == [1, 0]
    raw = volcano_pod()
    raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "abc"
    pod = parse_pod(raw)
    assert pod.problems == ("spec.containers[0].resources.requests.cpu: invalid quantity 'abc'",)
    assert pod.requests == (("cpu", 8.0), ("memory", 16.0 * GI), ("nvidia.com/gpu", 1.0),  # limit as request
                            ("physical-gpu", 1.0))


@pytest.mark.parametrize("parser", [parse_job, parse_podgroup, parse_queue, parse_pod, parse_node])
@pytest.mark.parametrize("raw", [None, [], [1, 2], "pod", 3, 2.5, True])
def test_non_object_top_level(parser: Callable[[object], Any], raw: object) -> None:
    view = parser(raw)
    assert view.problems == (f"(root): expected object, got {type(raw).__name__}",)
    assert view.name == ""


def test_huge_labels_and_unicode_survive() -> None:
    raw = volcano_pod()
    md = raw["metadata"]
    md["name"] = "作业-ワーカー-🚀"
    md["namespace"] = "équipe"
    md["labels"] = {f"label-{i}": "v" * 100 for i in range(5000)}
    md["labels"]["volcano.sh/job-name"] = "训练" * 10_000
    md["annotations"]["big"] = "x" * 1_000_000
    md["annotations"]["volcano.sh/queue-name"] = "队列"
    pod = parse_pod(raw)
    assert pod.problems == ()
    assert (pod.name, pod.namespace, pod.job_name, pod.queue) == (
        "作业-ワーカー-🚀",
        "équipe",
        "训练" * 10_000,
        "队列",
    )
    node = parse_node({"metadata": {"name": "ノード", "labels": {"ключ": "значение", "k": "v" * 100_000}}})
    assert node.labels == {"ключ": "значение", "k": "v" * 100_000}


def test_amounts_that_keep_changing_stay_out_of_the_shared_table() -> None:
    """Queues' status.allocated and every sum were entries of the shared table: a new one per queue
    update or per sum, so the table grew for a day (up to 17 MB) before it was cleared."""
    from volcano_monitor.core import podrequests

    requests = res_from({"cpu": 2.0, "memory": 4.0})
    before = len(podrequests._SHARED)
    for i in range(1000):
        queue = parse_queue({"metadata": {"name": "q", "uid": "u", "resourceVersion": str(i)},
                             "status": {"allocated": {"cpu": f"{i}m", "memory": f"{i}Mi"}}})
        assert res_get(queue.allocated, "cpu") == i / 1000
        assert res_add(requests, res_from({"cpu": i + 0.5}, share=False))[0] == ("cpu", i + 2.5)
        res_sum([requests, (("cpu", float(i)),)])
        res_max(requests, (("cpu", float(i)),))
        res_scale(requests, i + 0.25)
    assert len(podrequests._SHARED) == before
    assert res_from({"memory": 4.0, "cpu": 2.0}) is requests  # requests from specs are still shared
