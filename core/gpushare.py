"""Physical GPUs behind shared-GPU requests (HAMi, Volcano vGPU), so that every count of GPUs means cards.

A device plugin that shares cards hands out *vGPUs*: four pods asking for `nvidia.com/gpu: 1` plus
`nvidia.com/gpucores: 25` and `nvidia.com/gpumem-percentage: 25` under HAMi hold a quarter of one card
each, not four cards. Counting the raw resource made GPU-hours, efficiency, idle and cost four times too
high on HAMi and zero under Volcano's vGPU (`volcano.sh/vgpu-number` does not end in "/gpu"). This module
turns a container's request into its share of physical cards (nodes: :mod:`core.gpunodes`, re-exported
here); docs/gpu-sharing.md gives the facts (resource names, units, defaults, annotations) and every assumption.

The share is added to a pod's requests as the derived resource `PHYSICAL_GPU`, so sums, rollups and
families carry it like any other resource; `physical_gpus` is what every GPU count reads.
Bad input is never an exception: it is counted by kind (`share_problems`, exposed by the programs),
logged once per kind, and a documented fallback is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from volcano_monitor.core.fields import EMPTY_OBJ
from volcano_monitor.core.gpufacts import (
    DEFAULT_SPLIT,
    HAMI_CORES,
    HAMI_COUNT,
    HAMI_EXTRA,
    HAMI_MEMORY,
    HAMI_MEMORY_PERCENT,
    PROBLEM_KINDS,
    VGPU,
    VGPU_CORES,
    VGPU_COUNT,
    VGPU_MEMORY,
    VGPU_MEMORY_PERCENT,
    as_map,
    note_problem,
    reset_problems,
    share_problems,
)
from volcano_monitor.core.gpunodes import NO_GPUS, AllocatedDevice, NodeGpus, allocated_devices, node_gpus
from volcano_monitor.core.podrequests import Resources, add_init_containers, read_resource_list, res_from

__all__ = [
    "BASES",
    "DEFAULT_SPLIT",
    "NO_GPUS",
    "PHYSICAL_GPU",
    "PHYSICAL_GPU_UNIT",
    "PROBLEM_KINDS",
    "AllocatedDevice",
    "Basis",
    "CardMemory",
    "NodeGpus",
    "ShareResult",
    "allocated_devices",
    "configure",
    "container_share",
    "current_basis",
    "group_gpus",
    "has_gpu",
    "is_gpu_resource",
    "node_gpus",
    "physical_gpus",
    "pod_share",
    "reset_problems",
    "share_problems",
    "with_physical_gpu",
]

# The derived resource: no "/" (so nothing that sums names ending in "/gpu" counts it twice, and no real
# extended resource can have this name: those must be domain-qualified). Exported as
# resource="physical_gpu", unit="gpu" (see core.quantity.resource_label_and_unit).
PHYSICAL_GPU = "physical-gpu"
PHYSICAL_GPU_UNIT = "gpu"

Basis = Literal["max", "cores", "memory"]
BASES: tuple[Basis, ...] = ("max", "cores", "memory")

CardMemory = Callable[[str], float]
"""Node name -> memory of one of its cards in MiB (0: unknown), e.g. from `node_gpus(...).memory_mib`."""


@dataclass(frozen=True, slots=True)
class ShareResult:
    """One container's (or pod's) physical GPUs. `plugin`: "hami" | "volcano-vgpu" | "whole" | "none";
    `assumption`: how the number was reached (docs/gpu-sharing.md lists them); `problem`: the kind of bad
    input met ("" when none), already counted."""

    gpus: float
    plugin: str
    assumption: str
    problem: str = ""
    problems: tuple[str, ...] = ()  # every kind met (`problem` is the first), for counting memo hits again


@dataclass(slots=True)
class _Config:
    basis: Basis = "max"
    card_memory_mib: float = 0.0  # assumed card memory for MiB requests on unknown cards (0: none)


_CONFIG = _Config()


def configure(basis: Basis | None = None, card_memory_mib: float | None = None) -> None:
    """Program-wide settings (the exporter's flags, the watchdog's settings), read by `parse_pod` and
    `parse_job` which have no other way to get them."""
    if basis is not None:
        if basis not in BASES:
            raise ValueError(f"GPU share basis must be one of {', '.join(BASES)}, got {basis!r}")
        _CONFIG.basis = basis
    if card_memory_mib is not None:
        if not math.isfinite(card_memory_mib) or card_memory_mib < 0:
            raise ValueError(f"card memory must be >= 0 MiB, got {card_memory_mib!r}")
        _CONFIG.card_memory_mib = float(card_memory_mib)
    _MEMO.clear()


def current_basis() -> Basis:
    return _CONFIG.basis


def physical_gpus(resources: Resources) -> float:
    """Physical GPUs of a request: the `PHYSICAL_GPU` entry, else the sum of whole `*/gpu` (what was
    counted before shares existed: allocatable, quotas and requests of pods parsed elsewhere)."""
    total = 0.0
    for name, amount in resources:
        if name == PHYSICAL_GPU:
            return amount
        if name.endswith("/gpu"):
            total += amount
    return total


_GPU_NAMES: dict[str, bool] = {}


def is_gpu_resource(name: str) -> bool:
    """Whether a container asking for `name` holds (part of) a GPU: the hot path's cheap test."""
    known = _GPU_NAMES.get(name)
    if known is None:
        known = name.endswith("/gpu") or name in HAMI_EXTRA or name in VGPU
        if len(_GPU_NAMES) < 4096:
            _GPU_NAMES[name] = known
    return known


