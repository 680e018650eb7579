"""Rendering the driver's state (simulator.state) into the Kubernetes and Volcano objects it writes
to the store: Jobs, PodGroups and Pods. Pure functions: the same state renders the same object. The
cluster's own objects (Nodes, Queues, Namespaces, Events) are rendered in simulator.cluster_objects."""

from __future__ import annotations

from volcano_monitor.simulator import vgpu
from volcano_monitor.simulator.adopt import job_annotations
from volcano_monitor.simulator.cluster_objects import node_ip
from volcano_monitor.simulator.quantity import Resources, format_quantity
from volcano_monitor.simulator.scenario import GPU_TOLERATION, priority_value
from volcano_monitor.simulator.specs import TaskSpec
from volcano_monitor.simulator.state import (
    JOB_API,
    KUBEFLOW_API,
    Obj,
    PodSim,
    RunSim,
    go_duration,
    go_duration_precise,
    min_resource_list,
    pod_counts,
    rfc3339,
    stable_uuid,
    task_limits,
)

# ---- renderers -----------------------------------------------------------------------------------------

def container_spec(task: TaskSpec, env: list[Obj] | None = None) -> Obj:
    requests: dict[str, str | int] = {k: v for k, v in (("cpu", task.cpu), ("memory", task.memory)) if v}
    if task.gpus:
        requests["nvidia.com/gpu"] = task.gpus
    if task.vgpu is not None:
        requests |= task.vgpu.resources()
    spec: Obj = {
        "name": task.container,
        "image": task.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(task.command),
        "resources": {"requests": requests, **({"limits": task_limits(task)} if task_limits(task) else {})},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if env:
        spec["env"] = env
    return spec


def pod_template(task: TaskSpec) -> Obj:
    spec: Obj = {"containers": [container_spec(task)], "restartPolicy": task.restart_policy}
    if task.node_selector:
        spec["nodeSelector"] = dict(task.node_selector)
    if task.gpus or task.vgpu is not None:
        spec["tolerations"] = [dict(GPU_TOLERATION)]
    return {"metadata": {"labels": {"app.kubernetes.io/component": task.name}}, "spec": spec}


def job_object(run: RunSim) -> Obj:
    w = run.workload
    tasks = []
    for task in w.tasks:
        entry: Obj = {"name": task.name, "replicas": task.replicas, "template": pod_template(task)}
        if task.min_available is not None:
            entry["minAvailable"] = task.min_available
        if task.policies:
            entry["policies"] = [dict(p) for p in task.policies]
        tasks.append(entry)
    spec: Obj = {
        "schedulerName": "volcano",
        "queue": w.queue,
        "minAvailable": w.min_member,
        "maxRetry": w.max_retry,
        "ttlSecondsAfterFinished": w.ttl_after_finished,
        "tasks": tasks,
    }
    if w.policies:
        spec["policies"] = [dict(p) for p in w.policies]
    if w.plugins:
        spec["plugins"] = {k: list(v) for k, v in w.plugins.items()}
    if w.priority_class:
        spec["priorityClassName"] = w.priority_class
    if w.network_topology:
        spec["networkTopology"] = dict(w.network_topology)
    meta: Obj = {"name": run.name, "namespace": run.namespace, "creationTimestamp": rfc3339(run.created),
                 "labels": {"app.kubernetes.io/name": w.name, "app.kubernetes.io/managed-by": "volcano-sim"}}
    annotations = job_annotations(w)
    if annotations:
        meta["annotations"] = annotations
    if w.cron and run.owner_uid:
        meta["ownerReferences"] = [{"apiVersion": JOB_API, "kind": "CronJob", "name": w.cron, "uid": run.owner_uid,
                                    "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": JOB_API, "kind": "Job", "metadata": meta, "spec": spec}


def task_status_count(run: RunSim) -> dict[str, Obj]:
    task_counts: dict[str, Obj] = {}
    for pod in run.pods.values():
        if pod.active:
            phases = task_counts.setdefault(pod.task.name, {"phase": {}})["phase"]
            phases[pod.phase] = phases.get(pod.phase, 0) + 1
    return task_counts


def job_status(run: RunSim, now: float) -> Obj:
    """The status as Volcano's job controller writes it. Its sync path writes the non-zero pod counts,
    taskStatusCount and controlledResources; its kill path (Restarting, Aborting, Completing, and
    what follows them) only `terminating`, a nanosecond runningDuration and a new version; a finished
    job's last writes wipe the counts and round runningDuration (measured from creation) to seconds."""
    state: Obj = {"phase": run.phase, "lastTransitionTime": rfc3339(run.state_time)}
    if run.state_reason:
        state["reason"] = run.state_reason
    if run.state_message:
        state["message"] = run.state_message
    status: Obj = {"state": state, "minAvailable": run.workload.min_member}
    counts = pod_counts(run)
    if run.status_mode == "sync":
        status |= {k: v for k, v in counts.items() if v}
        task_counts = task_status_count(run)
        if task_counts:
            status["taskStatusCount"] = task_counts
        if run.workload.plugins and run.pods:
            status["controlledResources"] = {f"plugin-{name}": name for name in sorted(run.workload.plugins)}
    elif run.status_mode == "kill":
        if counts["terminating"]:
            status["terminating"] = counts["terminating"]
        status["runningDuration"] = go_duration_precise(now - run.created)
    else:
        status["runningDuration"] = go_duration(now - run.created)
    if run.retry_count:
        status["retryCount"] = run.retry_count
    if run.version:
        status["version"] = run.version
    status["conditions"] = [{"status": phase, "lastTransitionTime": rfc3339(t)} for phase, t in run.conditions]
    return status


def min_resources_object(resources: Resources) -> dict[str, str]:
    """Quota-style names keep their resource's format: requests.memory like memory."""
    out = {}
    for name, amount in sorted(resources.items()):
        base = name.split(".", 1)[1] if name.startswith(("requests.", "limits.")) else name
        out[name] = format_quantity(base, amount)
    return out


def podgroup_object(run: RunSim) -> Obj:
    w = run.workload
    if run.is_vcjob:
        owner = {"apiVersion": JOB_API, "kind": "Job", "name": run.name, "uid": run.uid,
                 "controller": True, "blockOwnerDeletion": True}
    else:
        owner = {"apiVersion": KUBEFLOW_API, "kind": w.kind, "name": run.name, "uid": run.owner_uid,
                 "controller": True, "blockOwnerDeletion": True}
    spec: Obj = {
        "minMember": w.min_member,
        "minResources": min_resources_object(min_resource_list(w)),
        "queue": w.queue,
    }
    if run.is_vcjob:
        spec["minTaskMember"] = {t.name: t.min_available if t.min_available is not None else t.replicas
                                 for t in w.tasks}
    if w.priority_class:
        spec["priorityClassName"] = w.priority_class
    if w.network_topology:
        spec["networkTopology"] = dict(w.network_topology)
    if w.subgroup_policy:
        spec["subGroupPolicy"] = [dict(p) for p in w.subgroup_policy]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": run.pg_name, "namespace": run.namespace, "creationTimestamp": rfc3339(run.created),
                     "ownerReferences": [owner]},
        "spec": spec,
        "status": podgroup_status(run),
    }


