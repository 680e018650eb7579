"""Objects the size and shape of a real cluster's, for bench/exporter.py (issue 28 item 5).

The simulator's objects carry what the exporter reads and little else (a pod is ~2.7 KB). A real
kube-apiserver v1.32 sends ~6-7 KB per Volcano pod: `metadata.managedFields`, the volumes, mounts,
tolerations and env that admission and the Volcano controller add, and the kubelet's full status. The
informer decodes all of it, so a bench on the simulator's objects cannot see what a real sync costs.

Each simulated object is filled in from the real Volcano v1.12.4 recordings in
`../shared/volcano/recorded/v1.12.4` (real controller and scheduler on Kubernetes v1.32):
- Pods: the recorded tf-dist-mnist `ps` pod's spec additions (secret/configMap/projected token volumes,
  their mounts, configMap env, ports, tolerations, securityContext, hostname/subdomain, defaults the API
  server sets) where the simulated pod lacks them; the kubelet's `hostIPs` and per-container
  `volumeMounts` in the status (kwok, which played the kubelet in the recordings, writes neither:
  they are synthesised in the shape kubelet v1.32 writes them).
- Jobs: the recorded Job's `plugins` and `policies` where the simulated Job lacks them.
- Every kind: `managedFields` with the recorded managers (pods: vc-controller-manager for metadata and
  spec, the kubelet for status; Jobs: the creating client for spec, vc-controller-manager for status;
  PodGroups: vc-controller-manager and vc-scheduler; Queues: the creating client, vc-controller-manager
  for `spec.parent`, vc-scheduler for status), each manager's FieldsV1 set generated from the fields it
  owns in this very object, keyed as the API server keys lists (containers by name, mounts by path,
  conditions by type, ...), as the recordings show them.
Nothing the exporter reads is changed: names, labels, owners, node, phase, requests and conditions are
the simulator's, so the bench's figures stay comparable with the naive baseline on the same bytes.

    .venv/bin/python bench/real_shaped.py   # prints the sizes of one shaped object of each kind as JSON
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson

Obj = dict[str, Any]
RECORDED = Path(__file__).resolve().parents[2] / "shared" / "volcano" / "recorded" / "v1.12.4"
TEMPLATES = {  # kind -> (recording, object name): the largest object of the kind in a steady phase
    "Pod": ("tf-ps-worker-completes.jsonl", "tensorflow-dist-mnist-ps-0"),
    "Job": ("tf-ps-worker-completes.jsonl", "tensorflow-dist-mnist"),
}
TEMPLATE_JOB = "tensorflow-dist-mnist"  # the recorded Job's name, in its volume and configMap names
# Lists the API server merges by key (core/v1 patchMergeKey / listMapKeys); every other list is atomic.
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "env": ("name",), "volumes": ("name",),
    "volumeMounts": ("mountPath",), "ports": ("containerPort", "protocol"), "conditions": ("type",),
    "podIPs": ("ip",), "hostIPs": ("ip",), "ownerReferences": ("uid",),
}
# Pod spec fields the API server defaults or admission adds (no manager of the creator's owns them).
POD_SPEC_DEFAULTED = ("nodeName", "serviceAccount", "tolerations", "priority", "preemptionPolicy")
POD_SPEC_FROM_TEMPLATE = ("volumes", "tolerations", "securityContext", "serviceAccount", "preemptionPolicy")


def load_templates(recorded: Path = RECORDED) -> dict[str, Obj]:
    """The last state of each template object in its recording."""
    found: dict[str, Obj] = {}
    for kind, (recording, name) in TEMPLATES.items():
        with open(recorded / recording, "rb") as lines:
            for line in lines:
                event = orjson.loads(line)
                obj = event["object"]
                if obj.get("kind") == kind and obj["metadata"]["name"] == name and event["type"] != "DELETED":
                    found[kind] = obj
        if kind not in found:
            raise SystemExit(f"{recorded / recording}: no {kind} {name} (are the recordings in ../shared?)")
    return found


def fields_v1(value: Any, key: str = "", top: bool = False) -> Obj:
    """The FieldsV1 set that owns `value` entirely: `f:<field>` per map key (with "." for the map
    itself, except at the top: the recordings have no "." in `f:metadata`), `k:{...}` per element of a
    keyed list, `{}` for leaves and atomic lists."""
    if isinstance(value, dict):
        out: Obj = {} if top or not value else {".": {}}
        for k, v in value.items():
            out[f"f:{k}"] = fields_v1(v, k)
        return out
    if isinstance(value, list) and key in LIST_KEYS and all(isinstance(item, dict) for item in value):
        out = {".": {}} if value else {}
        for item in value:
            element_key = {k: item.get(k) for k in LIST_KEYS[key]}
            element = fields_v1(item, "")
            element.setdefault(".", {})
            out["k:" + json.dumps(element_key, separators=(",", ":"))] = element
        return out
    return {}


def entry(manager: str, api_version: str, time: str, owned: Obj, subresource: str = "") -> Obj:
    found: Obj = {"manager": manager, "operation": "Update", "apiVersion": api_version, "time": time,
                  "fieldsType": "FieldsV1", "fieldsV1": {f"f:{k}": fields_v1(v, k, top=True) for k, v in owned.items()}}
    if subresource:
        found["subresource"] = subresource
    return found


def _renamed(value: Any, job: str) -> Any:
    """A deep copy of the template's `value` with the recorded Job's name replaced by `job`."""
    return orjson.loads(orjson.dumps(value).replace(TEMPLATE_JOB.encode(), job.encode()))


def shape_pod(pod: Obj, template: Obj) -> Obj:
    meta, spec, status = pod["metadata"], pod.setdefault("spec", {}), pod.setdefault("status", {})
    job = (meta.get("labels") or {}).get("volcano.sh/job-name") or meta["name"]
    tspec = _renamed(template["spec"], job)
    for key in POD_SPEC_FROM_TEMPLATE:
        if key in tspec:
            spec.setdefault(key, tspec[key])
    spec.setdefault("hostname", meta["name"])
    spec.setdefault("subdomain", job)
    tcontainer = tspec["containers"][0]
    for container in spec.get("containers") or []:
        container.setdefault("ports", tcontainer.get("ports", []))
        container.setdefault("volumeMounts", tcontainer.get("volumeMounts", []))
        env = container.setdefault("env", [])
        names = {e.get("name") for e in env}
        env.extend(e for e in tcontainer.get("env", []) if e.get("name") not in names)
    if status.get("hostIP"):
        status.setdefault("hostIPs", [{"ip": status["hostIP"]}])
    mounts = {c.get("name"): c.get("volumeMounts") or [] for c in spec.get("containers") or []}
    for cs in status.get("containerStatuses") or []:  # kubelet >= 1.30 reports each mount's state
        cs.setdefault("volumeMounts", [{**m, "readOnly": bool(m.get("readOnly")), "recursiveReadOnly": "Disabled"}
                                       for m in mounts.get(cs.get("name"), [])])
    created = meta.get("creationTimestamp") or ""
    owned_spec = {k: v for k, v in spec.items() if k not in POD_SPEC_DEFAULTED}
    owned_meta = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
    managed = [entry("vc-controller-manager", "v1", created, {"metadata": owned_meta, "spec": owned_spec})]
    kubelet_status = {k: v for k, v in status.items() if k != "qosClass"}
    if "conditions" in kubelet_status:
        kubelet_status["conditions"] = [c for c in status["conditions"] if c.get("type") != "PodScheduled"]
    if status.get("phase") not in (None, "Pending") or status.get("containerStatuses"):
        managed.append(entry("kubelet", "v1", status.get("startTime") or created, {"status": kubelet_status},
                             "status"))
    meta["managedFields"] = managed
    return pod


def shape_job(job: Obj, template: Obj) -> Obj:
    meta, spec = job["metadata"], job.setdefault("spec", {})
    for key in ("plugins", "policies"):
        if key in template["spec"]:
            spec.setdefault(key, copy.deepcopy(template["spec"][key]))
    created, version = meta.get("creationTimestamp") or "", job.get("apiVersion", "")
    owned = {"spec": {k: (v if k != "tasks" else []) for k, v in spec.items()}}  # CRD lists are atomic
    managed = [entry("kubectl-create", version, created, owned)]
    if job.get("status"):
        status = {k: ([] if isinstance(v, list) else v) for k, v in job["status"].items()}
        managed.append(entry("vc-controller-manager", version, _last_transition(job, created), {"status": status},
                             "status"))
    meta["managedFields"] = managed
    return job


def shape_podgroup(group: Obj) -> Obj:
    meta, version = group["metadata"], group.get("apiVersion", "")
    created = meta.get("creationTimestamp") or ""
    owned: Obj = {"spec": group.get("spec") or {}, "status": {}}
    if meta.get("ownerReferences"):
        owned = {"metadata": {"ownerReferences": meta["ownerReferences"]}, **owned}
    managed = [entry("vc-controller-manager", version, created, owned)]
    if group.get("status"):
        status = {k: ([] if isinstance(v, list) else v) for k, v in group["status"].items()}
        managed.append(entry("vc-scheduler", version, _last_transition(group, created), {"status": status}))
    meta["managedFields"] = managed
    return group


def shape_queue(queue: Obj) -> Obj:
    meta, version = queue["metadata"], queue.get("apiVersion", "")
    created, spec = meta.get("creationTimestamp") or "", queue.get("spec") or {}
    managed = [entry("kubectl-create", version, created, {"spec": {k: v for k, v in spec.items() if k != "parent"}})]
    if "parent" in spec:
        managed.append(entry("vc-controller-manager", version, created, {"spec": {"parent": spec["parent"]}}))
    if queue.get("status"):
        managed.append(entry("vc-scheduler", version, created, {"status": queue["status"]}, "status"))
    meta["managedFields"] = managed
    return queue


def _last_transition(obj: Obj, default: str) -> str:
    status = obj.get("status") or {}
    times = [c.get("lastTransitionTime") for c in status.get("conditions") or [] if isinstance(c, dict)]
    return max((t for t in times if isinstance(t, str)), default=default)


def shape(kind: str, raw: bytes, templates: dict[str, Obj]) -> bytes:
    """The simulated object `raw` (JSON of `kind`) as a real API server would send it."""
    obj = orjson.loads(raw)
    if kind == "Pod":
        obj = shape_pod(obj, templates["Pod"])
    elif kind == "Job":
        obj = shape_job(obj, templates["Job"])
    elif kind == "PodGroup":
        obj = shape_podgroup(obj)
    elif kind == "Queue":
        obj = shape_queue(obj)
    return orjson.dumps(obj)


def main() -> None:
    from volcano_monitor.simulator import resources as sim_types
    from volcano_monitor.simulator.driver import Driver
    from volcano_monitor.simulator.store import Store

    store = Store()
    Driver(store, "scale", pods=50, jobs=10, queues=4, namespaces=2).setup()
    templates = load_templates()
    out: dict[str, Any] = {}
    for rtype in (sim_types.PODS, sim_types.JOBS, sim_types.PODGROUPS, sim_types.QUEUES):
        raws = [s.raw for s in store.items(rtype)]
        shaped = [shape(rtype.kind, raw, templates) for raw in raws]
        out[rtype.kind] = {"simulated_bytes_mean": round(sum(map(len, raws)) / len(raws)),
                           "shaped_bytes_mean": round(sum(map(len, shaped)) / len(shaped))}
    recorded = templates["Pod"]
    out["recorded_pod_bytes"] = len(orjson.dumps(recorded))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
