"""Attribution of pods to runs, tasks, queues and workloads (what a usage sample is charged to)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.exporter import objects
from volcano_monitor.core.kube.informer import ADDED, DELETED
from volcano_monitor.core.model import parse_job, parse_pod, parse_podgroup
from volcano_monitor.watchdog.config import load
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.engine import make_engine


def kubeflow_pod() -> dict[str, Any]:
    return {"metadata": {"name": "bert-worker-0", "namespace": "nlp", "uid": "p1", "labels": {"team": "nlp-x"},
                         "annotations": {"scheduling.k8s.io/group-name": "bert"}},
            "spec": {"schedulerName": "volcano",
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": 1}}}]},
            "status": {"phase": "Running"}}


def test_volcano_job_pods_are_charged_to_their_job_run() -> None:
    index = ClusterIndex()
    pod = parse_pod(objects.volcano_pod())
    index.on_job(ADDED, parse_job({**objects.full_job(), "metadata": {**objects.full_job()["metadata"],
                                                                      "name": pod.job_name, "namespace": pod.namespace,
                                                                      "uid": "run-uid"}}))
    index.on_pod(ADDED, pod)
    info = index.pod_info(pod.namespace, pod.name)
    assert info is not None and info.job_uid == "run-uid" and info.job_name == pod.job_name
    assert info.queue == pod.queue and info.task == pod.task and info.workload
    assert index.pod_info(pod.namespace, "unknown") is None


def test_pods_of_a_cronjob_run_are_charged_to_the_cronjob_workload() -> None:
    index = ClusterIndex()
    pod = parse_pod(objects.volcano_pod())
    meta = {**objects.full_job()["metadata"], "name": pod.job_name, "namespace": pod.namespace, "uid": "run-uid",
            "ownerReferences": [{"kind": "CronJob", "name": "nightly-2024", "uid": "c", "controller": True}]}
    index.on_job(ADDED, parse_job({**objects.full_job(), "metadata": meta}))
    index.on_pod(ADDED, pod)
    info = index.pod_info(pod.namespace, pod.name)
    assert info is not None and info.workload == "nightly-2024" and info.job_name == pod.job_name
    index.on_job(DELETED, parse_job({**objects.full_job(), "metadata": meta}))
    info = index.pod_info(pod.namespace, pod.name)
    assert info is not None and info.workload != "nightly-2024"


def test_kubeflow_pods_are_charged_to_their_podgroup_and_its_owner() -> None:
    index = ClusterIndex()
    index.on_podgroup(ADDED, parse_podgroup(objects.kubeflow_podgroup()))
    index.on_pod(ADDED, parse_pod(kubeflow_pod()))
    info = index.pod_info("nlp", "bert-worker-0")
    assert info is not None
    assert (info.job_uid, info.job_name, info.queue, info.workload, info.gpus) == ("pg-uid", "bert", "nlp", "bert", 1)
    index.on_pod(DELETED, parse_pod(kubeflow_pod()))
    assert index.pod_info("nlp", "bert-worker-0") is None


def test_a_configured_workload_label_names_the_workload(tmp_path: Path) -> None:
    settings = load(None, environ={}, database_url=f"sqlite:///{tmp_path / 'w.db'}",
                    recommendations={"workload_label": "team"})
    watchdog = Watchdog(settings, make_engine(settings.database_url), None)
    pod, value = watchdog.pod_view(kubeflow_pod())
    assert value == "nlp-x"
    index = ClusterIndex()
    index.on_podgroup(ADDED, parse_podgroup(objects.kubeflow_podgroup()))
    index.on_pod(ADDED, pod, value)
    info = index.pod_info("nlp", "bert-worker-0")
    assert info is not None and info.workload == "nlp-x"
    unlabelled = Watchdog(load(None, environ={}, database_url=settings.database_url), watchdog.engine, None)
    assert unlabelled.pod_view(kubeflow_pod())[1] == ""
