"""Rendering the cluster's own objects: Nodes, Queues, Namespaces, and the Kubernetes Events the
controllers record. Pure functions, as the workload renderers in simulator.objects (Jobs, PodGroups,
Pods), kept apart from them: these render what the scenario sets up once (and Events about anything),
never a run or its pods."""

from __future__ import annotations

import math

from volcano_monitor.simulator import vgpu
from volcano_monitor.simulator.quantity import Resources, format_bytes, format_cpu, format_resources
from volcano_monitor.simulator.specs import QueueSpec
from volcano_monitor.simulator.state import NodeSim, Obj, rfc3339, stable_uuid

ROOT_DESERVED = ("cpu", "memory", "nvidia.com/gpu", "pods")  # what Volcano puts in root's spec.deserved


def node_ip(node: str) -> str:
    return f"10.0.{0 if node.startswith('cpu') else 1}.{int(''.join(c for c in node if c.isdigit()) or 0) % 250 + 10}"


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
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0", **vgpu.node_annotations(node, created)}},
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


def priority_class_object(name: str, value: int, created: float) -> Obj:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "creationTimestamp": rfc3339(created)},
            "value": value, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority"}


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