def _percent(value: float | None, name: str, problems: list[str]) -> float | None:
    """A percentage as a fraction in [0, 1]; None when absent; out of range is counted and clamped."""
    if value is None:
        return None
    if value < 0:
        problems.append(note_problem("negative", f"{name} = {value:g} is negative, ignored"))
        return None
    if value > 100:
        problems.append(note_problem("percentage_over_100", f"{name} = {value:g} is over 100, taken as 100"))
        return 1.0
    return value / 100


def _vgpu_share(count: float, cores: float | None, memory_mib: float | None, memory_pct: float | None,
                card_memory_mib: float, basis: Basis, names: tuple[str, str, str], plugin: str,
                problems: list[str]) -> ShareResult:
    """`count` vGPUs of `plugin`, each with `cores` percent, `memory_mib` MiB or `memory_pct` percent."""
    cores_name, mem_name, pct_name = names
    core_share = _percent(cores, cores_name, problems)
    if core_share == 0:  # 0 cores: no core limit of its own, it competes for the whole card
        core_share = None
    mem_share: float | None
    how = ""
    if memory_mib is not None and memory_mib < 0:
        problems.append(note_problem("negative", f"{mem_name} = {memory_mib:g} is negative, ignored"))
        memory_mib = None
    if memory_mib is not None and memory_mib > 0:
        card = card_memory_mib or _CONFIG.card_memory_mib
        if card > 0:
            mem_share = memory_mib / card
            how = "memory"
            if mem_share > 1:
                problems.append(note_problem("memory_over_card", f"{mem_name} = {memory_mib:g} MiB is more than the "
                                                             f"card's {card:g} MiB, taken as the whole card"))
                mem_share = 1.0
        else:
            mem_share = None  # known to be a part of a card, but of which size is unknown
            how = "memory_unknown_card"
    else:
        mem_share = _percent(memory_pct, pct_name, problems)
        if mem_share:  # 0 % is "not asked" to both plugins (HAMi: it would mean no limit at all)
            how = "memory_percentage"
        else:  # both plugins give the whole card's memory when neither is asked for
            mem_share, how = 1.0, "memory_default_whole"
    order: tuple[tuple[float | None, str], ...]
    if basis == "cores":
        order = ((core_share, "cores"), (mem_share, how))
    elif basis == "memory":
        order = ((mem_share, how), (core_share, "cores"))
    else:
        known = [(s, a) for s, a in ((core_share, "cores"), (mem_share, how)) if s is not None]
        order = (max(known),) if known else ()
    for share, assumption in order:
        if share is not None:
            return ShareResult(count * share, plugin, assumption, problems[0] if problems else "")
    problems.append(note_problem("card_memory_unknown", f"{mem_name} in MiB without cores and with no known card "
                                                    "memory (give the card memory), counted as whole cards"))
    return ShareResult(count, plugin, "card_memory_unknown_whole", problems[0])


