"""Physical GPUs behind shared-GPU requests (HAMi, Volcano vGPU), so that every count of GPUs means cards.

A device plugin that shares cards hands out *vGPUs*: four pods asking for `nvidia.com/gpu: 1` plus
`nvidia.com/gpucores: 25` under HAMi hold a quarter of one card each, not four cards. Counting the raw
resource made GPU-hours, efficiency, idle and cost four times too high on HAMi and zero under Volcano's
vGPU (`volcano.sh/vgpu-number` does not end in "/gpu"). This module turns a container's request into its
share of physical cards and a node's resources into physical cards; docs/gpu-sharing.md gives the facts
(resource names, units, defaults, annotations) and every assumption.

The share is added to a pod's requests as the derived resource `PHYSICAL_GPU`, so sums, rollups and
families carry it like any other resource; `physical_gpus` is what every GPU count reads.
Bad input is never an exception: it is counted by kind (`share_problems`, exposed by the programs),
logged once per kind, and a documented fallback is used.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from volcano_monitor.core.podrequests import Resources

__all__ = [
    "BASES",
    "DEFAULT_SPLIT",
    "PHYSICAL_GPU",
    "PHYSICAL_GPU_UNIT",
    "Basis",
    "NodeGpus",
    "ShareResult",
    "configure",
    "container_share",
    "current_basis",
    "is_gpu_resource",
    "node_gpus",
    "physical_gpus",
    "share_problems",
]

log = logging.getLogger(__name__)

# The derived resource: no "/" (so nothing that sums names ending in "/gpu" counts it twice, and no real
# extended resource can have this name: those must be domain-qualified). Exported as
# resource="physical_gpu", unit="gpu" (see core.quantity.resource_label_and_unit).
PHYSICAL_GPU = "physical-gpu"
PHYSICAL_GPU_UNIT = "gpu"

Basis = Literal["max", "cores", "memory"]
BASES: tuple[Basis, ...] = ("max", "cores", "memory")

# HAMi (Project-HAMi/HAMi, default names of its nvidia device config).
HAMI_COUNT = "nvidia.com/gpu"  # vGPUs, each on a different card
HAMI_MEMORY = "nvidia.com/gpumem"  # MiB per vGPU
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"  # percent of the card's memory per vGPU
HAMI_CORES = "nvidia.com/gpucores"  # percent of the card's cores per vGPU
HAMI_NODE_REGISTER = "hami.io/node-nvidia-register"
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
# Volcano's vGPU (volcano-sh/volcano deviceshare + Project-HAMi/volcano-vgpu-device-plugin).
VGPU_COUNT = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"  # MiB per vGPU
VGPU_MEMORY_PERCENT = "volcano.sh/vgpu-memory-percentage"
VGPU_CORES = "volcano.sh/vgpu-cores"  # percent per vGPU
VGPU_NODE_REGISTER = "volcano.sh/node-vgpu-register"
VGPU_ALLOCATED = "volcano.sh/vgpu-ids-new"
# GPU feature discovery's node labels.
GFD_COUNT = "nvidia.com/gpu.count"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"  # MiB

DEFAULT_SPLIT = 10  # deviceSplitCount of both plugins: vGPUs a card offers

_HAMI_EXTRA = frozenset({HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES})
_VGPU = frozenset({VGPU_COUNT, VGPU_MEMORY, VGPU_MEMORY_PERCENT, VGPU_CORES})


@dataclass(frozen=True, slots=True)
class ShareResult:
    """One container's physical GPUs. `plugin`: "hami" | "volcano-vgpu" | "whole" | "none";
    `assumption`: how the number was reached (docs/gpu-sharing.md lists them); `problem`: the kind of bad
    input met ("" when none), already counted."""

    gpus: float
    plugin: str
    assumption: str
    problem: str = ""


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """A node's physical cards. `memory_mib`: per card (0 unknown); `vgpus`: vGPU slots the node offers
    (its allocatable count resource); `plugin`: "hami" | "volcano-vgpu" | "whole" | "none"."""

    cards: float
    memory_mib: float
    product: str
    plugin: str
    vgpus: float = 0.0
    problem: str = ""


NO_GPUS = NodeGpus(0.0, 0.0, "", "none")


@dataclass(slots=True)
class _Config:
    basis: Basis = "max"
    card_memory_mib: float = 0.0  # assumed card memory for MiB requests on unknown cards (0: none)


_CONFIG = _Config()
_PROBLEMS: dict[str, int] = {}
_LOCK = threading.Lock()


def configure(basis: Basis | None = None, card_memory_mib: float | None = None) -> None:
    """Program-wide settings (the exporter's flags, the watchdog's settings) read by `parse_pod`."""
    if basis is not None:
        if basis not in BASES:
            raise ValueError(f"GPU share basis must be one of {', '.join(BASES)}, got {basis!r}")
        _CONFIG.basis = basis
    if card_memory_mib is not None:
        if not math.isfinite(card_memory_mib) or card_memory_mib < 0:
            raise ValueError(f"card memory must be >= 0 MiB, got {card_memory_mib!r}")
        _CONFIG.card_memory_mib = float(card_memory_mib)


def current_basis() -> Basis:
    return _CONFIG.basis


def share_problems() -> dict[str, int]:
    """Bad GPU-share input met so far, by kind (a copy): counted every time it is met."""
    with _LOCK:
        return dict(_PROBLEMS)


def _problem(kind: str, detail: str) -> str:
    with _LOCK:
        n = _PROBLEMS.get(kind, 0) + 1
        _PROBLEMS[kind] = n
    if n == 1:
        log.warning("GPU share: %s (%s); a fallback is used, further ones are only counted", detail, kind)
    return kind


def reset_problems() -> None:
    """For tests."""
    with _LOCK:
        _PROBLEMS.clear()


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
        known = name.endswith("/gpu") or name in _HAMI_EXTRA or name in _VGPU
        if len(_GPU_NAMES) < 4096:
            _GPU_NAMES[name] = known
    return known


def _as_map(values: Mapping[str, float] | Resources) -> Mapping[str, float]:
    return values if isinstance(values, Mapping) else dict(values)


def _percent(value: float | None, name: str, problems: list[str]) -> float | None:
    """A percentage as a fraction in [0, 1]; None when absent; out of range is counted and clamped."""
    if value is None:
        return None
    if value < 0:
        problems.append(_problem("negative", f"{name} = {value:g} is negative, ignored"))
        return None
    if value > 100:
        problems.append(_problem("percentage_over_100", f"{name} = {value:g} is over 100, taken as 100"))
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
        problems.append(_problem("negative", f"{mem_name} = {memory_mib:g} is negative, ignored"))
        memory_mib = None
    if memory_mib is not None and memory_mib > 0:
        card = card_memory_mib or _CONFIG.card_memory_mib
        if card > 0:
            mem_share = memory_mib / card
            how = "memory"
            if mem_share > 1:
                problems.append(_problem("memory_over_card", f"{mem_name} = {memory_mib:g} MiB is more than the "
                                                             f"card's {card:g} MiB, taken as the whole card"))
                mem_share = 1.0
        else:
            mem_share = None  # known to be a part of a card, but of which size is unknown
            how = "memory_unknown_card"
    else:
        mem_share = _percent(memory_pct, pct_name, problems)
        if mem_share is not None:
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
    problems.append(_problem("card_memory_unknown", f"{mem_name} in MiB without cores and with no known card "
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
    rq = _as_map(requests)
    lm = _as_map(limits)
    basis = basis or _CONFIG.basis

    def get(name: str) -> float | None:
        v = rq.get(name)
        return lm.get(name) if v is None else v

    problems: list[str] = []
    whole = 0.0
    for name in {*rq, *lm}:
        if name.endswith("/gpu") and not (name == HAMI_COUNT and any(get(n) is not None for n in _HAMI_EXTRA)):
            whole += get(name) or 0.0
    parts: list[ShareResult] = []
    if any(get(n) is not None for n in _VGPU):
        count = get(VGPU_COUNT)
        if count is None or count <= 0:
            problems.append(_problem("vgpu_without_count", f"{VGPU_MEMORY}/{VGPU_CORES} without a positive "
                                                          f"{VGPU_COUNT}: one vGPU assumed (as Volcano does)"))
            count = 1.0
        parts.append(_vgpu_share(count, get(VGPU_CORES), get(VGPU_MEMORY), get(VGPU_MEMORY_PERCENT),
                                 card_memory_mib, basis, (VGPU_CORES, VGPU_MEMORY, VGPU_MEMORY_PERCENT),
                                 "volcano-vgpu", problems))
    if any(get(n) is not None for n in _HAMI_EXTRA):
        count = get(HAMI_COUNT)
        if count is None or count <= 0:
            problems.append(_problem("vgpu_without_count", f"{HAMI_MEMORY}/{HAMI_CORES} without a positive "
                                                          f"{HAMI_COUNT}: one vGPU assumed (HAMi's default)"))
            count = 1.0
        parts.append(_vgpu_share(count, get(HAMI_CORES), get(HAMI_MEMORY), get(HAMI_MEMORY_PERCENT),
                                 card_memory_mib, basis, (HAMI_CORES, HAMI_MEMORY, HAMI_MEMORY_PERCENT),
                                 "hami", problems))
    if whole < 0:
        problems.append(_problem("negative", f"negative whole GPU count {whole:g}, ignored"))
        whole = 0.0
    problem = problems[0] if problems else ""
    if not parts:
        if whole:
            return ShareResult(whole, "whole", "whole", problem)
        return ShareResult(0.0, "none", "none", problem)
    gpus = whole + sum(p.gpus for p in parts)
    first = parts[0]
    return ShareResult(gpus, first.plugin, "+".join(p.assumption for p in parts), problem)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _register_devices(text: str) -> list[tuple[float, str]] | None:
    """`(memory MiB, type)` per card of a device plugin's node register annotation; None if unreadable.

    HAMi: a JSON list of {"id", "count", "devmem", "devcore", "type", ...} (v2.5+), or the older
    "id,count,devmem,devcore,type,numa,health[,index,mode]:" entries; Volcano's plugin:
    "id,count,devmem,type,health,mode:" entries."""
    text = text.strip()
    out: list[tuple[float, str]] = []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return None
        if not isinstance(items, list):
            return None
        for item in items:
            if not isinstance(item, dict):
                return None
            mem = _number(item.get("devmem"))
            kind = item.get("type")
            out.append((mem if mem and mem > 0 else 0.0, kind if isinstance(kind, str) else ""))
        return out
    for entry in text.split(":"):
        if "," not in entry:
            continue
        fields = entry.split(",")
        if len(fields) < 6:
            return None
        mem = _number(fields[2])
        kind = fields[3] if len(fields) == 6 else fields[4]
        out.append((mem if mem and mem > 0 else 0.0, kind))
    return out or None


def node_gpus(labels: Mapping[str, Any], annotations: Mapping[str, Any],
              allocatable: Mapping[str, float] | Resources) -> NodeGpus:
    """A node's physical cards: GPU feature discovery's labels first (`nvidia.com/gpu.count`, `.product`,
    `.memory`), then the device plugin's register annotation, then its allocatable (a vGPU count divided
    by the default split of 10 when nothing else says it, counted as `node_without_annotations`)."""
    alloc = _as_map(allocatable)
    gfd_cards = _number(labels.get(GFD_COUNT))
    gfd_memory = _number(labels.get(GFD_MEMORY))
    product = labels.get(GFD_PRODUCT)
    product = product if isinstance(product, str) else ""
    plugin, key, vgpus = "none", "", 0.0
    if VGPU_COUNT in alloc or VGPU_NODE_REGISTER in annotations:
        plugin, key, vgpus = "volcano-vgpu", VGPU_NODE_REGISTER, alloc.get(VGPU_COUNT, 0.0)
    elif HAMI_NODE_REGISTER in annotations:
        plugin, key, vgpus = "hami", HAMI_NODE_REGISTER, alloc.get(HAMI_COUNT, 0.0)
    elif any(name.endswith("/gpu") for name in alloc) or gfd_cards:
        whole = sum(v for name, v in alloc.items() if name.endswith("/gpu"))
        cards = gfd_cards if gfd_cards is not None and gfd_cards >= 0 else whole
        if gfd_cards and whole > gfd_cards:  # more GPUs offered than cards: a sharing plugin, unregistered
            _problem("node_without_annotations", f"{whole:g} GPUs allocatable on {gfd_cards:g} cards and no "
                                                 "device plugin annotation: cards from the GFD label")
            return NodeGpus(cards, gfd_memory or 0.0, product, "hami", whole, "node_without_annotations")
        return NodeGpus(cards, gfd_memory or 0.0, product, "whole", whole)
    else:
        return NO_GPUS
    raw = annotations.get(key)
    devices = _register_devices(raw) if isinstance(raw, str) else None
    if devices:
        memory = gfd_memory or max(m for m, _ in devices)
        return NodeGpus(gfd_cards if gfd_cards is not None else float(len(devices)), memory,
                        product or devices[0][1], plugin, vgpus)
    kind = "node_without_annotations" if raw is None else "bad_node_annotation"
    cards = gfd_cards if gfd_cards is not None else float(math.ceil(max(vgpus, 0.0) / DEFAULT_SPLIT))
    _problem(kind, f"{key} missing or unreadable: {cards:g} cards assumed "
                   f"({'GFD label' if gfd_cards is not None else f'{vgpus:g} vGPUs / {DEFAULT_SPLIT}'})")
    return NodeGpus(float(cards), gfd_memory or 0.0, product, plugin, vgpus, kind)
