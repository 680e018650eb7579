"""Pod families: `volcano_pod_info` is the join key that carries queue, job and task to any pod metric
(cAdvisor, DCGM, kube-state-metrics) through `on(namespace, pod)`."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.families.base import Family, resource_labels
from exporter.model import Pod

INFO = Family("volcano_pod_info", "Volcano attribution of a pod: join on (namespace, pod) to get queue, job, task.",
              ("namespace", "pod", "uid", "job_name", "job_kind", "task", "queue", "podgroup", "node"))
REQUESTS = Family("volcano_pod_resource_requests",
                  "Effective resource request of the pod (containers, init containers, overhead).",
                  resource_labels("namespace", "pod", "queue", "job_name", "task"))
PHASE = Family("volcano_pod_status_phase", "The pod's current phase (1 for the current one).",
               ("namespace", "pod", "queue", "phase"))

FAMILIES = (INFO, REQUESTS, PHASE)


@dataclass(frozen=True, slots=True)
class Attribution:
    """Where a pod belongs. Volcano Job pods say it in their labels; pods of Kubeflow or Spark jobs
    only name their PodGroup, whose queue and owner fill in the rest."""

    queue: str
    job_name: str
    job_kind: str


def render(pod: Pod, who: Attribution) -> tuple[str, ...]:
    ns, name = pod.namespace, pod.name
    return (
        INFO.line((ns, name, pod.uid, who.job_name, who.job_kind, pod.task, who.queue, pod.podgroup, pod.node_name), 1),
        REQUESTS.resource_lines((ns, name, who.queue, who.job_name, pod.task), pod.requests),
        PHASE.line((ns, name, who.queue, pod.phase), 1) if pod.phase else "",
    )
