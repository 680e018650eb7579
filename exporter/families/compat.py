"""The families of Volcano's forked kube-state-metrics (`volcanosh/kube-state-metrics:v2.0.0-beta`), served
only with `--compat-kube-state-metrics-fork`, so that the five Grafana dashboards Volcano's chart installs
show data without the unmaintained fork (docs/compat.md has the mapping).

Names and label sets are the fork's (its `internal/store/pod.go`): per container of a pod, with the
kube-state-metrics `namespace`/`pod` prefix. These names belong to the fork, not to Volcano's scheduler or
controllers, so DESIGN §3's rule does not forbid them; they are the only families not named `volcano_*`.

Two deliberate differences, both documented: the fork covered only pods labelled `volcano.sh/job-name`
and read `queue` from the pod's label; here every pod the exporter tracks is covered and `queue` /
`volcano_job` come from the same attribution as `volcano_pod_info` (PodGroup owner for Kubeflow or
Spark pods). And Volcano's queue and namespace dashboards ask for `resource="gpu"`, which the fork never
wrote (it wrote `nvidia_com_gpu`): each `<vendor>/gpu` request or limit also gets a `resource="gpu"`
series, so those panels have data. Every dashboard query filters on `resource`, so nothing counts twice.
"""

from __future__ import annotations

import re
from functools import lru_cache

from volcano_monitor.core.containers import NO_CONTAINERS, Containers
from volcano_monitor.core.exposition import Family, escape, format_value
from volcano_monitor.core.podrequests import Resources

REQUESTS = Family("kube_pod_volcano_container_resource_requests",
                  "Requests of a container of a Volcano pod (Volcano's kube-state-metrics fork; compatibility).",
                  ("namespace", "pod", "container", "node", "volcano_namespace", "volcano_job", "queue",
                   "resource", "unit"))
LIMITS = Family("kube_pod_volcano_container_resource_limits",
                "Limits of a container of a Volcano pod (Volcano's kube-state-metrics fork; compatibility).",
                REQUESTS.labels)
RUNNING = Family("kube_pod_volcano_container_status_running",
                 "1 while the container of a Volcano pod is running, else 0 (Volcano's kube-state-metrics "
                 "fork; compatibility).",
                 ("namespace", "pod", "container", "job_name", "queue"))

FAMILIES = (REQUESTS, LIMITS, RUNNING)

_BYTES = frozenset({"memory", "storage", "ephemeral-storage"})
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def fork_resource(name: str) -> tuple[str, str] | None:
    """`(resource, unit)` as the fork wrote them, or None for what it skipped (e.g. `pods`)."""
    label = _INVALID.sub("_", name)
    if name == "cpu":
        return label, "core"
    if name in _BYTES or name.startswith(("hugepages-", "attachable-volumes-")):
        return label, "byte"
    if "/" in name and not name.startswith(("kubernetes.io/", "requests.")):  # an extended resource
        return label, "integer"
    return None


@lru_cache(maxsize=4096)
def _suffixes(resources: Resources) -> tuple[str, ...]:
    """`resource="cpu",unit="core"} 4\n` per resource the fork exported, plus the `gpu` sum; equal
    resource tuples are shared between pods (the model interns them), so this is cached."""
    out = []
    gpus = 0.0
    for name, amount in resources:
        found = fork_resource(name)
        if found is None:
            continue
        label, unit = found
        out.append(f'resource="{label}",unit="{unit}"}} {format_value(amount)}\n')
        if name.endswith("/gpu"):
            gpus += amount
    if gpus:
        out.append(f'resource="gpu",unit="integer"}} {format_value(gpus)}\n')
    return tuple(out)


def _resource_lines(family: Family, lead: str, resources: Resources) -> str:
    if not resources:
        return ""
    prefix = f"{family.name}{{{lead}"
    return "".join([prefix + suffix for suffix in _suffixes(resources)])


def render(namespace: str, pod: str, node: str, job_name: str, queue: str, containers: Containers) -> tuple[str, ...]:
    """Rows for `FAMILIES`, label values already escaped by the caller (`pod.render`'s values)."""
    if containers is NO_CONTAINERS:
        return ("", "", "")
    requests, limits = [], []
    for c in containers.spec:
        cname = escape(c.name)
        lead = (f'namespace="{namespace}",pod="{pod}",container="{cname}",node="{node}",'
                f'volcano_namespace="{namespace}",volcano_job="{job_name}",queue="{queue}",')
        requests.append(_resource_lines(REQUESTS, lead, c.requests))
        limits.append(_resource_lines(LIMITS, lead, c.limits))
    running = "".join(RUNNING.format((namespace, pod, escape(name), job_name, queue), "1" if up else "0")
                      for name, up in containers.running)
    return "".join(requests), "".join(limits), running
