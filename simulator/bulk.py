"""The `scale` scenario: many objects written once, in their steady state, for benchmarks.

`pods` pods in `jobs` Volcano Jobs (one task each), spread over `queues` queues and `namespaces`
namespaces on ceil(pods / pods_per_node) CPU nodes. Every tenth job is Pending (PodGroup Inqueue,
pods unbound); the others are Running with all their pods bound and Running. Nothing changes after.
"""

from __future__ import annotations

import gc
import math

from volcano_monitor.simulator import objects as o
from volcano_monitor.simulator.cluster_objects import namespace_object, node_object, queue_object
from volcano_monitor.simulator.quantity import Resources, add, format_resources
from volcano_monitor.simulator.resources import JOBS, NAMESPACES, NODES, PODGROUPS, PODS, QUEUES
from volcano_monitor.simulator.specs import BulkSpec, NodeSpec, QueueSpec, TaskSpec, Workload
from volcano_monitor.simulator.state import (
    PodSim,
    RunSim,
    make_node,
    min_resources,
    rfc3339,
    stable_uuid,
    task_requests,
)
from volcano_monitor.simulator.store import Store
from volcano_monitor.simulator.usage import LIGHT


def populate(store: Store, spec: BulkSpec, t: float) -> None:
    """Write the bulk objects; the garbage collector is paused meanwhile (it would otherwise rescan the
    growing store again and again: half the time for 100k pods)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        _populate(store, spec, t)
    finally:
        if enabled:
            gc.enable()


def _populate(store: Store, spec: BulkSpec, t: float) -> None:
    namespaces = [f"bench-{i:03d}" for i in range(max(1, spec.namespaces))]
    queues = [f"bench-q-{i:03d}" for i in range(max(1, spec.queues))]
    per_node = max(1, spec.pods_per_node)
    jobs = min(max(1, spec.jobs), spec.pods) if spec.pods else 0
    n_nodes = max(1, math.ceil(spec.pods / per_node))
    when = rfc3339(t)

    for ns in namespaces:
        store.upsert(NAMESPACES, namespace_object(ns, t))
    nodes = [make_node(NodeSpec(f"node-{i:05d}", 64, 256, max_pods=max(110, per_node),
                                  zone=f"zone-{'abc'[i % 3]}")) for i in range(n_nodes)]
    for node in nodes:
        store.upsert(NODES, node_object(node, t))

    allocated: dict[str, Resources] = {q: {} for q in queues}
    slot = 0
    for j in range(jobs):
        replicas = spec.pods // jobs + (1 if j < spec.pods % jobs else 0)
        task = TaskSpec("worker", replicas, cpu="100m", memory="256Mi", runtime=None, profile=LIGHT,
                        image="registry.example.com/bench/worker:1.0.0")
        workload = Workload(f"bench-job-{j:05d}", namespaces[j % len(namespaces)], queues[j % len(queues)],
                            (task,), purpose="bulk object for benchmarks", repeat=False)
        run = RunSim(workload, workload.name, created=t, state_time=t, min_resources=min_resources(workload))
        run.uid = store.create(JOBS, o.job_object(run))["metadata"]["uid"]
        run.pg_name = f"{run.name}-{run.uid}"
        pending = j % 10 == 9
        run.phase = "Pending" if pending else "Running"
        run.conditions = [("Pending", t)] if pending else [("Pending", t), ("Running", t)]
        run.pg_phase = "Inqueue" if pending else "Running"
        for index in range(replicas):
            pod = PodSim(run, task, index, f"{run.name}-worker-{index}", created=t, requests=task_requests(task))
            if not pending:
                pod.node = nodes[min(slot // per_node, n_nodes - 1)].name
                slot += 1
                pod.phase, pod.bound_at, pod.started_at, pod.first_started_at = "Running", t, t, t
                add(allocated[workload.queue], pod.requests)
            run.pods[pod.name] = pod
            pod.uid = store.create(PODS, o.pod_object(pod))["metadata"]["uid"]
        if pending:
            run.pg_conditions["Unschedulable"] = {
                "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                "message": f"{replicas}/{replicas} tasks in gang unschedulable: pod group is not ready, "
                           f"{replicas} Pending, {replicas} minAvailable",
                "transitionID": stable_uuid(run.name, "unschedulable"), "lastTransitionTime": when}
        else:
            run.pg_conditions["Scheduled"] = {
                "type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be scheduled",
                "transitionID": stable_uuid(run.name, "scheduled"), "lastTransitionTime": when}
        store.update(JOBS, {"metadata": {"name": run.name, "namespace": run.namespace},
                            "status": o.job_status(run, t)}, subresource="status")
        store.create(PODGROUPS, o.podgroup_object(run))

    root_alloc: Resources = {}
    for q in queues:
        add(root_alloc, allocated[q])
    cluster: Resources = {}
    for node in nodes:
        add(cluster, node.allocatable)
    root = queue_object(QueueSpec("root", parent=None, reclaimable=False), t, cluster)
    root["status"]["allocated"] = format_resources(root_alloc, keep=("cpu", "memory"))
    store.upsert(QUEUES, root)
    for q in queues:
        obj = queue_object(QueueSpec(q, weight=1), t)
        obj["status"]["allocated"] = format_resources(allocated[q], keep=("cpu", "memory"))
        store.upsert(QUEUES, obj)
