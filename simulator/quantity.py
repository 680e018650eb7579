"""Kubernetes resource quantities: parse to numbers, format back in the API server's canonical style.

CPU is handled in cores, memory and everything else in plain units (bytes, counts).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

Resources = dict[str, float]

_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")

GIB = 2**30
MIB = 2**20
KIB = 2**10


def parse_quantity(value: str | int | float) -> float:
    """'500m' -> 0.5, '1.5Gi' -> 1610612736.0, '2' -> 2.0; raises ValueError on anything else."""
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"invalid quantity: {value!r}")
    number, exponent, suffix = match.groups()
    if exponent:
        return float(number + exponent)
    return float(number) * _SUFFIX[suffix or ""]


def parse_resources(values: Mapping[str, str | int | float] | None) -> Resources:
    return {name: parse_quantity(v) for name, v in (values or {}).items()}


def format_cpu(cores: float) -> str:
    millis = round(cores * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_bytes(amount: float) -> str:
    value = round(amount)
    for suffix, unit in (("Ti", 2**40), ("Gi", GIB), ("Mi", MIB), ("Ki", KIB)):
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def format_quantity(resource: str, amount: float) -> str:
    if resource == "cpu":
        return format_cpu(amount)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return format_bytes(amount)
    return str(round(amount)) if float(amount).is_integer() else format_cpu(amount)


def format_resources(resources: Mapping[str, float], keep: Iterable[str] = ()) -> dict[str, str]:
    """Canonical quantities; zero entries are dropped unless listed in `keep`."""
    kept = set(keep)
    return {name: format_quantity(name, amount) for name, amount in resources.items()
            if amount or name in kept}


def add(total: Resources, extra: Mapping[str, float], factor: float = 1.0) -> None:
    for name, amount in extra.items():
        total[name] = total.get(name, 0.0) + amount * factor


def fits(request: Mapping[str, float], free: Mapping[str, float]) -> str | None:
    """The first resource that does not fit (None when everything fits). Unknown resources have 0 free."""
    for name, amount in request.items():
        if amount > 0 and amount > free.get(name, 0.0) + 1e-9:
            return name
    return None