def container_share(requests: Mapping[str, float] | Resources, limits: Mapping[str, float] | Resources = (),
                    annotations: Mapping[str, Any] | None = None, card_memory_mib: float = 0.0,
                    basis: Basis | None = None) -> ShareResult:
    """Physical GPUs of one container: per vGPU max(cores share, memory share of the card) (or the one
    `basis` names) x its vGPU count; a whole `*/gpu` without HAMi's extra resources stays whole.

    `requests`/`limits` in base units (as `core.podrequests` parses them; a limit without a request is the
    request). `card_memory_mib`: memory of the card it runs on, when known (0: the configured default,
    else unknown). `annotations`: the pod's (reserved: the plugins' allocation annotations repeat the
    request in MiB, not the card's size, so they add nothing yet)."""
    rq = as_map(requests)
    lm = as_map(limits)
    basis = basis or _CONFIG.basis

    def get(name: str) -> float | None:
        v = rq.get(name)
        return lm.get(name) if v is None else v

    problems: list[str] = []
    whole = 0.0
    for name in {*rq, *lm}:
        if name.endswith("/gpu") and not (name == HAMI_COUNT and any(get(n) is not None for n in HAMI_EXTRA)):
            whole += get(name) or 0.0
    parts: list[ShareResult] = []
    if any(get(n) is not None for n in VGPU):
        count = get(VGPU_COUNT)
        if count is None or count <= 0:
            # Volcano gives one vGPU to a container with vgpu-memory alone, none to cores or percentage alone
            count = 1.0 if (get(VGPU_MEMORY) or 0) > 0 else 0.0
            problems.append(note_problem("vgpu_without_count", f"Volcano vGPU resources without a positive "
                                                               f"{VGPU_COUNT}: {count:g} vGPU assumed, as Volcano's "
                                                               "scheduler does"))
        parts.append(_vgpu_share(count, get(VGPU_CORES), get(VGPU_MEMORY), get(VGPU_MEMORY_PERCENT),
                                 card_memory_mib, basis, (VGPU_CORES, VGPU_MEMORY, VGPU_MEMORY_PERCENT),
                                 "volcano-vgpu", problems))
    if any(get(n) is not None for n in HAMI_EXTRA):
        count = get(HAMI_COUNT)
        if count is None or count <= 0:
            problems.append(note_problem("vgpu_without_count", f"{HAMI_MEMORY}/{HAMI_CORES} without a positive "
                                                          f"{HAMI_COUNT}: one vGPU assumed (HAMi's default)"))
            count = 1.0
        parts.append(_vgpu_share(count, get(HAMI_CORES), get(HAMI_MEMORY), get(HAMI_MEMORY_PERCENT),
                                 card_memory_mib, basis, (HAMI_CORES, HAMI_MEMORY, HAMI_MEMORY_PERCENT),
                                 "hami", problems))
    if whole < 0:
        problems.append(note_problem("negative", f"negative whole GPU count {whole:g}, ignored"))
        whole = 0.0
    problem = problems[0] if problems else ""
    met = tuple(problems)
    if not parts:
        if whole:
            return ShareResult(whole, "whole", "whole", problem, met)
        return ShareResult(0.0, "none", "none", problem, met)
    gpus = whole + sum(p.gpus for p in parts)
    first = parts[0]
    return ShareResult(gpus, first.plugin, "+".join(p.assumption for p in parts), problem, met)


# A vGPU count and the per-vGPU resources beside it, per plugin (a PodGroup's minResources sums them)
_PER_VGPU = ((HAMI_COUNT, (HAMI_CORES, HAMI_MEMORY, HAMI_MEMORY_PERCENT)),
             (VGPU_COUNT, (VGPU_CORES, VGPU_MEMORY, VGPU_MEMORY_PERCENT)))


def group_gpus(min_resources: Resources) -> float:
    """Physical GPUs of a PodGroup's `minResources` (the gang before any pod exists): the sum over its pods
    of each plugin's count and per-vGPU resources (4 pods x {gpu 1, gpucores 25} -> {gpu 4, gpucores
    100}), not one container's request. Read as that many vGPUs of the mean size (exact for pods of one
    shape with one vGPU each, the usual gang); whole `*/gpu` as before. Without this a waiting HAMi gang
    counted its vGPUs as cards and a Volcano-vGPU gang as no GPU at all."""
    if not min_resources or any(name == PHYSICAL_GPU for name, _ in min_resources):
        return physical_gpus(min_resources)
    values = dict(min_resources)
    shared = False
    for count_name, per_vgpu in _PER_VGPU:
        count = values.get(count_name, 0.0)
        present = [name for name in per_vgpu if name in values]
        if present:
            shared = True
            if count > 1:
                for name in present:
                    values[name] /= count
    if not shared and VGPU_COUNT in values:  # Volcano vGPUs without per-vGPU resources: whole cards each
        shared = True
    return container_share(values).gpus if shared else physical_gpus(min_resources)


