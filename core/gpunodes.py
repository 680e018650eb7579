"""A node's physical GPUs: cards, memory per card, product and which device plugin shares them.

Capacity in cards, not vGPU slots: a HAMi node offering `nvidia.com/gpu: 40` may hold 4 cards split 10
ways. GPU feature discovery's labels say it best, then the device plugin's register annotation, then
allocatable (docs/gpu-sharing.md). Re-exported by :mod:`core.gpushare`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.gpufacts import (
    DEFAULT_SPLIT,
    GFD_COUNT,
    GFD_MEMORY,
    GFD_MIG_STRATEGY,
    GFD_PRODUCT,
    HAMI_ALLOCATED,
    HAMI_COUNT,
    HAMI_NODE_REGISTER,
    MIG_PRODUCT_MARK,
    VGPU_ALLOCATED,
    VGPU_COUNT,
    VGPU_MEMORY,
    VGPU_NODE_REGISTER,
    as_map,
    note_problem,
    number,
)
from volcano_monitor.core.podrequests import Resources

__all__ = ["NO_GPUS", "AllocatedDevice", "NodeGpus", "allocated_devices", "node_gpus"]


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
            mem = number(item.get("devmem"))
            kind = item.get("type")
            out.append((mem if mem and mem > 0 else 0.0, kind if isinstance(kind, str) else ""))
        return out
    for entry in text.split(":"):
        if "," not in entry:
            continue
        fields = entry.split(",")
        if len(fields) < 6:
            return None
        mem = number(fields[2])
        kind = fields[3] if len(fields) == 6 else fields[4]
        out.append((mem if mem and mem > 0 else 0.0, kind))
    return out or None


def node_gpus(labels: Mapping[str, Any], annotations: Mapping[str, Any],
              allocatable: Mapping[str, float] | Resources) -> NodeGpus:
    """A node's physical cards: GPU feature discovery's labels first (`nvidia.com/gpu.count`, `.product`,
    `.memory`), then the device plugin's register annotation, then its allocatable (a vGPU count divided
    by the default split of 10 when nothing else says it, counted as `node_without_annotations`).
    Without a sharing plugin the cards are min(GFD count, allocatable): GFD also counts unhealthy cards.
    A MIG node's allocatable `*/gpu` are its slices, taken as whole devices."""
    alloc = as_map(allocatable)
    gfd_cards = number(labels.get(GFD_COUNT))
    if gfd_cards is not None and gfd_cards < 0:
        gfd_cards = None
    gfd_memory = number(labels.get(GFD_MEMORY)) or 0.0
    product = labels.get(GFD_PRODUCT)
    product = product if isinstance(product, str) else ""
    if VGPU_COUNT in alloc or VGPU_NODE_REGISTER in annotations:
        plugin, key, vgpus = "volcano-vgpu", VGPU_NODE_REGISTER, alloc.get(VGPU_COUNT, 0.0)
    elif HAMI_NODE_REGISTER in annotations or any(k.startswith("hami.io/node-") for k in annotations):
        plugin, key, vgpus = "hami", HAMI_NODE_REGISTER, alloc.get(HAMI_COUNT, 0.0)
    elif any(name.endswith("/gpu") for name in alloc) or gfd_cards:
        whole = sum(v for name, v in alloc.items() if name.endswith("/gpu"))
        if MIG_PRODUCT_MARK in product or GFD_MIG_STRATEGY in labels:
            # MIG: allocatable counts slices (more than cards in "single" mode), not HAMi vGPUs; each slice
            # is taken as one whole device, as pods ask for it (docs/gpu-sharing.md, "MIG")
            return NodeGpus(whole, gfd_memory, product, "whole", whole)
        # GFD counts the cards present; allocatable those the device plugin offers now (an unhealthy card
        # or a plugin that is down offers fewer): the smaller is what can be used
        cards = min(gfd_cards, whole) if gfd_cards is not None else whole
        if gfd_cards and whole > gfd_cards:  # more GPUs offered than cards: a sharing plugin, unregistered
            note_problem("node_without_annotations", f"{whole:g} GPUs allocatable on {gfd_cards:g} cards and no "
                                                     "device plugin annotation: cards from the GFD label")
            return NodeGpus(cards, gfd_memory, product, "hami", whole, "node_without_annotations")
        return NodeGpus(cards, gfd_memory, product, "whole", whole)
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
    note_problem(kind, f"{key} missing or unreadable: {cards:g} cards assumed "
                       f"({'GFD label' if gfd_cards is not None else f'{vgpus:g} vGPUs / {DEFAULT_SPLIT}'})")
    memory = gfd_memory
    if not memory and cards > 0 and alloc.get(VGPU_MEMORY, 0.0) > 0:  # Volcano's plugin: all cards' MiB
        memory = alloc[VGPU_MEMORY] / cards
    return NodeGpus(float(cards), memory, product, plugin, vgpus, kind)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One vGPU the scheduler gave a container: the card's UUID, MiB and percent of cores it holds."""

    container: int  # index in spec.containers
    uuid: str
    memory_mib: float
    cores: float


def allocated_devices(annotations: Mapping[str, Any]) -> tuple[AllocatedDevice, ...]:
    """The vGPUs a scheduled pod holds, from HAMi's `hami.io/vgpu-devices-allocated` or Volcano's
    `volcano.sh/vgpu-ids-new` ("UUID,TYPE,MiB,cores:" per vGPU, containers separated by ";"): which pods
    share a card, for splitting a card's usage. Unreadable entries are counted and skipped."""
    raw = annotations.get(HAMI_ALLOCATED)
    if raw is None:
        raw = annotations.get(VGPU_ALLOCATED)
    if not isinstance(raw, str) or not raw:
        return ()
    out: list[AllocatedDevice] = []
    for index, container in enumerate(raw.split(";")):
        for entry in container.split(":"):
            if not entry:
                continue
            fields = entry.split(",")
            mem = number(fields[2]) if len(fields) >= 4 else None
            cores = number(fields[3]) if len(fields) >= 4 else None
            if mem is None or cores is None or not fields[0]:
                note_problem("bad_pod_annotation", f"unreadable vGPU allocation {entry[:64]!r}")
                continue
            out.append(AllocatedDevice(index, fields[0], mem, cores))
    return tuple(out)
