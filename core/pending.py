"""Why a Job (or a PodGroup of another operator) is not running: one explanation from a fixed list.

Pure functions of the views the exporter and the watchdog both hold (Job, PodGroup, the Queues), so
the metric `volcano_job_pending_reason` and the watchdog's `GET /api/v1/jobs/{uid}/why` say the same.

What the scheduler says is often nothing: a gang bigger than the cluster, or one its queue cannot
admit, keeps a PodGroup `Pending` with no condition at all (DESIGN §3; recorded: `gang-too-big`,
`queue-capability-wait`, where only Events say "queue resource quota insufficient"). So the
explanation is computed here, in this order, the first that holds wins:

1. `queue_missing`: the job's queue, or a parent on its path to `root`, does not exist.
2. `queue_closed`: a queue on the path is `Closed` or `Closing` (it admits nothing new).
3. `min_available_above_pods`: the Job's minAvailable is more than all its tasks' replicas, so the
   gang can never be complete.
4. Not admitted yet (PodGroup `Pending` or not created): walk the path from the job's queue up to the
   root, comparing the PodGroup's `spec.minResources` with each queue's `spec.capability` —
   `queue_too_small` (capability below the request: never fits), `queue_capability` (allocated +
   request above capability: waits for the queue to free) — and at `root` with the cluster:
   `cluster_too_small` (allocatable below the request) and `cluster_full` (allocated + request above
   allocatable). Volcano v1.12 writes the cluster's allocatable into root's `spec.deserved` and root's
   `status.allocated` sums every queue (recorded); without them the caller may pass the nodes' sum.
   An admitted (`Inqueue`) group is past these checks, and its own running pods count in its queue's
   `allocated`: the walk would blame its queue wrongly, so it is skipped.
5. `topology_fragmented`: a gang whose PodGroup asks `networkTopology` mode `hard` (highestTierAllowed N,
   or highestTierName) would fit the cluster's free GPUs spread over all nodes, but inside no HyperNode of
   tier <= N (`core.topology.topology_verdict`). Only a caller that knows the nodes, HyperNodes and every pod
   can say it (the watchdog; an unsharded exporter, exporter/topology.py): `with_topology` puts it in place
   of the reasons below it.
6. `unschedulable`: the scheduler's `Unschedulable` condition (reason and message as it wrote them,
   e.g. `NotEnoughResources`).
7. `waiting`: none of the above (not seen by the scheduler yet, or pods being created).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from volcano_monitor.core.model import NO_RESOURCES, ROOT_QUEUE, Job, PodGroup, Queue, Resources, res_get
from volcano_monitor.core.quantity import resource_label_and_unit

QUEUE_MISSING = "queue_missing"
QUEUE_CLOSED = "queue_closed"
MIN_AVAILABLE_ABOVE_PODS = "min_available_above_pods"
QUEUE_TOO_SMALL = "queue_too_small"
QUEUE_CAPABILITY = "queue_capability"
CLUSTER_TOO_SMALL = "cluster_too_small"
CLUSTER_FULL = "cluster_full"
TOPOLOGY_FRAGMENTED = "topology_fragmented"
UNSCHEDULABLE = "unschedulable"
WAITING = "waiting"

# The fixed list, in the order they are tried, with what each means (the metric's HELP and the docs).
REASONS: dict[str, str] = {
    QUEUE_MISSING: "the job's queue or a parent on its path does not exist",
    QUEUE_CLOSED: "a queue on the path is Closed or Closing",
    MIN_AVAILABLE_ABOVE_PODS: "minAvailable is more than the pods of all tasks, the gang is never complete",
    QUEUE_TOO_SMALL: "a queue's capability is below the gang's minResources, it never fits",
    QUEUE_CAPABILITY: "a queue's allocated plus the gang's minResources exceed its capability",
    CLUSTER_TOO_SMALL: "the cluster's allocatable is below the gang's minResources, it never fits",
    CLUSTER_FULL: "the cluster's allocated plus the gang's minResources exceed its allocatable",
    TOPOLOGY_FRAGMENTED: "a hard network-topology gang fits the cluster's free GPUs but no HyperNode of an "
                         "allowed tier (the watchdog's /why and GangUnschedulable; the exporter only when neither "
                         "sharded nor limited to namespaces, judged every ~10 s)",
    UNSCHEDULABLE: "the scheduler's Unschedulable PodGroup condition, e.g. NotEnoughResources",
    WAITING: "none of the above, e.g. not seen by the scheduler yet or pods being created",
}

WAITING_JOB_PHASES = frozenset({"", "Pending"})
WAITING_GROUP_PHASES = frozenset({"", "Pending", "Inqueue"})
NOT_ADMITTED_GROUP_PHASES = frozenset({"", "Pending"})
CLOSED_STATES = frozenset({"Closed", "Closing"})
MAX_DEPTH = 64  # a queue path longer than this is a loop in spec.parent
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Explanation:
    reason: str  # one of REASONS
    queue: str  # the queue the reason is about; the job's own queue when it is about none
    resource: str  # the resource short of room (`nvidia.com/gpu`), or ""
    message: str  # for people: "queue research: nvidia.com/gpu 6 allocated + 4 requested > capability 8"
    scheduler_reason: str = ""  # the PodGroup's Unschedulable condition, whatever the chosen reason
    scheduler_message: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The part of an explanation that depends on the queues: a missing or closed queue on the path,
    or a queue (or the cluster) without room. Equal for every job of one queue and request, so the
    store computes it once per (queue, request) and redoes a job only when its verdict changed."""

    reason: str
    queue: str
    resource: str
    message: str


