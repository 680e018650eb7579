"""What the watchdog knows of the cluster right now, built from informer events: which job, task,
queue and workload each pod belongs to (so a usage sample can be attributed), each queue's
capability and allocation (for the API), and the live Jobs and PodGroups by UID (why one is pending,
`core.pending`, for the API) and its place in its queue (`core.queueorder`, with the PriorityClasses).
Mutated only by the watchdog's worker thread; readers from other threads take the lock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from volcano_monitor.core.gpufacts import HAMI_COUNT, HAMI_MEMORY, VGPU_COUNT, VGPU_MEMORY
from volcano_monitor.core.gpushare import container_share, physical_gpus
from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.model import Job, Pod, PodGroup, Queue, res_dict, res_get
from volcano_monitor.core.pending import Explanation, explain, group_waiting, is_job_group, job_waiting
from volcano_monitor.core.podrequests import Resources
from volcano_monitor.core.queueorder import Priorities, PriorityClass, rank
from volcano_monitor.watchdog.state.samples import PodInfo
from volcano_monitor.watchdog.state.workload import CRON_OWNER_KIND, workload_name

# (vGPU count, vGPU memory in MiB) of HAMi and of Volcano's vGPU
_MIB_VGPUS = ((HAMI_COUNT, HAMI_MEMORY), (VGPU_COUNT, VGPU_MEMORY))


def pod_gpus(pod: Pod, card_memory: Callable[[str], float | None] | None = None) -> float:
    """The pod's physical GPUs; with the memory of the cards of its node (`card_memory`: node name -> MiB,
    None unknown), a pod holding one vGPU whose memory is asked in MiB (`nvidia.com/gpumem`,
    `volcano.sh/vgpu-memory`) is read again against that card: parsed without its node, its memory share
    could only be guessed (`core.gpushare.container_share`). Only for one vGPU: the pod's requests are summed
    over its containers, and with several vGPUs the MiB per vGPU cannot be told apart again. The node is
    asked only for such a pod."""
    requests = pod.requests
    if card_memory is not None and pod.node_name:
        for count, memory in _MIB_VGPUS:
            if res_get(requests, memory) > 0 and res_get(requests, count) == 1:
                card = card_memory(pod.node_name)
                if card is not None and card > 0:
                    return container_share(requests, pod.limits, card_memory_mib=card).gpus
                break
    return physical_gpus(requests)


def gpu_resource(resources: Resources) -> str:
    """The GPU resource a pod's GPUs are priced by (`watchdog.state.prices`): its `*/gpu` resource, else
    `nvidia.com/gpu` for a pod that holds GPUs through another name (Volcano's `volcano.sh/vgpu-number`:
    NVIDIA cards), "" for a pod without GPUs."""
    named = next((name for name, amount in resources if name.endswith("/gpu") and amount > 0), "")
    return named or ("nvidia.com/gpu" if physical_gpus(resources) > 0 else "")


@dataclass(frozen=True, slots=True)
class GroupOwner:
    uid: str
    queue: str
    owner_kind: str
    owner_name: str


@dataclass(frozen=True, slots=True)
class WhyPending:
    """A live Job or PodGroup and, while it waits, why (None once it runs or has finished)."""

    uid: str
    kind: str  # "Job" for a Volcano Job; for a PodGroup its owner's kind (PyTorchJob, ...) or "PodGroup"
    namespace: str
    job_name: str
    phase: str
    explanation: Explanation | None
    place: QueuePlace | None = None  # while it waits and has a PodGroup (the scheduler knows no job without)


AHEAD_LIMIT = 100  # jobs listed ahead of one, nearest the head of the queue first


@dataclass(frozen=True, slots=True)
class Ahead:
    """A job the scheduler takes before this one: its PodGroup's priority and gang request."""

    namespace: str
    job_name: str  # the owner's name (a Volcano Job's, a PyTorchJob's, ...), else the PodGroup's
    podgroup: str
    priority_class: str
    priority: int
    min_resources: Resources  # the PodGroup's spec.minResources: what admitting it takes from the queue


@dataclass(frozen=True, slots=True)
class QueuePlace:
    queue: str
    position: int  # 1 = taken next
    waiting: int  # waiting PodGroups in the queue, this one included
    priority: int
    ahead: tuple[Ahead, ...]  # the first AHEAD_LIMIT of the position - 1 ahead, in order