def podgroup_status(run: RunSim) -> Obj:
    """Empty until Volcano's scheduler first looks at the group (it is created with `status: {}`)."""
    if not run.pg_phase:
        return {}
    running = succeeded = failed = 0
    for pod in run.pods.values():
        if not pod.active:
            continue
        running += pod.phase == "Running"
        succeeded += pod.phase == "Succeeded"
        failed += pod.phase == "Failed"
    status: Obj = {"phase": run.pg_phase}
    if run.pg_conditions:
        status["conditions"] = sorted(run.pg_conditions.values(), key=lambda c: c["lastTransitionTime"])
    for key, value in (("running", running), ("succeeded", succeeded), ("failed", failed)):
        if value:
            status[key] = value
    return status


def pod_object(pod: PodSim) -> Obj:
    run, task = pod.run, pod.task
    w = run.workload
    annotations = {"scheduling.k8s.io/group-name": run.pg_name}
    if run.is_vcjob:
        labels = {
            "volcano.sh/job-name": run.name,
            "volcano.sh/job-namespace": run.namespace,
            "volcano.sh/queue-name": w.queue,
            "volcano.sh/task-spec": task.name,
            "volcano.sh/task-index": str(pod.index),
            "app.kubernetes.io/component": task.name,  # the template's label
        }
        annotations |= {
            "volcano.sh/job-name": run.name,
            "volcano.sh/job-retry-count": str(run.retry_count),
            "volcano.sh/job-version": str(run.version),
            "volcano.sh/queue-name": w.queue,
            "volcano.sh/task-spec": task.name,
            "volcano.sh/task-index": str(pod.index),
            "volcano.sh/template-uid": f"{run.name}-{task.name}",
        }
        owner = {"apiVersion": JOB_API, "kind": "Job", "name": run.name, "uid": run.uid,
                 "controller": True, "blockOwnerDeletion": True}
        env = [{"name": "VK_TASK_INDEX", "value": str(pod.index)}, {"name": "VC_TASK_INDEX", "value": str(pod.index)}]
    else:
        labels = {
            "training.kubeflow.org/job-name": run.name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": task.name,
            "training.kubeflow.org/replica-index": str(pod.index),
        }
        if task.name == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        owner = {"apiVersion": KUBEFLOW_API, "kind": w.kind, "name": run.name, "uid": run.owner_uid,
                 "controller": True, "blockOwnerDeletion": True}
        env = [{"name": "MASTER_PORT", "value": "23456"}, {"name": "RANK", "value": str(pod_rank(pod))}]
    spec: Obj = pod_template(task)["spec"]
    spec["containers"] = [container_spec(task, env)]
    spec |= {"schedulerName": "volcano", "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
             "dnsPolicy": "ClusterFirst", "priority": priority_value(w.priority_class),
             "enableServiceLinks": True}
    if w.priority_class:
        spec["priorityClassName"] = w.priority_class
    if run.is_vcjob and w.plugins and "svc" in w.plugins:
        spec |= {"hostname": pod.name, "subdomain": run.name}
    if pod.node:
        spec["nodeName"] = pod.node
    annotations |= vgpu.pod_annotations(pod)
    meta: Obj = {"name": pod.name, "namespace": run.namespace, "creationTimestamp": rfc3339(pod.created),
                 "labels": labels, "annotations": annotations, "ownerReferences": [owner]}
    if pod.deleting_at is not None:
        meta["deletionTimestamp"] = rfc3339(pod.deleting_at)
        meta["deletionGracePeriodSeconds"] = 30
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": pod_status(pod)}


