"""Which naming style a family of series uses in Prometheus: DCGM's pod labels (namespace or exported_*),
HAMi's metric names (legacy, current, exported). Each asks Prometheus `count by (style) (...)` over its
candidates (`dcgm_style_query`, `hami.style_query`) and the style with the most series wins: a cluster
moving from one to the other has both for a while, and the newer one soon has more."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any


def busiest_style(data: Any, known: Collection[str]) -> str | None:
    """The style among `known` with more series in a `count by (style)` answer; None when it has none."""
    counts: dict[str, float] = {}
    result = data.get("result") if isinstance(data, dict) else None
    for series in result if isinstance(result, list) else []:
        try:
            style, value = series["metric"]["style"], float(series["value"][1])
        except (KeyError, TypeError, ValueError, IndexError):
            continue
        if style in known and math.isfinite(value) and value > 0:
            counts[style] = value
    if not counts:
        return None
    return max(sorted(counts), key=lambda style: counts[style])
