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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from exporter._read import bad_type, intern
from exporter.families.base import Family, escape, format_value
from exporter.podrequests import Resources, read_resource_list, res_from

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


@dataclass(frozen=True, slots=True)
class Container:
    """What the fork read of one container: its spec resources and whether its status says running."""

    name: str
    requests: Resources
    limits: Resources


@dataclass(frozen=True, slots=True)
class Containers:
    """A pod's containers (spec) and `(name, running)` per container status, in status order."""

    spec: tuple[Container, ...]
    running: tuple[tuple[str, bool], ...]


NO_CONTAINERS = Containers((), ())


def parse_containers(raw: object, probs: list[str]) -> Containers:
    """`spec.containers[]` requests and limits (not init containers, as the fork) and
    `status.containerStatuses[]` running state. Never raises: bad shapes go to `probs` and are skipped."""
    if type(raw) is not dict:
        return NO_CONTAINERS
    spec, status = raw.get("spec"), raw.get("status")
    containers: list[Container] = []
    for i, c in enumerate(_items(spec, "containers", "spec.", probs)):
        path = f"spec.containers[{i}]."
        name = _name(c, path, probs)
        res = c.get("resources")
        if type(res) is not dict:
            if res is not None:
                probs.append(bad_type(path + "resources", "object", res))
            res = {}
        containers.append(Container(
            name,
            res_from(read_resource_list(res, "requests", path + "resources.", probs)),
            res_from(read_resource_list(res, "limits", path + "resources.", probs))))
    running = []
    for i, cs in enumerate(_items(status, "containerStatuses", "status.", probs)):
        path = f"status.containerStatuses[{i}]."
        name, state = _name(cs, path, probs), cs.get("state")
        if state is not None and type(state) is not dict:
            probs.append(bad_type(path + "state", "object", state))
        running.append((name, type(state) is dict and type(state.get("running")) is dict))
    if not containers and not running:
        return NO_CONTAINERS
    return Containers(tuple(containers), tuple(running))


def _name(item: Mapping[str, Any], path: str, probs: list[str]) -> str:
    name = item.get("name")
    if type(name) is str:
        return intern(name)
    if name is not None:
        probs.append(bad_type(path + "name", "string", name))
    return ""


def _items(parent: object, key: str, path: str, probs: list[str]) -> list[Mapping[str, Any]]:
    if type(parent) is not dict:
        return []
    value = parent.get(key)
    if type(value) is not list:
        if value is not None:
            probs.append(bad_type(path + key, "array", value))
        return []
    out: list[Mapping[str, Any]] = []
    for i, item in enumerate(value):
        if type(item) is dict:
            out.append(item)
        elif item is not None:
            probs.append(bad_type(f"{path}{key}[{i}]", "object", item))
    return out


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
