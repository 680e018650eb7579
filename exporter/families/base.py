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

from exporter.podrequests import Resources
from exporter.quantity import resource_label_and_unit

GAUGE = "gauge"
COUNTER = "counter"


def escape(value: str) -> str:
    """Escape a label value (backslash, double quote, newline), with a fast path for clean values."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def format_value(value: float) -> str:
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

    def __post_init__(self) -> None:
        if "job" in self.labels or "instance" in self.labels:
            raise ValueError(f"{self.name}: 'job' and 'instance' labels belong to Prometheus")
        pairs = ",".join(f'{label}="%s"' for label in self.labels)
        object.__setattr__(self, "_template", f"{self.name}{{{pairs}}} %s\n" if pairs else f"{self.name} %s\n")

    @property
    def header(self) -> str:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.type}\n"

    def line(self, values: Sequence[str], value: float) -> str:
        return self._template % (*[escape(v) for v in values], format_value(value))

    def resource_lines(self, values: Sequence[str], resources: Resources) -> str:
        """One line per resource, with the kube-state-metrics `resource` and `unit` labels last."""
        out = []
        for name, amount in resources:
            label, unit = resource_label_and_unit(name)
            out.append(self.line((*values, label, unit), amount))
        return "".join(out)


def resource_labels(*leading: str) -> tuple[str, ...]:
    return (*leading, "resource", "unit")


def family_names(families: Iterable[Family]) -> list[str]:
    return [f.name for f in families]
