"""`gpu_sharing:`: how a shared card's request becomes physical GPUs (core.gpushare, docs/gpu-sharing.md).

Program-wide because pods are parsed (`core.podview.parse_pod`) before any part of the watchdog sees them,
so `runtime.cli` hands these to `core.gpushare.configure` once at start, as the exporter does with its
`--gpu-share-basis` and `--gpu-card-memory-mib` flags. Both programs should be given the same values, or
their counts of the same pod differ.
"""

from __future__ import annotations

import math

from pydantic import Field, field_validator

from volcano_monitor.core.gpushare import BASES, Basis
from volcano_monitor.core.settings import Section


class GpuSharing(Section):
    basis: Basis = Field(
        default="max", description="A vGPU's share of its card: the larger of its cores share and its memory share "
                                   "(max), or only one of them (cores | memory); times the vGPUs it asks for. "
                                   f"One of {', '.join(BASES)}.")
    card_memory_mib: float = Field(
        default=0.0, description="Memory of a card in MiB, for a vGPU request in MiB on a node whose card memory "
                                 "is unknown (no GPU feature discovery label, no device plugin annotation); 0: "
                                 "unknown, then the cores share or a whole card is counted (docs/gpu-sharing.md).")

    @field_validator("card_memory_mib")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise ValueError("must be a number of MiB >= 0")
        return value