def has_gpu(requests: Resources) -> bool:
    """Whether a pod's (or container's) request holds any GPU: what the hot path asks of every pod (one
    dict lookup per resource name once the names are known)."""
    names = _GPU_NAMES
    for name, _ in requests:
        known = names.get(name)
        if known or (known is None and is_gpu_resource(name)):
            return True
    return False


def pod_share(spec: Mapping[str, Any], annotations: Mapping[str, Any] | None = None,
              card_memory_mib: float = 0.0, basis: Basis | None = None) -> ShareResult:
    """Physical GPUs of a pod spec by Kubernetes' rule for requests, the one `pod_resources` follows (the
    same code: `add_init_containers`): max(its containers + restartable ("sidecar") init containers, each
    run-to-completion init container + the sidecars started before it). Problems of the spec itself were
    reported by `pod_resources`; they are not repeated."""
    ignored: list[str] = []
    running = {"gpus": 0.0}
    inits: list[tuple[dict[str, float], bool]] = []
    kinds: list[str] = []
    assumptions: list[str] = []
    problem = ""
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if type(items) is not list:
            continue
        for c in items:
            res = c.get("resources") if type(c) is dict else None
            if type(res) is not dict:
                continue
            rq = read_resource_list(res, "requests", "", ignored)
            lm = read_resource_list(res, "limits", "", ignored)
            if not any(is_gpu_resource(n) for n in rq) and not any(is_gpu_resource(n) for n in lm):
                continue
            share = container_share(rq, lm, annotations, card_memory_mib, basis)
            problem = problem or share.problem
            assumptions.append(share.assumption)
            if share.plugin != "none":
                kinds.append(share.plugin)
            if key == "containers":
                running["gpus"] += share.gpus
            else:
                inits.append(({"gpus": share.gpus}, c.get("restartPolicy") == "Always"))
    add_init_containers(running, inits)
    if not kinds:
        return ShareResult(running["gpus"], "none", "none", problem)
    return ShareResult(running["gpus"], kinds[0], "+".join(dict.fromkeys(assumptions)), problem)


_MEMO: dict[tuple[object, ...], tuple[Resources, tuple[str, ...]]] = {}
_MEMO_MAX = 16384


def _simple(spec: Mapping[str, Any]) -> bool:
    containers = spec.get("containers")
    return (type(containers) is list and len(containers) == 1 and "initContainers" not in spec
            and "resources" not in spec and "overhead" not in spec)


def with_physical_gpu(requests: Resources, spec: Mapping[str, Any], annotations: Mapping[str, Any] = EMPTY_OBJ,
                      card_memory_mib: float = 0.0) -> Resources:
    """`requests` (a pod's, from `pod_resources(spec)`) plus `PHYSICAL_GPU` when it holds a GPU.

    Pods without a GPU cost one loop over their few resource names. A one-container pod's request is its
    container's (limits included), so its share is a function of (requests, card memory, the configured
    basis and card memory; `configure` clears the memo) and is memoised on it, bad input included: a HAMi
    pod asking MiB on an unknown card would otherwise be recomputed on each of its events. The problems it
    met are counted again on each hit, so the counters still count every meeting (docs/gpu-sharing.md)."""
    if not has_gpu(requests):
        return requests
    simple = _simple(spec)
    key = (requests, card_memory_mib)
    if simple:
        hit = _MEMO.get(key)
        if hit is not None:
            for kind in hit[1]:
                note_problem(kind, "")  # counted before: the first was logged with its detail
            return hit[0]
        share = container_share(requests, (), annotations, card_memory_mib)
    else:
        share = pod_share(spec, annotations, card_memory_mib)
    values = dict(requests)
    values[PHYSICAL_GPU] = share.gpus
    out = res_from(values)
    if simple:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = (out, share.problems)
    return out
