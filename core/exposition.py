"""Declarative metric families and the text format 0.0.4 line writer.

A `Family` knows its name, type, help and label names; `Family.line(values, value)` renders one
sample. Label values are escaped here and only here. Rendering happens once per object change
(never at scrape time), so each kind module turns an object into rows — one string per family —
that the store keeps until the object changes again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from volcano_monitor.core.podrequests import Resources
from volcano_monitor.core.quantity import resource_label_and_unit

GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"  # rendered by its own module (buckets, _sum, _count), not by `Family.line`


def escape(value: str) -> str:
    """Escape a label value (backslash, double quote, newline), with a fast path for clean values."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def format_value(value: float) -> str:
    if type(value) is int:
        return str(value)
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    labels: tuple[str, ...]
    type: str = GAUGE
    _template: str = field(init=False, repr=False, compare=False)
    _prefix: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        if "job" in self.labels or "instance" in self.labels:
            raise ValueError(f"{self.name}: 'job' and 'instance' labels belong to Prometheus")
        pairs = ",".join(f'{label}="%s"' for label in self.labels)
        object.__setattr__(self, "_template", f"{self.name}{{{pairs}}} %s\n" if pairs else f"{self.name} %s\n")
        if self.labels[-2:] == ("resource", "unit"):  # resource families: leading labels, then a cached suffix
            lead = "".join(f'{label}="%s",' for label in self.labels[:-2])
            object.__setattr__(self, "_prefix", f"{self.name}{{{lead}")

    @property
    def header(self) -> str:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.type}\n"

    def line(self, values: Sequence[str], value: float) -> str:
        joined = "".join(values)  # one scan for all values: escaping is rare
        if "\\" in joined or '"' in joined or "\n" in joined:
            values = [escape(v) for v in values]
        return self._template % (*values, format_value(value))

    def format(self, escaped: Sequence[str], value_text: str) -> str:
        """`line` for label values already escaped and a value already formatted."""
        return self._template % (*escaped, value_text)

    def format_resources(self, escaped: Sequence[str], resources: Resources) -> str:
        """`resource_lines` for leading label values already escaped."""
        if not resources:
            return ""
        prefix = self._prefix % tuple(escaped)
        return "".join([prefix + suffix for suffix in _resource_suffixes(resources)])

    def resource_lines(self, values: Sequence[str], resources: Resources, cache: bool = True) -> str:
        """One line per resource, with the kube-state-metrics `resource` and `unit` labels last.
        `cache=False` for amounts that change all the time (a queue's allocated, sums over pods): each
        would take a slot of the suffix cache for good (~700 bytes, 3 MB once full) and be read once."""
        if not resources:
            return ""
        joined = "".join(values)
        if "\\" in joined or '"' in joined or "\n" in joined:
            values = [escape(v) for v in values]
        prefix = self._prefix % tuple(values)
        suffixes = _resource_suffixes(resources) if cache else _render_suffixes(resources)
        return "".join([prefix + suffix for suffix in suffixes])


def _render_suffixes(resources: Resources) -> tuple[str, ...]:
    """`resource="cpu",unit="core"} 0.5\n` per resource."""
    out = []
    for name, amount in resources:
        label, unit = resource_label_and_unit(name)
        out.append(f'resource="{escape(label)}",unit="{unit}"}} {format_value(amount)}\n')
    return tuple(out)


_resource_suffixes = lru_cache(maxsize=4096)(_render_suffixes)  # requests repeat: equal lists are shared


def resource_labels(*leading: str) -> tuple[str, ...]:
    return (*leading, "resource", "unit")


def family_names(families: Iterable[Family]) -> list[str]:
    return [f.name for f in families]
