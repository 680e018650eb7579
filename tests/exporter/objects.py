"""Realistic raw objects (as the Kubernetes API returns them) for the model tests; each call is a fresh copy."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import yaml

JOB_UID = "0b1f5b36-7a43-4d0c-9d0e-2f7f6c1b2a10"
T0, T1, T2, T3, T4 = (f"2024-05-01T10:0{i}:00Z" for i in range(5))

# A pod as Volcano's job controller creates it (trimmed from a real cluster): single container.
VOLCANO_POD = f"""
apiVersion: v1
kind: Pod
metadata:
  name: train-worker-1
  namespace: ml
  uid: 4a7e1c3d-3b0f-4a61-8f1c-9d2b8e0c5f11
  resourceVersion: "884211"
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels:
    volcano.sh/job-name: train
    volcano.sh/job-namespace: ml
    volcano.sh/queue-name: research
    volcano.sh/task-spec: worker
    volcano.sh/task-index: "1"
    volcano.sh/job-retry-count: "0"
  annotations:
    scheduling.k8s.io/group-name: train-{JOB_UID}
    volcano.sh/job-name: train
    volcano.sh/job-version: "0"
    volcano.sh/queue-name: research
    volcano.sh/task-spec: worker
    volcano.sh/task-index: "1"
    volcano.sh/template-uid: train-worker
  ownerReferences:
  - apiVersion: batch.volcano.sh/v1alpha1
    kind: Job
    name: train
    uid: {JOB_UID}
    controller: true
    blockOwnerDeletion: true
spec:
  schedulerName: volcano
  nodeName: gpu-node-7
  containers:
  - name: main
    image: pytorch:2.3
    resources:
      requests: {{cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}}
      limits: {{cpu: "8", memory: 16Gi, nvidia.com/gpu: "1"}}
status:
  phase: Running
  startTime: "2024-05-01T10:00:02Z"
  containerStatuses:
  - name: main
    restartCount: 0
    ready: true
    state: {{running: {{startedAt: "2024-05-01T10:00:03Z"}}}}
    lastState: {{}}
"""

# The same pod with init containers (one a sidecar), overhead and an OOM-killed previous run.
FULL_POD_EXTRA = """
spec:
  initContainers:
  - {name: init, resources: {requests: {cpu: "1"}}}
  - {name: side, restartPolicy: Always, resources: {requests: {cpu: "1"}}}
  overhead: {cpu: 100m}
"""

FULL_JOB = f"""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: j
  namespace: n
  uid: u
  resourceVersion: "1"
  creationTimestamp: "{T0}"
  ownerReferences: [{{kind: Workflow, name: wf, controller: true}}]
spec:
  queue: q
  schedulerName: volcano
  priorityClassName: p
  minAvailable: 2
  maxRetry: 4
  tasks:
  - name: w
    replicas: 2
    minAvailable: 1
    template:
      spec:
        containers: [{{name: m, resources: {{requests: {{cpu: "1"}}}}}}]
status:
  state: {{phase: Running, reason: r, message: m}}
  retryCount: 1
  running: 2
  conditions: [{{status: Running, lastTransitionTime: "{T1}"}}]
  taskStatusCount: {{w: {{phase: {{Running: 2}}}}}}
"""

# A PodGroup created by the Kubeflow training operator for a PyTorchJob.
KUBEFLOW_PODGROUP = f"""
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: bert
  namespace: nlp
  uid: pg-uid
  creationTimestamp: "{T0}"
  ownerReferences:
  - {{kind: ConfigMap, name: other}}
  - {{apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: bert, controller: true}}
spec:
  minMember: 4
  queue: nlp
  priorityClassName: high
  minResources: {{cpu: "16", memory: 64Gi, nvidia.com/gpu: 4}}
status:
  phase: Pending
  running: 1
  conditions:
  - type: Unschedulable
    status: "True"
    reason: NotEnoughResources
    message: 3/4 tasks in gang unschedulable
    lastTransitionTime: "{T1}"
    transitionID: x
"""

FULL_QUEUE = f"""
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: research
  uid: q-uid
  creationTimestamp: "{T0}"
  annotations: {{volcano.sh/hierarchy: root/research}}