VerdictKey = tuple[str, "Resources | None"]  # the job's queue; the request when the capacity walk applies
Verdicts = dict[VerdictKey, "Verdict | None"]


def job_waiting(job: Job) -> bool:
    return job.phase in WAITING_JOB_PHASES


def group_waiting(group: PodGroup) -> bool:
    return group.phase in WAITING_GROUP_PHASES


def is_job_group(group: PodGroup) -> bool:
    """A Volcano Job's own PodGroup (`<job>-<job uid>`, owned by the Job): explained with its Job."""
    return group.owner_kind == "Job" and group.name.startswith(group.owner_name + "-")


def amount_text(name: str, amount: float) -> str:
    """An amount as people write it: cores and counts as numbers, bytes in Ki/Mi/Gi/Ti when exact."""
    if resource_label_and_unit(name)[1] == "byte" and amount >= 1024:
        for suffix, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
            if amount >= size and amount % size == 0:
                return f"{int(amount // size)}{suffix}"
    if amount == int(amount) and abs(amount) < 1e15:
        return str(int(amount))
    return f"{amount:.6g}"


def queue_path(name: str, queues: Mapping[str, Queue]) -> tuple[list[Queue], str]:
    """The queue and its ancestors up to the root, nearest first, and the first name on the way that
    does not exist ("" when the path is whole). A loop in `spec.parent` ends the walk."""
    path: list[Queue] = []
    seen: set[str] = set()
    current = name
    while current and current not in seen and len(path) < MAX_DEPTH:
        queue = queues.get(current)
        if queue is None:
            return path, current
        path.append(queue)
        seen.add(current)
        current = queue.parent
    return path, ""


def _over(request: Resources, allocated: Resources, limit: Resources) -> tuple[str, float, float, float] | None:
    """The resource limited in `limit` that the request overflows most (relative), or None.
    A resource the limit does not name is not limited (Volcano's capability semantics)."""
    worst: tuple[float, str, float, float, float] | None = None
    for name, asked in request:
        if asked <= 0:
            continue
        cap = res_get(limit, name, -1.0)
        if cap < 0:
            continue
        used = res_get(allocated, name)
        if used + asked > cap + EPSILON:
            ratio = (used + asked) / cap if cap > 0 else float("inf")
            if worst is None or ratio > worst[0]:
                worst = (ratio, name, used, asked, cap)
    return None if worst is None else worst[1:]


def shortage(path: list[Queue], request: Resources, cluster: Resources = NO_RESOURCES) -> Verdict | None:
    """The first queue on `path` (nearest first) without room for `request`, then the cluster at the root.
    The cluster's allocatable is root's `spec.deserved`, or `cluster` when root has none."""
    for queue in path:
        if queue.name == ROOT_QUEUE:
            break
        if not queue.capability:
            continue
        found = _over(request, NO_RESOURCES, queue.capability)
        if found is not None:
            name, _, asked, cap = found
            return Verdict(QUEUE_TOO_SMALL, queue.name, name,
                           f"queue {queue.name}: {name} {amount_text(name, asked)} requested > capability "
                           f"{amount_text(name, cap)} (never fits)")
        found = _over(request, queue.allocated, queue.capability)
        if found is not None:
            name, used, asked, cap = found
            return Verdict(QUEUE_CAPABILITY, queue.name, name,
                           f"queue {queue.name}: {name} {amount_text(name, used)} allocated + "
                           f"{amount_text(name, asked)} requested > capability {amount_text(name, cap)}")
    root = path[-1] if path and path[-1].name == ROOT_QUEUE else None
    allocatable = root.deserved if root is not None and root.deserved else cluster
    if not allocatable:
        return None
    found = _over(request, NO_RESOURCES, allocatable)
    if found is not None:
        name, _, asked, cap = found
        return Verdict(CLUSTER_TOO_SMALL, ROOT_QUEUE, name,
                       f"cluster: {name} {amount_text(name, asked)} requested > allocatable "
                       f"{amount_text(name, cap)} (never fits)")
    found = _over(request, root.allocated if root is not None else NO_RESOURCES, allocatable)
    if found is not None:
        name, used, asked, cap = found
        return Verdict(CLUSTER_FULL, ROOT_QUEUE, name,
                       f"cluster: {name} {amount_text(name, used)} allocated + {amount_text(name, asked)} "
                       f"requested > allocatable {amount_text(name, cap)}")
    return None