def pod_rank(pod: PodSim) -> int:
    return pod.index + (1 if pod.task.name != "master" else 0)


def pod_ip(pod: PodSim) -> str:
    digest = int(stable_uuid(pod.run.namespace, pod.name, pod.uid)[:8], 16)
    return f"10.244.{(digest // 250) % 250 + 1}.{digest % 250 + 2}"



def qos_class(task: TaskSpec) -> str:
    if task.cpu_limit == task.cpu and task.memory_limit == task.memory:
        return "Guaranteed"
    return "Burstable"


def pod_status(pod: PodSim) -> Obj:
    task = pod.task
    status: Obj = {"phase": pod.phase, "qosClass": qos_class(task)}
    if pod.node is None:
        if pod.unschedulable:
            status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                     "reason": pod.unschedulable_reason,
                                     "message": pod.unschedulable, "lastProbeTime": None,
                                     "lastTransitionTime": rfc3339(pod.unschedulable_since or pod.created)}]
        return status
    bound = rfc3339(pod.bound_at or pod.created)
    if pod.pod_reason or pod.task.exit == "rejected":  # refused at admission: no containers, ever
        status["conditions"] = [_cond("PodScheduled", True, bound)]
        if pod.pod_reason:
            status["startTime"] = rfc3339(pod.finished_at or pod.bound_at or pod.created)
            status["reason"] = pod.pod_reason
            status["message"] = pod.pod_message or ""
        return status
    status["hostIP"] = node_ip(pod.node)
    status["startTime"] = bound
    running = pod.phase == "Running" and pod.started_at is not None
    ready_time = rfc3339(pod.started_at if pod.started_at is not None else pod.bound_at or pod.created)
    done = pod.phase in ("Succeeded", "Failed")
    conditions = [
        _cond("PodReadyToStartContainers", pod.started_at is not None or done, ready_time),
        _cond("Initialized", True, bound),
        _cond("Ready", running, rfc3339(pod.finished_at) if done and pod.finished_at else ready_time,
              None if running else ("PodCompleted" if done else "ContainersNotReady")),
        _cond("ContainersReady", running, rfc3339(pod.finished_at) if done and pod.finished_at else ready_time,
              None if running else ("PodCompleted" if done else "ContainersNotReady")),
        _cond("PodScheduled", True, bound),
    ]
    if pod.evicted is not None:  # Volcano's Evictor, before it deletes the pod
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "Evict", "message": pod.evicted[0],
                           "lastProbeTime": None, "lastTransitionTime": rfc3339(pod.evicted[1])})
    status["conditions"] = conditions
    if pod.started_at is not None or done:
        status["podIP"] = pod_ip(pod)
        status["podIPs"] = [{"ip": status["podIP"]}]
    cid = "containerd://" + stable_uuid(pod.run.uid, pod.name, str(pod.restart_count)).replace("-", "") * 2
    if running:
        state: Obj = {"running": {"startedAt": rfc3339(pod.started_at or 0)}}
    elif done and pod.exit_code is not None:
        state = {"terminated": {"exitCode": pod.exit_code, "reason": pod.term_reason or "Completed",
                                "startedAt": rfc3339(pod.started_at or 0), "finishedAt": rfc3339(pod.finished_at or 0),
                                "containerID": cid}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    container: Obj = {
        "name": task.container,
        "image": task.image,
        "imageID": task.image.split(":")[0] + "@sha256:" + stable_uuid(task.image).replace("-", "") * 2,
        "ready": running,
        "started": running,
        "restartCount": pod.restart_count,
        "state": state,
        "lastState": pod.last_state,
    }
    if pod.started_at is not None or done:
        container["containerID"] = cid
    status["containerStatuses"] = [container]
    return status


def _cond(kind: str, ok: bool, when: str, reason: str | None = None) -> Obj:
    cond: Obj = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                 "lastTransitionTime": when}
    if reason:
        cond["reason"] = reason
    return cond