class ClusterIndex:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.job_uids: dict[tuple[str, str], str] = {}
        self.job_workloads: dict[tuple[str, str], str] = {}  # Jobs a CronJob created: the CronJob's name
        self.groups: dict[tuple[str, str], GroupOwner] = {}
        self.pods: dict[tuple[str, str], Pod] = {}
        self.pod_workloads: dict[tuple[str, str], str] = {}  # the `workload_label` value, where pods carry it
        self.queues: dict[str, Queue] = {}
        # The views the observer keeps anyway (`Observer.runs`): only references, for `why`.
        self.jobs: dict[str, Job] = {}  # by uid
        self.group_views: dict[tuple[str, str], PodGroup] = {}
        self.group_keys: dict[str, tuple[str, str]] = {}  # PodGroup uid -> (namespace, name)
        self.priorities = Priorities()  # the cluster's PriorityClasses: the first key of the queue order
        # Memory of one GPU card of a node, MiB (None: unknown), for the shares of pods asking vGPU memory in
        # MiB (`pod_gpus`); the runtime sets it to `NodeTable.card_memory_mib`. Called without the lock held.
        self.card_memory: Callable[[str], float | None] | None = None

    def on_job(self, event_type: str, job: Job) -> None:
        with self.lock:
            key = (job.namespace, job.name)
            if event_type == DELETED:
                self.job_uids.pop(key, None)
                self.job_workloads.pop(key, None)
                self.jobs.pop(job.uid, None)
            else:
                self.job_uids[key] = job.uid
                self.jobs[job.uid] = job
                if job.owner_kind == CRON_OWNER_KIND and job.owner_name:
                    self.job_workloads[key] = workload_name(job.name, owner_kind=job.owner_kind,
                                                            owner_name=job.owner_name)
                else:
                    self.job_workloads.pop(key, None)

    def on_podgroup(self, event_type: str, group: PodGroup) -> None:
        with self.lock:
            key = (group.namespace, group.name)
            if event_type == DELETED:
                self.groups.pop(key, None)
                self.group_views.pop(key, None)
                self.group_keys.pop(group.uid, None)
            else:
                self.groups[key] = GroupOwner(group.uid, group.queue, group.job_kind, group.job_name)
                self.group_views[key] = group
                self.group_keys[group.uid] = key

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

    def on_priority_class(self, event_type: str, priority_class: PriorityClass) -> None:
        with self.lock:
            self.priorities.on_class(priority_class, event_type == DELETED)

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
            gpus=pod_gpus(view, self.card_memory),
            node=view.node_name,
            gpu_resource=gpu_resource(view.requests),
        )

    def queue_path(self, name: str) -> str:
        """The queue and its ancestors, root first ("root/eng/team-a"), as far as the Queue objects say
        (a queue not known yet: its name alone). Stored with each ledger row, so a report rolls a parent's
        children into it from the database alone, after the queues are gone too."""
        with self.lock:
            path = [name]
            queue = self.queues.get(name)
            while queue is not None and queue.parent and queue.parent not in path:
                path.append(queue.parent)
                queue = self.queues.get(queue.parent)
        return "/".join(reversed(path)) if name else ""

    def queue_paths_under(self, name: str) -> dict[str, str]:
        """`queue_path` of `name` and of every known queue below it: what a change of `name`'s place in the
        tree (a new queue, a new parent) changes."""
        with self.lock:
            names = list(self.queues)
        paths = {queue: self.queue_path(queue) for queue in names}
        return {queue: path for queue, path in paths.items() if name in path.split("/")}

    def live_run_uids(self) -> set[str]:
        """UIDs of the runs that exist now: Volcano Jobs, and PodGroups (Kubeflow and other owners)."""
        with self.lock:
            return set(self.job_uids.values()) | {g.uid for g in self.groups.values()}

    def queue_snapshot(self) -> list[tuple[str, str, dict[str, float], dict[str, float], str, dict[str, float]]]:
        """(name, parent, capability, allocated, state, deserved) per queue, in `QueueView`'s order."""
        with self.lock:
            return [(q.name, q.parent, res_dict(q.capability), res_dict(q.allocated), q.state, res_dict(q.deserved))
                    for q in sorted(self.queues.values(), key=lambda q: q.name)]

    def why(self, uid: str) -> WhyPending | None:
        """Why the live Job (or PodGroup) with this UID waits; None when the watchdog knows no such object.
        A Volcano Job's PodGroup is answered for its Job. A Job whose PodGroup exists and no longer waits
        has been placed: no explanation, like the metric."""
        with self.lock:
            job = self.jobs.get(uid)
            key = self.group_keys.get(uid)
            group = self.group_views.get(key) if key is not None else None
            if job is None and group is not None and is_job_group(group):
                job = self.jobs.get(self.job_uids.get((group.namespace, group.owner_name), ""))
            if job is not None:
                group = self.group_views.get((job.namespace, job.podgroup))
                waiting = job_waiting(job) and (group is None or group_waiting(group))
                queue = group.queue if group is not None else job.queue
                return WhyPending(job.uid, "Job", job.namespace, job.name, job.phase,
                                  explain(queue, self.queues, group, job) if waiting else None,
                                  self._place(group) if waiting and group is not None else None)
            if group is None:
                return None
            waiting = group_waiting(group)
            return WhyPending(uid, group.owner_kind or "PodGroup", group.namespace, group.owner_name or group.name,
                              group.phase, explain(group.queue, self.queues, group) if waiting else None,
                              self._place(group) if waiting else None)

    def _place(self, group: PodGroup) -> QueuePlace | None:
        """Where the scheduler takes `group` among its queue's waiting PodGroups (lock held). One pass over
        the PodGroups and a sort of one queue's waiting ones: a request's cost, nothing kept."""
        places = rank([g for g in self.group_views.values() if g.queue == group.queue and group_waiting(g)],
                      self.priorities)
        mine = next((p for p in places if p.group.uid == group.uid), None)
        if mine is None:
            return None
        ahead = tuple(Ahead(p.group.namespace, p.group.owner_name or p.group.name, p.group.name,
                            p.group.priority_class, p.priority, p.group.min_resources)
                      for p in places[:min(mine.position - 1, AHEAD_LIMIT)])
        return QueuePlace(group.queue, mine.position, mine.size, mine.priority, ahead)