def unschedulable(group: PodGroup | None) -> tuple[str, str]:
    """The scheduler's own word: the PodGroup's `Unschedulable` condition while it is True."""
    if group is not None:
        for condition in group.conditions:
            if condition.type == "Unschedulable" and condition.status == "True":
                return condition.reason, condition.message
    return "", ""


def verdict_key(queue_name: str, group: PodGroup | None) -> VerdictKey:
    """What the queue-dependent part depends on besides the queues. An admitted (`Inqueue`) gang, or one
    without minResources, gets no capacity walk (see the module docstring)."""
    if group is None or group.phase not in NOT_ADMITTED_GROUP_PHASES or not group.min_resources:
        return queue_name, None
    return queue_name, group.min_resources


def verdict(key: VerdictKey, queues: Mapping[str, Queue], cluster: Resources = NO_RESOURCES,
            complete: bool = True) -> Verdict | None:
    """`complete`: `queues` holds every Queue (its informer has listed them). Before, a queue not seen yet
    is not called missing, and nothing is said about a path not fully known."""
    queue_name, request = key
    path, missing = queue_path(queue_name, queues)
    if missing:
        if not complete:
            return None
        return Verdict(QUEUE_MISSING, missing, "", f"queue {missing} does not exist"
                       + ("" if missing == queue_name else f" (on the path of queue {queue_name})"))
    for queue in path:
        if queue.state in CLOSED_STATES:
            return Verdict(QUEUE_CLOSED, queue.name, "", f"queue {queue.name} is {queue.state}")
    return shortage(path, request, cluster) if request else None


def explain(queue_name: str, queues: Mapping[str, Queue], group: PodGroup | None = None, job: Job | None = None,
            cluster: Resources = NO_RESOURCES, verdicts: Verdicts | None = None, complete: bool = True) -> Explanation:
    """Why the job (its `group`, and the Volcano `job` when there is one) waits. `verdicts` caches the
    queue-dependent part by `verdict_key` while the queues stay the same: many waiting jobs share it."""
    sched_reason, sched_message = unschedulable(group)
    key = verdict_key(queue_name, group)
    if verdicts is None:
        found = verdict(key, queues, cluster, complete)
    elif key in verdicts:
        found = verdicts[key]
    else:
        found = verdicts[key] = verdict(key, queues, cluster, complete)
    if found is not None and found.reason in (QUEUE_MISSING, QUEUE_CLOSED):
        return Explanation(found.reason, found.queue, "", found.message, sched_reason, sched_message)
    if job is not None:
        pods = sum(task.replicas for task in job.tasks)
        if job.min_available > pods:
            return Explanation(MIN_AVAILABLE_ABOVE_PODS, queue_name, "",
                               f"minAvailable {job.min_available} > {pods} pods in all tasks",
                               sched_reason, sched_message)
    if found is not None:
        return Explanation(found.reason, found.queue, found.resource, found.message, sched_reason, sched_message)
    if sched_reason or sched_message:
        return Explanation(UNSCHEDULABLE, queue_name, "", f"{sched_reason}: {sched_message}" if sched_reason
                           else sched_message, sched_reason, sched_message)
    message = "no PodGroup yet" if group is None else \
        f"PodGroup {group.phase or 'without a phase'}; the scheduler reports no condition"
    return Explanation(WAITING, queue_name, "", message, sched_reason, sched_message)


# The reasons `topology_fragmented` comes before: what is left once the queues and the cluster have room.
BELOW_TOPOLOGY = frozenset({UNSCHEDULABLE, WAITING})


def with_topology(explanation: Explanation, message: str) -> Explanation:
    """`explanation`, or `topology_fragmented` with `message` when the topology check found the gang
    fragmented (`message` not empty) and the explanation is one the list ranks below it: a queue or cluster
    without room stays the reason, the scheduler's own words stay in `scheduler_reason`/`_message`."""
    if not message or explanation.reason not in BELOW_TOPOLOGY:
        return explanation
    return Explanation(TOPOLOGY_FRAGMENTED, explanation.queue, "", message, explanation.scheduler_reason,
                       explanation.scheduler_message)
