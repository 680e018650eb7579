"""The scheduler's job order within a queue (core/queueorder.py): priority, then PodGroup age, then job ID."""

from __future__ import annotations

from typing import Any

from volcano_monitor.core.model import PodGroup, parse_podgroup
from volcano_monitor.core.queueorder import Priorities, parse_priority_class, rank

T0 = "2026-12-01T19:56:4{}Z"


def group(name: str, second: int, priority_class: str = "", namespace: str = "default",
          owner_kind: str = "Job", min_member: int = 1) -> PodGroup:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                            "creationTimestamp": T0.format(second)}
    if owner_kind:
        meta["ownerReferences"] = [{"kind": owner_kind, "name": name.split("-")[0], "uid": "x"}]
    spec: dict[str, Any] = {"queue": "narrow", "minMember": min_member}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return parse_podgroup({"metadata": meta, "spec": spec, "status": {"phase": "Pending"}})


def pc(name: str, value: int, default: bool = False) -> dict[str, Any]:
    raw: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name, "uid": f"pc-{name}", "resourceVersion": "1",
                                        "creationTimestamp": "2026-12-01T00:00:00Z"}, "value": value}
    if default:
        raw["globalDefault"] = True
    return raw


def names(groups: list[PodGroup], priorities: Priorities) -> list[str]:
    return [place.group.name for place in rank(groups, priorities)]


def classes(*raws: dict[str, Any]) -> Priorities:
    out = Priorities()
    for raw in raws:
        out.on_class(parse_priority_class(raw), deleted=False)
    return out


def test_priority_first_then_creation_time() -> None:
    """The recorded `queue-order`: high (1000) before low (10) before no class (0); equal priority by age."""
    priorities = classes(pc("high", 1000), pc("low", 10))
    groups = [group("plain-1", 6), group("small-1", 4, "low"), group("urgent-1", 5, "high"), group("big-1", 2, "low")]
    places = rank(groups, priorities)
    assert [p.group.name for p in places] == ["urgent-1", "big-1", "small-1", "plain-1"]
    assert [(p.position, p.size, p.priority) for p in places] == [(1, 4, 1000), (2, 4, 10), (3, 4, 10), (4, 4, 0)]


def test_same_second_ties_on_the_job_id() -> None:
    """Creation times are whole seconds: two groups made in one second go by `<namespace>/<podgroup>`."""
    groups = [group("b-1", 1), group("a-1", 1, namespace="zeta"), group("a-1", 1, namespace="alpha")]
    assert [(p.group.namespace, p.group.name) for p in rank(groups, Priorities())] == [
        ("alpha", "a-1"), ("default", "b-1"), ("zeta", "a-1")]


def test_missing_class_takes_the_global_default_else_zero() -> None:
    groups = [group("named-1", 1, "gone"), group("low-1", 2, "low")]
    assert names(groups, classes(pc("low", 10))) == ["low-1", "named-1"]  # "gone" does not exist: 0 < 10
    with_default = classes(pc("low", 10), pc("usual", 100, default=True))
    assert names(groups, with_default) == ["named-1", "low-1"]  # "gone" falls back to the default, 100
    assert names([group("none-1", 3), group("low-1", 2, "low")], with_default) == ["none-1", "low-1"]


def test_class_events_change_the_value() -> None:
    priorities = classes(pc("low", 10), pc("usual", 100, default=True))
    assert priorities.value("low") == 10 and priorities.value("") == 100
    assert priorities.on_class(parse_priority_class(pc("low", 500)), deleted=False)
    assert not priorities.on_class(parse_priority_class(pc("low", 500)), deleted=False)  # no change
    assert priorities.value("low") == 500
    assert priorities.on_class(parse_priority_class(pc("usual", 100)), deleted=True)
    assert priorities.value("") == 0 and priorities.value("usual") == 0


def test_operator_podgroups_rank_with_volcano_jobs() -> None:
    """A PyTorchJob's PodGroup is a job to the scheduler like a Volcano Job's: same order."""
    groups = [group("vc-1", 1), group("torch", 2, "high", owner_kind="PyTorchJob"), group("bare", 0, owner_kind="")]
    assert names(groups, classes(pc("high", 1000))) == ["torch", "bare", "vc-1"]


def test_gang_size_does_not_change_the_order() -> None:
    """The gang plugin only puts Ready jobs last, and no waiting job is Ready: a bigger gang keeps its place."""
    groups = [group("wide-1", 2, min_member=8), group("one-1", 3, min_member=1)]
    assert names(groups, Priorities()) == ["wide-1", "one-1"]


def test_plain_values_mapping() -> None:
    assert names([group("a-1", 1), group("b-1", 2, "x")], {"x": 5}) == ["b-1", "a-1"]
