"""Kubernetes resource quantities (``500m``, ``1.5Gi``, ``1e3``) as floats in base units.

Grammar (k8s.io/apimachinery/pkg/api/resource)::

    <quantity> ::= <sign><number><suffix>
    <number>   ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei            (binary)
                 | n | u | m | "" | k | M | G | T | P | E  (decimal)
                 | e<sign><digits> | E<sign><digits>      (decimal exponent)

Values are parsed exactly with :mod:`decimal` and rounded once to the nearest float: cores for
``cpu``, bytes for ``memory``/storage, plain numbers for everything else.
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, DecimalException
from functools import lru_cache

__all__ = ["QuantityError", "parse_quantity", "resource_label_and_unit"]


class QuantityError(ValueError):
    """A value that is not a valid Kubernetes quantity; the message names the value."""


_QUANTITY_RE = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([KMGTPE]i)|([numkMGTPE])|[eE]([+-]?[0-9]+))?",
    re.ASCII,
)
_BINARY: dict[str, Decimal] = {s: Decimal(1024**i) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)}
_DECIMAL_EXP: dict[str, str] = {
    "n": "E-9",
    "u": "E-6",
    "m": "E-3",
    "k": "E3",
    "M": "E6",
    "G": "E9",
    "T": "E12",
    "P": "E15",
    "E": "E18",
}
# Unlimited precision: products are exact, the only rounding is the final float().
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])
_MAX_SHOWN = 64


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) > _MAX_SHOWN:
        return text[:_MAX_SHOWN] + "..."
    return text


def _error(value: object, why: str = "") -> QuantityError:
    return QuantityError(f"invalid quantity {_shown(value)}{': ' + why if why else ''}")


def _parse_str(text: str) -> float:
    m = _QUANTITY_RE.fullmatch(text)
    if m is None:
        raise _error(text)
    sign, number, binary, decimal_suffix, exponent = m.groups()
    try:
        if binary is not None:
            dec = _EXACT.multiply(Decimal(sign + number), _BINARY[binary])
        elif decimal_suffix is not None:
            dec = Decimal(sign + number + _DECIMAL_EXP[decimal_suffix])
        elif exponent is not None:
            dec = Decimal(f"{sign}{number}E{exponent}")
        else:
            dec = Decimal(sign + number)
        result = float(dec)
    except (DecimalException, OverflowError, ValueError) as exc:
        raise _error(text, "out of range") from exc
    if not math.isfinite(result):
        raise _error(text, "out of range")
    return result + 0.0  # normalise -0.0


# Quantities repeat a lot ("1", "500m", "4Gi"): cache the short ones (errors are never cached).
# parse_short is for callers that already know ``value`` is a str of at most _CACHED_LEN chars.
parse_short = lru_cache(maxsize=8192)(_parse_str)
_CACHED_LEN = 32


def parse_quantity(value: str | int | float, cache: bool = True) -> float:
    """Parse a quantity string (or a JSON number) into a float in base units.

    Raises :class:`QuantityError` for anything else (including bool, None, NaN and infinities).
    `cache=False` for amounts that change all the time (a queue's `status.allocated`): each would be an
    entry of the cache that nothing reads again, pushing out the request sizes that repeat.
    """
    if isinstance(value, str):
        return parse_short(value) if cache and len(value) <= _CACHED_LEN else _parse_str(value)
    if isinstance(value, bool):
        raise _error(value, "expected string or number, got bool")
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError as exc:
            raise _error(value, "out of range") from exc
    if isinstance(value, float):
        if math.isfinite(value):
            return value + 0.0
        raise _error(value)
    raise _error(value, f"expected string or number, got {type(value).__name__}")


_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
_PHYSICAL_GPU = "physical-gpu"  # core.gpushare.PHYSICAL_GPU (a fraction of cards, not an integer)


@lru_cache(maxsize=1024)
def resource_label_and_unit(resource_name: str) -> tuple[str, str]:
    """``(resource label value, unit)`` as kube-state-metrics writes them.

    ``nvidia.com/gpu`` -> ``("nvidia_com_gpu", "integer")``, ``cpu`` -> ``("cpu", "core")``,
    ``memory`` / storage / ``hugepages-*`` -> ``"byte"``, the derived ``physical-gpu`` (core.gpushare)
    -> ``("physical_gpu", "gpu")``.
    """
    label = _INVALID_LABEL_CHARS.sub("_", resource_name)
    if resource_name == "cpu":
        unit = "core"
    elif resource_name in _BYTE_RESOURCES or resource_name.startswith("hugepages-"):
        unit = "byte"
    elif resource_name == _PHYSICAL_GPU:
        unit = "gpu"
    else:
        unit = "integer"
    return label, unit
