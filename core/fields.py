"""Typed, never-raising readers of raw JSON fields, shared by :mod:`core.model`.

Every reader takes the containing object, the key, the path prefix of the container (``"spec."``,
``"spec.tasks[1]."``) and the problem list. A value of the wrong type is reported as
``"<path><key>: expected <type>, got <python type>"`` and replaced by the default; ``null`` and a
missing key are the same thing and are not problems.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

intern = sys.intern

EMPTY_OBJ: Mapping[str, Any] = {}
EMPTY_ARR: Sequence[Any] = ()
_SHOWN = 64


def shown(value: object) -> str:
    """``repr`` of a value, truncated so a problem string stays short."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def bad_type(path: str, expected: str, value: object) -> str:
    return f"{path}: expected {expected}, got {type(value).__name__}"


def root(raw: object, probs: list[str]) -> Mapping[str, Any]:
    if type(raw) is dict:
        return raw
    probs.append(bad_type("(root)", "object", raw))
    return EMPTY_OBJ


def obj(d: Mapping[str, Any], key: str, path: str, probs: list[str]) -> Mapping[str, Any]:
    v = d.get(key)
    if type(v) is dict:
        return v
    if v is not None:
        probs.append(bad_type(path + key, "object", v))
    return EMPTY_OBJ


def arr(d: Mapping[str, Any], key: str, path: str, probs: list[str]) -> Sequence[Any]:
    v = d.get(key)
    if type(v) is list:
        return v
    if v is not None:
        probs.append(bad_type(path + key, "array", v))
    return EMPTY_ARR


def item_obj(v: object, path: str, probs: list[str]) -> Mapping[str, Any]:
    """An array element that must be an object (``path`` is the element's full path)."""
    if type(v) is dict:
        return v
    if v is not None:
        probs.append(bad_type(path, "object", v))
    return EMPTY_OBJ


def string(d: Mapping[str, Any], key: str, path: str, probs: list[str], default: str = "") -> str:
    v = d.get(key)
    if type(v) is str:
        return v
    if v is not None:
        probs.append(bad_type(path + key, "string", v))
    return default


def istring(d: Mapping[str, Any], key: str, path: str, probs: list[str], default: str = "") -> str:
    """Like :func:`string`, interned: for values repeated across many objects (namespace, phase)."""
    v = d.get(key)
    if type(v) is str:
        return intern(v)
    if v is not None:
        probs.append(bad_type(path + key, "string", v))
    return default


def integer(d: Mapping[str, Any], key: str, path: str, probs: list[str], default: int = 0) -> int:
    v = opt_integer(d, key, path, probs)
    return default if v is None else v


def counts(d: Mapping[str, Any], path: str, probs: list[str], *keys: str) -> list[int]:
    """Several integer fields of one object, in the order of ``keys`` (a status's pod counts)."""
    return [integer(d, k, path, probs) for k in keys]


def opt_integer(d: Mapping[str, Any], key: str, path: str, probs: list[str]) -> int | None:
    v = d.get(key)
    if type(v) is int:
        return v
    if v is not None:
        probs.append(bad_type(path + key, "integer", v))
    return None


def boolean(d: Mapping[str, Any], key: str, path: str, probs: list[str]) -> bool | None:
    v = d.get(key)
    if type(v) is bool:
        return v
    if v is not None:
        probs.append(bad_type(path + key, "boolean", v))
    return None


def string_map(d: Mapping[str, Any], key: str, path: str, probs: list[str]) -> Mapping[str, str]:
    """A ``map[string]string`` (labels, annotations); non-string values are dropped and reported."""
    m = obj(d, key, path, probs)
    for v in m.values():
        if type(v) is not str:
            break
    else:
        return m
    for k, v in m.items():
        if type(v) is not str and v is not None:
            probs.append(bad_type(f"{path}{key}.{k}", "string", v))
    return {k: v for k, v in m.items() if type(v) is str}


_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))",
    re.ASCII,
)


@lru_cache(maxsize=4096)
def _parse_time(text: str) -> float | None:
    m = _RFC3339.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, frac, zulu, sign, off_h, off_m = m.groups()
    try:
        if zulu:
            tz = UTC
        else:
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            tz = timezone(-offset if sign == "-" else offset)
        ts = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=tz).timestamp()
    except (ValueError, OverflowError):
        return None
    return ts + float(frac) if frac else ts


def parse_timestamp(text: str) -> float | None:
    """RFC 3339 (``2024-05-01T10:00:00Z``, fractional seconds, ``+02:00`` offsets) -> epoch seconds."""
    return _parse_time(text) if len(text) <= 40 else None


def timestamp(d: Mapping[str, Any], key: str, path: str, probs: list[str]) -> float | None:
    v = d.get(key)
    if type(v) is str:
        ts = parse_timestamp(v)
        if ts is None:
            probs.append(f"{path}{key}: invalid timestamp {shown(v)}")
        return ts
    if v is not None:
        probs.append(bad_type(path + key, "string", v))
    return None


# namespace, name, uid, resourceVersion, creationTimestamp, controller owner kind, owner name
Meta = tuple[str, str, str, str, float | None, str, str]


def read_meta(d: Mapping[str, Any], probs: list[str]) -> tuple[Meta, Mapping[str, Any]]:
    """Common metadata and the raw ``metadata`` object (for labels/annotations)."""
    md = d.get("metadata")
    if type(md) is not dict:
        md = obj(d, "metadata", "", probs)
    ns = md.get("namespace", "")
    name = md.get("name")
    uid = md.get("uid")
    rv = md.get("resourceVersion")
    created = md.get("creationTimestamp")
    refs = md.get("ownerReferences")
    if (
        type(ns) is str
        and type(name) is str
        and type(uid) is str
        and type(rv) is str
        and type(created) is str
        and (ts := parse_timestamp(created)) is not None
    ):  # fast path: a well-formed object as the API server returns it
        if refs is None:
            return (intern(ns), name, uid, rv, ts, "", ""), md
        if type(refs) is list and len(refs) == 1:
            ref = refs[0]
            if type(ref) is dict:
                kind = ref.get("kind")
                owner = ref.get("name")
                if type(kind) is str and type(owner) is str:
                    return (intern(ns), name, uid, rv, ts, intern(kind), intern(owner)), md
    p = "metadata."
    kind = owner = ""
    refs = arr(md, "ownerReferences", p, probs)
    if refs:
        chosen = -1
        for i, raw in enumerate(refs):
            ref = item_obj(raw, f"metadata.ownerReferences[{i}]", probs)
            if chosen < 0 and ref:
                chosen = i
            if ref.get("controller") is True:
                chosen = i
                break
        if chosen >= 0:
            ref, rp = refs[chosen], f"metadata.ownerReferences[{chosen}]."
            kind = istring(ref, "kind", rp, probs)
            owner = istring(ref, "name", rp, probs)
    meta = (
        istring(md, "namespace", p, probs),
        string(md, "name", p, probs),
        string(md, "uid", p, probs),
        string(md, "resourceVersion", p, probs),
        timestamp(md, "creationTimestamp", p, probs),
        kind,
        owner,
    )
    return meta, md
