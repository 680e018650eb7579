"""What the watchdog knows of the cluster right now, built from informer events: which job, task,
queue and workload each pod belongs to (so a usage sample can be attributed), and each queue's
capability and allocation (for the API). Mutated only by the watchdog's worker thread; readers
from other threads take the lock."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from exporter.kube.informer import DELETED
from exporter.model import Job, Pod, PodGroup, Queue, res_dict, res_get
from exporter.podrequests import Resources
from watchdog.usage.samples import PodInfo
from watchdog.workload import CRON_OWNER_KIND, workload_name


def gpu_count(resources: Resources) -> float:
    """GPUs of any vendor (`nvidia.com/gpu`, `amd.com/gpu`, ...)."""
    return sum(amount for name, amount in resources if name.endswith("/gpu"))


@dataclass(frozen=True, slots=True)
class GroupOwner:
    uid: str
    queue: str
    owner_kind: str
    owner_name: str


class ClusterIndex:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.job_uids: dict[tuple[str, str], str] = {}
        self.job_workloads: dict[tuple[str, str], str] = {}  # Jobs a CronJob created: the CronJob's name
        self.groups: dict[tuple[str, str], GroupOwner] = {}
        self.pods: dict[tuple[str, str], Pod] = {}
        self.pod_workloads: dict[tuple[str, str], str] = {}  # the `workload_label` value, where pods carry it
        self.queues: dict[str, Queue] = {}

    def on_job(self, event_type: str, job: Job) -> None:
        with self.lock:
            key = (job.namespace, job.name)
            if event_type == DELETED:
                self.job_uids.pop(key, None)
                self.job_workloads.pop(key, None)
            else:
                self.job_uids[key] = job.uid
                if job.owner_kind == CRON_OWNER_KIND and job.owner_name:
                    self.job_workloads[key] = workload_name(job.name, owner_kind=job.owner_kind,
                                                            owner_name=job.owner_name)
                else:
                    self.job_workloads.pop(key, None)

    def on_podgroup(self, event_type: str, group: PodGroup) -> None:
        with self.lock:
            if event_type == DELETED:
                self.groups.pop((group.namespace, group.name), None)
            else:
                self.groups[(group.namespace, group.name)] = GroupOwner(
                    group.uid, group.queue, group.job_kind, group.job_name)

    def on_pod(self, event_type: str, pod: Pod, workload_label_value: str = "") -> None:
        key = (pod.namespace, pod.name)
        with self.lock:
            if event_type == DELETED:
                self.pods.pop(key, None)
                self.pod_workloads.pop(key, None)
                return
            self.pods[key] = pod
            if workload_label_value:
                self.pod_workloads[key] = workload_label_value
            else:
                self.pod_workloads.pop(key, None)

    def on_queue(self, event_type: str, queue: Queue) -> None:
        with self.lock:
            if event_type == DELETED:
                self.queues.pop(queue.name, None)
            else:
                self.queues[queue.name] = queue

    def pod_info(self, namespace: str, pod: str) -> PodInfo | None:
        """Attribution of a pod: a Volcano Job's pod through its labels, a Kubeflow/Spark pod through
        its PodGroup (queue from the group, job = the group's owner, run uid = the group's uid)."""
        with self.lock:
            view = self.pods.get((namespace, pod))
            if view is None:
                return None
            group = self.groups.get((namespace, view.podgroup)) if view.podgroup else None
            job_name, queue = view.job_name, view.queue
            if job_name:
                job_uid = self.job_uids.get((namespace, job_name), "")
            elif group is not None:
                job_name, job_uid = group.owner_name or view.podgroup, group.uid
            else:
                job_uid = ""
            if not queue and group is not None:
                queue = group.queue
            labelled = self.pod_workloads.get((namespace, pod)) or self.job_workloads.get((namespace, job_name))
        return PodInfo(
            job_uid=job_uid,
            job_name=job_name,
            namespace=namespace,
            workload=labelled or (workload_name(job_name) if job_name else ""),
            task=view.task,
            queue=queue,
            phase=view.phase,
            cpu_request_cores=res_get(view.requests, "cpu"),
            memory_request_bytes=res_get(view.requests, "memory"),
            gpus=gpu_count(view.requests),
        )

    def live_run_uids(self) -> set[str]:
        """UIDs of the runs that exist now: Volcano Jobs, and PodGroups (Kubeflow and other owners)."""
        with self.lock:
            return set(self.job_uids.values()) | {g.uid for g in self.groups.values()}

    def queue_snapshot(self) -> list[tuple[str, str, dict[str, float], dict[str, float], str]]:
        """(name, parent, capability, allocated, state) per queue."""
        with self.lock:
            return [(q.name, q.parent, res_dict(q.capability), res_dict(q.allocated), q.state)
                    for q in sorted(self.queues.values(), key=lambda q: q.name)]
