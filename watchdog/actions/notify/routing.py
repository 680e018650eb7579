"""Alertmanager-style routing: label matchers, the route tree, and group keys.

An alert is a set of labels. For the watchdog's own alerts those are `alertname` (the kind, also as
`kind`), `severity`, `namespace`, `queue`, `job_name` and `source="watchdog"`; Alertmanager's alerts
bring their own labels (and `source="alertmanager"`). Matching follows Alertmanager: the root matches
everything; an alert goes to the first child that matches (and on to later siblings while the matched
child has `continue`); with no matching child the node itself takes it. Unset settings are inherited.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from volcano_monitor.core.matchers import Matcher, parse_matcher
from volcano_monitor.watchdog.actions.notify.settings import Route

__all__ = ["DEFAULTS", "Matcher", "Placement", "ResolvedRoute", "group_key", "match_routes", "parse_matcher",
           "resolve_tree"]

DEFAULTS = {"group_by": ("alertname", "queue"), "group_wait": 30.0, "group_interval": 300.0,
            "repeat_interval": 4 * 3600.0}


@dataclass(frozen=True)
class ResolvedRoute:
    """A route node with inherited settings filled in; `path` names it ("0", "0.1", "0.1.0")."""

    path: str
    receiver: str
    matchers: tuple[Matcher, ...]
    group_by: tuple[str, ...]  # ("...",): every label
    group_wait: float
    group_interval: float
    repeat_interval: float
    continue_: bool
    children: tuple[ResolvedRoute, ...]


def resolve_tree(route: Route, parent: ResolvedRoute | None = None, path: str = "0") -> ResolvedRoute:
    """The configured tree with every node's settings resolved (done once, at start)."""

    def pick(name: str) -> object:
        own = getattr(route, name)
        if own is not None:
            return own
        return getattr(parent, name) if parent is not None else DEFAULTS[name]

    receiver = route.receiver or (parent.receiver if parent else "")
    group_by = pick("group_by")
    partial = ResolvedRoute(path, receiver, tuple(parse_matcher(m) for m in route.matchers),
                            tuple(group_by) if isinstance(group_by, list | tuple) else (),
                            float(pick("group_wait")),  # type: ignore[arg-type]
                            float(pick("group_interval")),  # type: ignore[arg-type]
                            float(pick("repeat_interval")),  # type: ignore[arg-type]
                            route.continue_, ())
    children = tuple(resolve_tree(child, partial, f"{path}.{i}") for i, child in enumerate(route.routes))
    return ResolvedRoute(**{**partial.__dict__, "children": children})


def match_routes(root: ResolvedRoute, labels: Mapping[str, str]) -> list[ResolvedRoute]:
    """The routes that take an alert with `labels` (the root matches everything)."""

    def visit(node: ResolvedRoute) -> list[ResolvedRoute]:
        found: list[ResolvedRoute] = []
        for child in node.children:
            if all(m.matches(labels) for m in child.matchers):
                found.extend(visit(child))
                if not child.continue_:
                    break
        return found or [node]

    return visit(root)


@dataclass(frozen=True)
class Placement:
    """Where an alert goes: a route, its receiver, and the group's labels and key."""

    route: ResolvedRoute
    group_labels: dict[str, str]
    key: str


def group_key(route: ResolvedRoute, labels: Mapping[str, str]) -> Placement:
    if route.group_by == ("...",):
        group_labels = dict(sorted(labels.items()))
    else:
        group_labels = {name: labels.get(name, "") for name in route.group_by}
    text = "\x1f".join([route.path, route.receiver, *(f"{k}={v}" for k, v in sorted(group_labels.items()))])
    return Placement(route, group_labels, hashlib.sha256(text.encode("utf-8", "replace")).hexdigest())
