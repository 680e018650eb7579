"""Property-based tests of THE RULE: parsers never raise, and wrong types at read fields become problems."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.exporter.objects import (
    full_cronjob,
    full_hypernode,
    full_job,
    full_jobflow,
    full_node,
    full_pod,
    full_queue,
    kubeflow_podgroup,
    topology_podgroup,
    volcano_pod,
)
from volcano_monitor.core.fields import parse_timestamp
from volcano_monitor.core.kinds import CronJob, HyperNode, JobFlow, parse_cronjob, parse_hypernode, parse_jobflow
from volcano_monitor.core.model import (
    Job,
    Node,
    Pod,
    PodGroup,
    Queue,
    parse_job,
    parse_node,
    parse_pod,
    parse_podgroup,
    parse_queue,
)
from volcano_monitor.core.quantity import QuantityError, parse_quantity

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def full_podgroup() -> dict[str, Any]:
    return kubeflow_podgroup()


CASES: dict[str, tuple[Callable[[object], Any], Callable[[], dict[str, Any]], type[Any]]] = {
    "job": (parse_job, full_job, Job),
    "pod": (parse_pod, full_pod, Pod),
    "simplepod": (parse_pod, volcano_pod, Pod),  # the single-container fast path
    "podgroup": (parse_podgroup, full_podgroup, PodGroup),
    "queue": (parse_queue, full_queue, Queue),
    "node": (parse_node, full_node, Node),
    # Later releases' fields and kinds (core.kinds).
    "topologypodgroup": (parse_podgroup, topology_podgroup, PodGroup),
    "cronjob": (parse_cronjob, full_cronjob, CronJob),
    "hypernode": (parse_hypernode, full_hypernode, HyperNode),
    "jobflow": (parse_jobflow, full_jobflow, JobFlow),
}


def all_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += all_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += all_paths(v, (*prefix, i))
    return out


def replaced(raw: Any, path: tuple[Any, ...], new: Any) -> Any:
    raw = copy.deepcopy(raw)
    target = raw
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return raw


def test_full_objects_are_clean() -> None:
    for parser, make, cls in CASES.values():
        view = parser(make())
        assert isinstance(view, cls)
        assert view.problems == ()


@pytest.mark.parametrize("kind", sorted(CASES))
@given(data=st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_random_subtree_never_raises(kind: str, data: st.DataObject) -> None:
    parser, make, cls = CASES[kind]
    raw = make()
    path = data.draw(st.sampled_from(all_paths(raw)), label="path")
    new = data.draw(json_values, label="value")
    original = raw
    for step in path:
        original = original[step]
    view = parser(replaced(raw, path, new))
    assert isinstance(view, cls)
    assert all(isinstance(p, str) and p for p in view.problems)
    if new == original and type(new) is type(original):
        assert view.problems == ()


@pytest.mark.parametrize("kind", sorted(CASES))
@given(raw=json_values)
def test_random_top_level_never_raises(kind: str, raw: object) -> None:
    parser, _, cls = CASES[kind]
    view = parser(raw)
    assert isinstance(view, cls)
    if not isinstance(raw, dict):
        assert view.problems == (f"(root): expected object, got {type(raw).__name__}",)


def _is_quantity(v: object) -> bool:
    try:
        parse_quantity(v)  # type: ignore[arg-type]
    except QuantityError:
        return False
    return True


OK: dict[str, Callable[[object], bool]] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "boolean": lambda v: type(v) is bool,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "quantity": _is_quantity,
    "timestamp": lambda v: type(v) is str and parse_timestamp(v) is not None,
}

# "<kind> <path in the object, | separated> <expected shape>" for fields the parsers read
READ_FIELDS = [
    "job metadata object",
    "job metadata|name string",
    "job metadata|creationTimestamp timestamp",
    "job metadata|ownerReferences array",
    "job metadata|ownerReferences|0|kind string",
    "job spec|queue string",
    "job spec|minAvailable integer",
    "job spec|maxRetry integer",
    "job spec|tasks array",
    "job spec|tasks|0 object",
    "job spec|tasks|0|replicas integer",
    "job spec|tasks|0|template|spec|containers|0|resources|requests|cpu quantity",
    "job status|state|phase string",
    "job status|retryCount integer",
    "job status|conditions|0|lastTransitionTime timestamp",
    "job status|taskStatusCount|w|phase|Running integer",
    "pod metadata|namespace string",
    "pod metadata|uid string",
    "pod metadata|labels object",
    "pod metadata|labels|volcano.sh/job-name string",
    "pod metadata|annotations|scheduling.k8s.io/group-name string",
    "pod spec object",
    "pod spec|nodeName string",
    "pod spec|containers array",
    "pod spec|containers|0 object",
    "pod spec|containers|0|resources object",
    "pod spec|containers|0|resources|limits object",
    "pod spec|containers|0|resources|requests|memory quantity",
    "pod spec|initContainers|1|restartPolicy string",
    "pod spec|initContainers|0|resources|requests|cpu quantity",
    "pod spec|overhead|cpu quantity",
    "pod status|phase string",
    "pod status|startTime timestamp",
    "pod status|containerStatuses|0|restartCount integer",
    "pod status|containerStatuses|0|lastState object",
    "pod status|containerStatuses|0|lastState|terminated|exitCode integer",
    "simplepod metadata|name string",
    "simplepod metadata|ownerReferences|0 object",
    "simplepod metadata|ownerReferences|0|name string",
    "simplepod spec|containers|0 object",
    "simplepod spec|containers|0|resources object",
    "simplepod spec|containers|0|resources|requests object",
    "simplepod spec|containers|0|resources|limits|nvidia.com/gpu quantity",
    "simplepod status|containerStatuses|0|lastState object",
    "simplepod status|containerStatuses|0|state object",
    "simplepod metadata|labels|volcano.sh/task-index string",
    "podgroup spec|minMember integer",
    "podgroup metadata|ownerReferences|1|kind string",
    "podgroup spec|minResources|nvidia.com/gpu quantity",
    "podgroup spec|minResources object",
    "podgroup status|conditions|0|type string",
    "podgroup status|running integer",
    "queue spec|weight integer",
    "queue spec|capability|nvidia.com/gpu quantity",
    "queue status|running integer",
    "queue spec|reclaimable boolean",
    "queue spec|guarantee|resource|cpu quantity",
    "queue status|allocated object",
    "node metadata|labels|zone string",
    "node spec|unschedulable boolean",
    "node spec|taints array",
    "node status|capacity|cpu quantity",
    "node status|conditions|0 object",
    "topologypodgroup spec|networkTopology|mode string",
    "topologypodgroup spec|networkTopology|highestTierAllowed integer",
    "topologypodgroup spec|subGroupPolicy array",
    "topologypodgroup spec|subGroupPolicy|0 object",
    "topologypodgroup spec|subGroupPolicy|0|subGroupSize integer",
    "topologypodgroup spec|subGroupPolicy|0|networkTopology|highestTierAllowed integer",
    "cronjob spec|schedule string",
    "cronjob spec|suspend boolean",
    "cronjob status|active array",
    "cronjob status|active|0|name string",
    "cronjob status|lastScheduleTime timestamp",
    "hypernode spec|tier integer",
    "hypernode spec|members|0 object",
    "hypernode spec|members|0|type string",
    "hypernode status|nodeCount integer",
    "jobflow spec|flows array",
    "jobflow status|state|phase string",
    "jobflow status|runningJobs array",
    "jobflow status|jobStatusList|1|restartCount integer",
]


def split_field(field: str) -> tuple[str, tuple[Any, ...], str, str]:
    kind, raw_path, shape = field.split(" ")
    path = tuple(int(step) if step.isdigit() else step for step in raw_path.split("|"))
    rendered = ""
    for step in path:
        rendered += f"[{step}]" if isinstance(step, int) else ("." if rendered else "") + step
    return kind, path, shape, rendered


_KINDS: dict[type, st.SearchStrategy[Any]] = {
    bool: st.booleans(),
    int: st.integers(),
    float: st.floats(),
    str: st.text(max_size=12),
    list: st.lists(st.integers(), max_size=2),
    dict: st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
}


def _wrong_values(shape: str) -> st.SearchStrategy[Any]:
    """Values of any JSON type but the one the field must have (or that are invalid for it)."""
    table: dict[str, set[type]] = {
        "string": {str},
        "integer": {int},
        "boolean": {bool},
        "object": {dict},
        "array": {list},
        "quantity": {str, int, float},
        "timestamp": {str},
    }
    excluded = table[shape]
    strategy = st.one_of([s for t, s in _KINDS.items() if t not in excluded])
    if shape == "quantity":
        strategy |= st.sampled_from([float("nan"), float("inf"), 10**400, "", "1 Gi", "abc", "1Gb", "--1"])
        strategy |= st.text(max_size=8).filter(lambda v: not OK["quantity"](v))
    if shape == "timestamp":
        strategy |= st.text(max_size=24)
    anything = json_values.filter(lambda v: v is not None and not OK[shape](v))
    return (strategy | anything).filter(lambda v: not OK[shape](v))


WRONG_VALUES = {shape: _wrong_values(shape) for shape in OK}


@pytest.mark.parametrize("kind", sorted(CASES))
@given(data=st.data())
def test_wrong_type_at_a_read_field_is_reported(kind: str, data: st.DataObject) -> None:
    field = data.draw(st.sampled_from([f for f in READ_FIELDS if f.startswith(kind + " ")]), label="field")
    _, path, shape, rendered = split_field(field)
    value = data.draw(WRONG_VALUES[shape], label="value")
    parser, make, cls = CASES[kind]
    view = parser(replaced(make(), path, value))
    assert isinstance(view, cls)
    assert any(p.startswith(rendered + ":") for p in view.problems), view.problems


@pytest.mark.parametrize("value", [True, "3", [], {}, 0, 1.5, "", "1 Gi", "2024-05-01", float("nan")], ids=repr)
@pytest.mark.parametrize("field", READ_FIELDS)
def test_wrong_type_examples(field: str, value: object) -> None:
    kind, path, shape, rendered = split_field(field)
    if OK[shape](value):
        return
    parser, make, _ = CASES[kind]
    view = parser(replaced(make(), path, value))
    assert any(p.startswith(rendered + ":") for p in view.problems), view.problems


def test_split_field() -> None:
    assert split_field("pod spec|containers|0|resources|requests|cpu quantity") == (
        "pod",
        ("spec", "containers", 0, "resources", "requests", "cpu"),
        "quantity",
        "spec.containers[0].resources.requests.cpu",
    )
