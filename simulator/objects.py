"""Rendering the driver's state (simulator.state) into the Kubernetes and Volcano objects it writes
to the store. Pure functions: the same state renders the same object."""

from __future__ import annotations

import math

from volcano_monitor.simulator.adopt import job_annotations
from volcano_monitor.simulator.quantity import Resources, format_bytes, format_cpu, format_quantity, format_resources
from volcano_monitor.simulator.scenario import GPU_TOLERATION, PRIORITY_CLASSES
from volcano_monitor.simulator.specs import QueueSpec, TaskSpec
from volcano_monitor.simulator.state import (
    JOB_API,
    KUBEFLOW_API,
    NodeSim,
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

ROOT_DESERVED = ("cpu", "memory", "nvidia.com/gpu", "pods")  # what Volcano puts in root's spec.deserved

# ---- renderers -----------------------------------------------------------------------------------------

def container_spec(task: TaskSpec, env: list[Obj] | None = None) -> Obj:
    requests: dict[str, str | int] = {k: v for k, v in (("cpu", task.cpu), ("memory", task.memory)) if v}
    if task.gpus:
        requests["nvidia.com/gpu"] = task.gpus
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
    if task.gpus:
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
             "dnsPolicy": "ClusterFirst", "priority": PRIORITY_CLASSES.get(w.priority_class or "", 0),
             "enableServiceLinks": True}
    if w.priority_class:
        spec["priorityClassName"] = w.priority_class
    if run.is_vcjob and w.plugins and "svc" in w.plugins:
        spec |= {"hostname": pod.name, "subdomain": run.name}
    if pod.node:
        spec["nodeName"] = pod.node
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


def node_ip(node: str) -> str:
    return f"10.0.{0 if node.startswith('cpu') else 1}.{int(''.join(c for c in node if c.isdigit()) or 0) % 250 + 10}"


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


def node_object(node: NodeSim, created: float) -> Obj:
    spec = node.spec
    conditions = [
        {"type": kind, "status": "False", "reason": reason, "message": message,
         "lastHeartbeatTime": rfc3339(created), "lastTransitionTime": rfc3339(created)}
        for kind, reason, message in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status", "lastHeartbeatTime": rfc3339(created),
                       "lastTransitionTime": rfc3339(created)})
    obj_spec: Obj = {"podCIDR": f"10.244.{sum(map(ord, spec.name)) % 250}.0/24",
                     "providerID": f"sim://{spec.zone}/{spec.name}"}
    if node.taints:
        obj_spec["taints"] = node.taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "creationTimestamp": rfc3339(created), "labels": node.labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": obj_spec,
        "status": {
            "capacity": {**_node_quantities(node.capacity)},
            "allocatable": {**_node_quantities(node.allocatable)},
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": node_ip(spec.name)},
                          {"type": "Hostname", "address": spec.name}],
            "nodeInfo": {"kubeletVersion": "v1.29.4", "kubeProxyVersion": "v1.29.4",
                         "containerRuntimeVersion": "containerd://1.7.13", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "Ubuntu 22.04.4 LTS",
                         "kernelVersion": "5.15.0-105-generic", "machineID": stable_uuid(spec.name).replace("-", ""),
                         "systemUUID": stable_uuid(spec.name, "system"), "bootID": stable_uuid(spec.name, "boot")},
        },
    }


def _node_quantities(resources: Resources) -> dict[str, str]:
    out = {}
    for name, amount in resources.items():
        if name == "memory":
            out[name] = f"{math.floor(amount / 1024)}Ki"
        elif name == "ephemeral-storage":
            out[name] = format_bytes(amount)
        elif name == "cpu":
            out[name] = format_cpu(amount)
        else:
            out[name] = str(int(amount))
    return out


def queue_object(spec: QueueSpec, created: float, cluster: Resources | None = None) -> Obj:
    """A Queue as Volcano leaves it once its controllers have seen it: `dequeueStrategy: traverse`
    and `parent: root` filled in, `guarantee: {}` when none; `root` deserves the whole cluster
    (`cluster`) and guarantees zero. Status: `allocated`, `reservation: {}` and `state` only — v1.12
    writes no PodGroup counts."""
    obj_spec: Obj = {"weight": spec.weight, "reclaimable": spec.reclaimable, "dequeueStrategy": "traverse"}
    if spec.priority is not None:
        obj_spec["priority"] = spec.priority
    if spec.name == "root":
        obj_spec["guarantee"] = {"resource": {"cpu": "0", "memory": "0", **dict(spec.guarantee or {})}}
        deserved = format_resources({k: v for k, v in (cluster or {}).items() if k in ROOT_DESERVED})
        obj_spec["deserved"] = dict(spec.deserved) if spec.deserved else deserved
    else:
        obj_spec["parent"] = spec.parent or "root"
        obj_spec["guarantee"] = {"resource": dict(spec.guarantee)} if spec.guarantee else {}
        if spec.deserved:
            obj_spec["deserved"] = dict(spec.deserved)
    if spec.capability:
        obj_spec["capability"] = dict(spec.capability)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": spec.name, "creationTimestamp": rfc3339(created)},
        "spec": obj_spec,
        "status": {"allocated": {"cpu": "0", "memory": "0"}, "reservation": {}, "state": "Open"},
    }


def namespace_object(name: str, created: float) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "creationTimestamp": rfc3339(created),
                         "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def event_object(name: str, namespace: str, involved: Obj, kind: str, reason: str, message: str,
                 component: str, first: float, last: float, count: int, host: str | None = None) -> Obj:
    source: Obj = {"component": component}
    if host:
        source["host"] = host
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": rfc3339(first)},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": kind,
        "source": source,
        "firstTimestamp": rfc3339(first),
        "lastTimestamp": rfc3339(last),
        "count": count,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host or component,
    }
