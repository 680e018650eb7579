"""The kubelet (and what the container runtime and the kernel do): binding to a node, starting
containers, exits and OOM kills, admission rejections, in-place restarts, graceful deletion, and the
per-container usage that the usage model publishes."""

from __future__ import annotations

import math

from volcano_monitor.simulator import vgpu
from volcano_monitor.simulator.engine import Engine
from volcano_monitor.simulator.quantity import add, parse_quantity
from volcano_monitor.simulator.resources import NODE_METRICS, POD_METRICS, PODS
from volcano_monitor.simulator.state import NodeSim, PodSim, rfc3339
from volcano_monitor.simulator.usage import ContainerUsage, node_metrics, pod_metrics

# Scenario seconds.
START_DELAY = 3.0  # bound -> container running (CPU images)
GPU_START_DELAY = 8.0  # bigger images
REJECT_DELAY = 1.0  # bound -> kubelet admission rejects
GRACE_RUNNING = 3.0  # deletionTimestamp -> gone, running container
GRACE_DONE = 1.0  # deletionTimestamp -> gone, finished container


class Kubelet(Engine):
    """Pods on nodes: what happens to a pod between binding and removal."""

    def _bind(self, pod: PodSim, node: NodeSim) -> None:
        # Whole cards from NVIDIA's plugin; a sharing plugin's node places vGPUs card by card instead.
        pod.vgpu_request = vgpu.request_for(pod.task, node)
        gpus = 0 if node.shared or pod.vgpu_request else int(pod.requests.get("nvidia.com/gpu", 0))
        ids, node.free_gpus = node.free_gpus[:gpus], node.free_gpus[gpus:]
        pod.gpus = tuple(node.devices[i] for i in ids)
        pod.vgpu = vgpu.allocate(node, pod.vgpu_request)
        pod.node = node.name
        pod.bound_at = self.now
        pod.unschedulable = pod.unschedulable_since = None
        self._hold(pod)
        self._dirty_pods[pod] = None
        self._record(self._pod_ref(pod), "Normal", "Scheduled",
                     f"Successfully assigned {pod.namespace}/{pod.name} to {node.name}")
        if pod.task.exit == "rejected":
            self._after(REJECT_DELAY, lambda: self._reject(pod))
        else:
            self._after(GPU_START_DELAY if gpus or pod.vgpu else START_DELAY, lambda: self._start(pod))

    def _hold(self, pod: PodSim) -> None:
        node = self.nodes[pod.node or ""]
        add(node.used, pod.requests)
        node.used["pods"] = node.used.get("pods", 0.0) + 1
        pod.holding = True

    def _release(self, pod: PodSim) -> None:
        if not pod.holding:
            return
        node = self.nodes[pod.node or ""]
        add(node.used, pod.requests, -1)
        node.used["pods"] = node.used.get("pods", 0.0) - 1
        node.free_gpus = sorted(node.free_gpus + [d.index for d in pod.gpus])
        vgpu.release(node, pod)
        pod.holding = False
        self._request_schedule()

    def _start(self, pod: PodSim) -> None:
        if not pod.active or pod.phase != "Pending":
            return
        pod.phase = "Running"
        pod.started_at = pod.first_started_at = self.now
        self._dirty_pods[pod] = None
        self._start_usage(pod)
        task = pod.task
        runtime = task.runtime
        if task.exit == "oom" and task.profile.memory_to_limit_after is not None:
            runtime = task.profile.memory_to_limit_after
        oom_at = pod.usage.oom_after() if pod.usage is not None and task.profile.memory_need is not None else None
        if oom_at is not None and (runtime is None or oom_at < runtime):
            # the working set crosses the memory limit before the program is done: the kernel kills it
            self._after(oom_at, lambda: self._exit(pod, oom=True))
        elif runtime is not None:
            self._after(runtime, lambda: self._exit(pod))
        if task.crash_after is not None and pod.index == 0:
            self._after(task.crash_after, lambda: self._crash(pod))
        self._sync_run(pod.run)

    def _crash(self, pod: PodSim) -> None:
        """The container exits 1 and the kubelet restarts it in place (restartPolicy OnFailure)."""
        if not pod.active or pod.phase != "Running":
            return
        started = pod.started_at or self.now
        pod.last_state = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": rfc3339(started),
                                         "finishedAt": rfc3339(self.now)}}
        pod.restart_count += 1
        pod.started_at = self.now
        self._start_usage(pod)  # a new container: its CPU counter starts again from zero
        self._dirty_pods[pod] = None

    def _exit(self, pod: PodSim, oom: bool = False) -> None:
        """The container ends: as its task says, or OOM-killed (`oom`: its usage reached its limit)."""
        if not pod.active or pod.phase != "Running":
            return
        task = pod.task
        if task.exit == "success" and not oom:
            pod.phase, pod.exit_code, pod.term_reason = "Succeeded", 0, "Completed"
        elif task.exit == "oom" or oom:
            pod.phase, pod.exit_code, pod.term_reason = "Failed", 137, "OOMKilled"
            limit = parse_quantity(task.memory_limit or task.memory)
            node = self.nodes[pod.node or ""]
            self._record({"kind": "Node", "name": node.name, "uid": node.name, "apiVersion": "v1"}, "Warning",
                         "OOMKilling", f"Memory cgroup out of memory: Killed process {4000 + pod.index} "
                         f"({task.command[0]}) total-vm:{int(limit / 1024 * 1.3)}kB, anon-rss:{int(limit / 1024)}kB, "
                         "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:20480kB oom_score_adj:999",
                         component="kernel-monitor", host=node.name)
        else:
            pod.phase, pod.exit_code, pod.term_reason = "Failed", task.exit_code or 1, "Error"
        pod.finished_at = self.now
        self._stop_usage(pod)
        self._release(pod)
        self._dirty_pods[pod] = None
        self._pod_finished(pod)

    def _reject(self, pod: PodSim) -> None:
        """Kubelet admission refuses the pod (it saw less room than the scheduler did)."""
        if not pod.active or pod.phase != "Pending":
            return
        node = self.nodes[pod.node or ""]
        reason = pod.task.reject_reason
        if reason.startswith("Out"):
            resource = reason.removeprefix("OutOf")
            req = pod.requests.get(resource, 0.0)
            cap = node.allocatable.get(resource, 0.0)
            scale = 1000 if resource == "cpu" else 1
            used = max(node.used.get(resource, 0.0) - req, cap - req + (0.25 if resource == "cpu" else 2**28))
            detail = (f"Node didn't have enough resource: {resource}, requested: {round(req * scale)}, "
                      f"used: {round(used * scale)}, capacity: {round(cap * scale)}")
        else:
            detail = "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu"
        pod.phase, pod.pod_reason, pod.pod_message = "Failed", reason, f"Pod was rejected: {detail}"
        pod.finished_at = self.now
        self._release(pod)
        self._dirty_pods[pod] = None
        self._record(self._pod_ref(pod), "Warning", reason, detail, component="kubelet", host=node.name)
        self._pod_finished(pod)

    def _delete_pod(self, pod: PodSim) -> None:
        """Graceful deletion: deletionTimestamp now, gone once the kubelet has stopped the containers."""
        if not pod.active:
            return
        if pod.node is None:
            self._remove_pod(pod)
            return
        pod.deleting_at = self.now
        self._stop_usage(pod)
        self._dirty_pods[pod] = None
        self._after(GRACE_RUNNING if pod.phase in ("Running", "Pending") else GRACE_DONE,
                    lambda: self._remove_pod(pod))

    def _remove_pod(self, pod: PodSim, in_store: bool = True) -> None:
        if pod.removed:
            return
        pod.removed = True
        self._stop_usage(pod)
        self._release(pod)
        run = pod.run
        if run.pods.get(pod.name) is pod:
            del run.pods[pod.name]
        if self.pods.get((pod.namespace, pod.name)) is pod:
            del self.pods[(pod.namespace, pod.name)]
        self._dirty_pods.pop(pod, None)
        if in_store:
            self._delete(PODS, pod.namespace, pod.name)
        self._request_schedule()
        self._sync_run(run)

    # ---- usage ------------------------------------------------------------------------------------------

    def _start_usage(self, pod: PodSim) -> None:
        task = pod.task
        pod.usage = ContainerUsage(
            pod.namespace, pod.name, task.container, pod.node or "", self.now, self.speed, task.profile,
            cpu_request=pod.requests.get("cpu", 0.0), memory_request=pod.requests.get("memory", 0.0),
            memory_limit=parse_quantity(task.memory_limit) if task.memory_limit else None,
            gpus=pod.gpus if task.dcgm else (), vgpu=pod.vgpu)

    def _stop_usage(self, pod: PodSim) -> None:
        pod.usage = None
        key = (pod.namespace, pod.name)
        self._published_at.pop(key, None)
        if key in self._published:
            self._published.discard(key)
            self._delete(POD_METRICS, *key)

    def _refresh_usage(self) -> None:
        if self.now - self._last_metrics < self.metrics_interval:
            return
        self._last_metrics = self.now
        per_node: dict[str, list[float]] = {name: [0.35, 1.5 * 2**30] for name in self.nodes}
        for key, pod in self.pods.items():
            if pod.usage is None:
                continue
            stored = self.store.get(PODS, *key)
            labels = dict(((stored or {}).get("metadata") or {}).get("labels") or {})
            report = pod_metrics(pod.namespace, pod.name, [pod.usage], self.now, labels,
                                 self._published_at.get(key))
            self.store.upsert(POD_METRICS, report)
            self._published.add(key)
            self._published_at[key] = float(math.floor(self.now))
            totals = per_node.setdefault(pod.usage.node, [0.0, 0.0])
            totals[0] += pod.usage.cpu_cores(self.now)
            totals[1] += pod.usage.memory_bytes(self.now)
        for name, (cores, memory) in per_node.items():
            node = self.nodes.get(name)
            if node is not None:
                self.store.upsert(NODE_METRICS, node_metrics(name, node.labels, cores, memory, self.now))
