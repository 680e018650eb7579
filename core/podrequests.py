"""Resource lists and the effective request of a pod, computed the way Kubernetes does it.

``Resources`` is a tuple of ``(resource name, value in base units)`` pairs sorted by name: small,
immutable and hashable. Equal lists are shared (many pods have the same requests), so keeping one per
pod costs a pointer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from volcano_monitor.core.fields import arr, bad_type, intern, item_obj, obj, string
from volcano_monitor.core.quantity import QuantityError, parse_quantity, parse_short

__all__ = [
    "NO_RESOURCES",
    "Resources",
    "add_init_containers",
    "pod_resources",
    "read_resource_list",
    "res_add",
    "res_dict",
    "res_from",
    "res_get",
    "res_max",
    "res_scale",
    "res_sum",
]

Resources = tuple[tuple[str, float], ...]
NO_RESOURCES: Resources = ()

_SHARED: dict[Resources, Resources] = {}
_SHARED_MAX = 65536


def res_from(values: Mapping[str, float], share: bool = True) -> Resources:
    """A ``Resources`` from a mapping (names interned, equal lists shared).

    ``share=False`` for amounts that change all the time (a queue's ``status.allocated``, sums): each
    would be a new entry of the shared table, which then grew for a day before it was cleared (up to 17 MB),
    and nothing else would ever hold the same value."""
    if not values:
        return NO_RESOURCES
    res = tuple(sorted(values.items()))
    shared = _SHARED.get(res)
    if shared is not None:
        return shared
    res = tuple([(intern(k), v) for k, v in res])
    if share:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        _SHARED[res] = res
    return res


def res_dict(res: Resources) -> dict[str, float]:
    return dict(res)


def res_get(res: Resources, name: str, default: float = 0.0) -> float:
    for k, v in res:
        if k == name:
            return v
    return default


def _add_into(acc: dict[str, float], values: Iterable[tuple[str, float]]) -> None:
    for k, v in values:
        acc[k] = acc.get(k, 0.0) + v


def _max_into(acc: dict[str, float], values: dict[str, float]) -> None:
    for k, v in values.items():
        cur = acc.get(k)
        if cur is None or v > cur:
            acc[k] = v


def res_add(a: Resources, b: Resources) -> Resources:
    if not b:
        return a
    if not a:
        return b
    acc = dict(a)
    _add_into(acc, b)
    return res_from(acc, share=False)


def res_sum(items: Iterable[Resources]) -> Resources:
    acc: dict[str, float] = {}
    for r in items:
        _add_into(acc, r)
    return res_from(acc, share=False)


def res_max(a: Resources, b: Resources) -> Resources:
    """Per resource maximum (a resource missing on one side counts as absent, not 0)."""
    acc = dict(a)
    _max_into(acc, dict(b))
    return res_from(acc, share=False)


def res_scale(a: Resources, factor: float) -> Resources:
    return res_from({k: v * factor for k, v in a}, share=False)


def read_resource_list(d: Mapping[str, Any], key: str, path: str, probs: list[str],
                       cache: bool = True) -> dict[str, float]:
    """A ``ResourceList`` (``{"cpu": "500m", "memory": "1Gi"}``); bad quantities are reported and skipped.
    ``cache=False``: amounts that change all the time (see `parse_quantity`)."""
    m = d.get(key)
    if type(m) is not dict:
        if m is not None:
            probs.append(bad_type(path + key, "object", m))
        return {}
    out: dict[str, float] = {}
    for name, q in m.items():
        try:
            out[name] = parse_short(q) if cache and type(q) is str and len(q) <= 32 else parse_quantity(q, cache)
        except QuantityError as exc:
            if q is not None:
                probs.append(f"{path}{key}.{name}: {exc}")
    return out


def _container(c: Mapping[str, Any], path: str, probs: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    res = c.get("resources")
    if type(res) is not dict:
        if res is not None:
            probs.append(bad_type(path + "resources", "object", res))
        return {}, {}
    rpath = path + "resources."
    requests = read_resource_list(res, "requests", rpath, probs)
    limits = read_resource_list(res, "limits", rpath, probs)
    for name, value in limits.items():  # API defaulting: a limit without a request is the request
        if name not in requests:
            requests[name] = value
    return requests, limits


# Memo of single-container pods: ((requests items), (limits items)) -> (requests, limits). Only keys
# whose quantities are all strings (as the API server writes them) are stored, so no other JSON value
# (True == 1) can hit an entry; only entries that parsed without problems are stored.
_SINGLE: dict[object, tuple[Resources, Resources]] = {}


def _all_str(m: object) -> bool:
    return m is None or (type(m) is dict and all(type(v) is str for v in m.values()))


def pod_resources(spec: Mapping[str, Any], path: str, probs: list[str]) -> tuple[Resources, Resources]:
    """``(requests, limits)`` of a pod spec as the scheduler and kubelet see them.

    Per resource: max(sum of regular containers + restartable ("sidecar") init containers, the
    largest init container plus the sidecars started before it), then pod-level ``spec.resources``
    overrides, plus ``spec.overhead`` (added to limits only where a limit exists). ``path`` is the
    prefix of ``spec`` (``"spec."`` for a pod, ``"spec.tasks[0].template.spec."`` for a job task).
    """
    containers = spec.get("containers")
    if (
        type(containers) is list
        and len(containers) == 1
        and "initContainers" not in spec
        and "resources" not in spec
        and "overhead" not in spec
    ):
        c = containers[0]
        res = c.get("resources") if type(c) is dict else None
        if type(res) is dict:  # the common case: one container, memoised on its resources
            rq = res.get("requests")
            lm = res.get("limits")
            try:
                key = (
                    tuple(rq.items()) if type(rq) is dict else rq,
                    tuple(lm.items()) if type(lm) is dict else lm,
                )
                hit = _SINGLE.get(key)
            except TypeError:  # unhashable junk: the slow path reports it
                hit = key = None
            if hit is not None:
                return hit
            n = len(probs)
            r, lim = _container(c, f"{path}containers[0].", probs)
            result = res_from(r), res_from(lim)
            if key is not None and len(probs) == n and _all_str(rq) and _all_str(lm):
                if len(_SINGLE) >= _SHARED_MAX:
                    _SINGLE.clear()
                _SINGLE[key] = result
            return result
    reqs: dict[str, float] = {}
    lims: dict[str, float] = {}
    for i, raw in enumerate(arr(spec, "containers", path, probs)):
        cpath = f"{path}containers[{i}]"
        r, lim = _container(item_obj(raw, cpath, probs), cpath + ".", probs)
        _add_into(reqs, r.items())
        _add_into(lims, lim.items())
    if "initContainers" in spec:
        _add_init_containers(spec, path, probs, reqs, lims)
    if "resources" in spec:
        pod_level = obj(spec, "resources", path, probs)
        ppath = path + "resources."
        pod_reqs = read_resource_list(pod_level, "requests", ppath, probs)
        pod_lims = read_resource_list(pod_level, "limits", ppath, probs)
        reqs.update(pod_lims)  # a pod-level limit without a pod-level request is the request
        reqs.update(pod_reqs)
        lims.update(pod_lims)
    if "overhead" in spec:
        overhead = read_resource_list(spec, "overhead", path, probs)
        _add_into(reqs, overhead.items())
        for name, value in overhead.items():
            if name in lims:
                lims[name] += value
    return res_from(reqs), res_from(lims)


def _add_init_containers(
    spec: Mapping[str, Any], path: str, probs: list[str], reqs: dict[str, float], lims: dict[str, float]
) -> None:
    init_reqs: list[tuple[dict[str, float], bool]] = []
    init_lims: list[tuple[dict[str, float], bool]] = []
    for i, raw in enumerate(arr(spec, "initContainers", path, probs)):
        cpath = f"{path}initContainers[{i}]"
        c = item_obj(raw, cpath, probs)
        r, lim = _container(c, cpath + ".", probs)
        sidecar = string(c, "restartPolicy", cpath + ".", probs) == "Always"
        init_reqs.append((r, sidecar))
        init_lims.append((lim, sidecar))
    add_init_containers(reqs, init_reqs)
    add_init_containers(lims, init_lims)


def add_init_containers(running: dict[str, float], inits: Iterable[tuple[Mapping[str, float], bool]]) -> None:
    """Kubernetes' rule for init containers, in place on `running` (the sum of the regular containers):
    per resource max(regular + all restartable ("sidecar") init containers, each run-to-completion init
    container + the sidecars started before it). `inits`: (amounts, is_sidecar) in spec order.

    Shared with `core.gpushare` (physical-GPU shares follow the same rule), so the two cannot drift."""
    peak: dict[str, float] = {}
    sidecars: dict[str, float] = {}
    for amounts, sidecar in inits:
        if sidecar:  # keeps running beside everything after it
            _add_into(running, amounts.items())
            _add_into(sidecars, amounts.items())
        else:  # runs to completion, alongside the sidecars started before it
            alone = dict(amounts)
            _add_into(alone, sidecars.items())
            _max_into(peak, alone)
    _max_into(running, peak)