spec:
  parent: root
  weight: 4
  reclaimable: true
  priority: 10
  capability: {{cpu: "100", memory: 400Gi, nvidia.com/gpu: "8"}}
  deserved: {{cpu: "50"}}
  guarantee: {{resource: {{cpu: "10", memory: 10Gi}}}}
status:
  state: Open
  allocated: {{cpu: 12500m, memory: 32Gi, pods: "7"}}
  pending: 1
  running: 2
  inqueue: 3
  completed: 4
  unknown: 5
"""

FULL_NODE = """
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-7
  uid: n-uid
  labels: {nvidia.com/gpu.product: A100, zone: a}
spec:
  unschedulable: true
  taints: [{key: gpu, effect: NoSchedule}, {key: x, effect: NoExecute}]
status:
  capacity: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
  allocatable: {cpu: 63500m, memory: 500Gi, nvidia.com/gpu: "8", pods: "110"}
  conditions:
  - {type: MemoryPressure, status: "False"}
  - {type: Ready, status: "True"}
"""


@cache
def _load(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def volcano_pod() -> dict[str, Any]:
    return copy.deepcopy(_load(VOLCANO_POD))


def full_pod() -> dict[str, Any]:
    raw = volcano_pod()
    raw["spec"].update(copy.deepcopy(_load(FULL_POD_EXTRA)["spec"]))
    raw["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    return raw


def full_job() -> dict[str, Any]:
    return copy.deepcopy(_load(FULL_JOB))


def kubeflow_podgroup() -> dict[str, Any]:
    return copy.deepcopy(_load(KUBEFLOW_PODGROUP))


def full_queue() -> dict[str, Any]:
    return copy.deepcopy(_load(FULL_QUEUE))


def full_node() -> dict[str, Any]:
    return copy.deepcopy(_load(FULL_NODE))


# ---- a small cluster for the why-pending tests (the recorded one: 3 nodes x 32 cores, 256Gi, 8 GPUs) ----------

CLUSTER = {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "24", "pods": "330"}  # root's spec.deserved


def queue(name: str, parent: str | None = "root", capability: dict[str, str] | None = None,
          allocated: dict[str, str] | None = None, state: str = "Open") -> dict[str, Any]:
    """A Queue as v1.12 writes it; `root` gets the cluster's allocatable in `spec.deserved` (recorded)."""
    spec: dict[str, Any] = {"weight": 1, "reclaimable": True}
    if parent:
        spec["parent"] = parent
    if capability:
        spec["capability"] = capability
    if name == "root":
        spec["deserved"] = dict(CLUSTER)
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name, "uid": f"q-{name}", "resourceVersion": "1", "creationTimestamp": T0},
            "spec": spec, "status": {"state": state, "allocated": allocated or {"cpu": "0", "memory": "0"}}}


def waiting_job(name: str, queue_name: str, replicas: int, request: dict[str, str], namespace: str = "ml",
                min_available: int | None = None, phase: str = "Pending") -> dict[str, Any]:
    """A Volcano Job with one task of `replicas` pods requesting `request` each."""
    spec: dict[str, Any] = {"queue": queue_name, "schedulerName": "volcano", "minAvailable": min_available or replicas,
                            "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {
                                "containers": [{"name": "main", "resources": {"requests": request}}]}}}]}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                         "creationTimestamp": T0},
            "spec": spec, "status": {"state": {"phase": phase}, "minAvailable": min_available or replicas}}


def job_podgroup(job: dict[str, Any], min_resources: dict[str, str], phase: str = "Pending",
                 conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The PodGroup Volcano's controller makes for `job`: `<name>-<uid>`, quota-style minResources keys."""
    meta = job["metadata"]
    resources = {f"requests.{k}" if k in ("cpu", "memory") else k: v for k, v in min_resources.items()}
    resources["count/pods"] = str(job["spec"]["minAvailable"])
    status: dict[str, Any] = {"phase": phase}
    if conditions:
        status["conditions"] = conditions
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": f"{meta['name']}-{meta['uid']}", "namespace": meta["namespace"],
                         "uid": f"pg-{meta['uid']}", "resourceVersion": "1", "creationTimestamp": T0,
                         "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                              "name": meta["name"], "uid": meta["uid"], "controller": True}]},
            "spec": {"minMember": job["spec"]["minAvailable"], "queue": job["spec"]["queue"],
                     "minResources": resources},
            "status": status}
