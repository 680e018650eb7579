"""Pod families: `volcano_pod_info` is the join key that carries queue, job and task to any pod metric
(cAdvisor, DCGM, kube-state-metrics) through `on(namespace, pod)`."""

from __future__ import annotations

from dataclasses import dataclass

from volcano_monitor.core.exposition import Family, escape, resource_labels
from volcano_monitor.core.model import Pod

INFO = Family("volcano_pod_info", "Volcano attribution of a pod: join on (namespace, pod) to get queue, job, task.",
              ("namespace", "pod", "uid", "job_name", "job_kind", "task", "queue", "podgroup", "node"))
REQUESTS = Family("volcano_pod_resource_requests",
                  "Effective resource request of the pod (containers, init containers, overhead). A pod holding a "
                  "GPU also has resource=\"physical_gpu\" (unit gpu): its share of physical cards, e.g. 0.25 for a "
                  "quarter of one card under HAMi or Volcano vGPU, beside the raw vGPU resources "
                  "(docs/gpu-sharing.md).",
                  resource_labels("namespace", "pod", "queue", "job_name", "task"))
PHASE = Family("volcano_pod_status_phase", "The pod's current phase (1 for the current one).",
               ("namespace", "pod", "queue", "phase"))

FAMILIES = (INFO, REQUESTS, PHASE)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Attribution:
    """Where a pod belongs. Volcano Job pods say it in their labels; pods of Kubeflow or Spark jobs
    only name their PodGroup, whose queue and owner fill in the rest. (Weak-referenceable: the store
    shares one per job and forgets it with the job's last pod.)"""

    queue: str
    job_name: str
    job_kind: str


ALL = (True, True, True)


def render(pod: Pod, who: Attribution, wanted: tuple[bool, ...] = ALL) -> tuple[str, ...]:
    """The hot path (every pod event): label values are checked for escaping once, for all three rows.
    Rows of families not `wanted` (--metric-denylist) are not even formatted."""
    values: tuple[str, ...] = (pod.namespace, pod.name, pod.uid, who.job_name, who.job_kind, pod.task, who.queue,
                               pod.podgroup, pod.node_name, pod.phase)
    joined = "".join(values)
    if "\\" in joined or '"' in joined or "\n" in joined:
        values = tuple([escape(v) for v in values])
    ns, name, uid, job_name, job_kind, task, queue, podgroup, node, phase = values
    return (
        INFO.format((ns, name, uid, job_name, job_kind, task, queue, podgroup, node), "1") if wanted[0] else "",
        REQUESTS.format_resources((ns, name, queue, job_name, task), pod.requests) if wanted[1] else "",
        PHASE.format((ns, name, queue, phase), "1") if phase and wanted[2] else "",
    )


def exported(pod: Pod) -> tuple[object, ...]:
    """What `render` and the queue sums read from a pod (its key aside): equal means nothing to redo."""
    return (pod.uid, pod.job_name, pod.task, pod.queue, pod.podgroup, pod.node_name, pod.phase, pod.requests,
            pod.labels, pod.containers)
