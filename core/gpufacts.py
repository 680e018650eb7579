"""The device plugins' names (resources, annotations, labels) and the count of bad GPU-share input.

Shared by :mod:`core.gpushare` (containers) and :mod:`core.gpunodes` (nodes); docs/gpu-sharing.md says
where each name comes from. Bad input is never an exception there: it is counted here by kind (the
programs expose `share_problems`) and logged once per kind, and a documented fallback is used.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping

from volcano_monitor.core.podrequests import Resources

__all__ = ["DEFAULT_SPLIT", "PROBLEM_KINDS", "as_map", "note_problem", "number", "reset_problems", "share_problems"]

log = logging.getLogger("volcano_monitor.core.gpushare")

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
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"  # set by GFD on MIG-capable nodes ("single", "mixed", "none")
MIG_PRODUCT_MARK = "-MIG-"  # GFD's product of a node in MIG "single" mode: "A100-SXM4-40GB-MIG-1g.5gb"

DEFAULT_SPLIT = 10  # deviceSplitCount of both plugins: vGPUs a card offers

HAMI_EXTRA = frozenset({HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES})
VGPU = frozenset({VGPU_COUNT, VGPU_MEMORY, VGPU_MEMORY_PERCENT, VGPU_CORES})

# Every kind `note_problem` is called with (docs/gpu-sharing.md says what each means and what is assumed).
PROBLEM_KINDS = ("vgpu_without_count", "percentage_over_100", "negative", "memory_over_card", "card_memory_unknown",
                 "node_without_annotations", "bad_node_annotation", "bad_pod_annotation")

_PROBLEMS: dict[str, int] = {}
_LOCK = threading.Lock()


def share_problems() -> dict[str, int]:
    """Bad GPU-share input met so far, by kind (a copy): counted every time it is met (a pod parsed on
    each of its events counts each time, as the parse-problem counters do)."""
    with _LOCK:
        return dict(_PROBLEMS)


def note_problem(kind: str, detail: str) -> str:
    """Count `kind`, log the first one (the rest would flood the log: one bad template, 1000 pods)."""
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


def as_map(values: Mapping[str, float] | Resources) -> Mapping[str, float]:
    return values if isinstance(values, Mapping) else dict(values)


def number(value: object) -> float | None:
    """A finite number from JSON or annotation text, else None."""
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
