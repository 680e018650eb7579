"""Label and field selectors, parsed the way the API server reads `labelSelector`/`fieldSelector`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from volcano_monitor.simulator.store import ApiError

Predicate = Callable[[dict[str, Any]], bool]

_SET_EXPR = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_EXPR = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside a `( ... )` value set."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p for p in parts if p.strip()]


def _label_requirement(text: str) -> Callable[[dict[str, str]], bool]:
    eq = _EQ_EXPR.match(text)
    if eq:
        key, op, value = eq.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    st = _SET_EXPR.match(text)
    if st:
        negate, key, op, values_text = st.groups()
        if op is None:
            return (lambda labels: key not in labels) if negate else (lambda labels: key in labels)
        if negate:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {text!r}")
        values = {v.strip() for v in values_text.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    raise ApiError(400, "BadRequest", f"unable to parse requirement: {text!r}")


def label_selector(selector: str | None) -> Predicate | None:
    if not selector:
        return None
    requirements = [_label_requirement(part) for part in _split_requirements(selector)]

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(req(labels) for req in requirements)

    return matches


def _field_value(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    return "" if node is None else str(node)


def field_selector(selector: str | None) -> Predicate | None:
    if not selector:
        return None
    requirements: list[tuple[str, bool, str]] = []
    for part in _split_requirements(selector):
        match = _EQ_EXPR.match(part)
        if not match:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part!r}")
        path, op, value = match.groups()
        requirements.append((path, op != "!=", value))

    def matches(obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in requirements)

    return matches


def combine(*predicates: Predicate | None) -> Predicate | None:
    active = [p for p in predicates if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return lambda obj: all(p(obj) for p in active)
