"""The views of the kinds and fields later Volcano releases added, and their families: values read,
fields of older releases absent (no series), malformed input reported, never raised."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from tests.core.test_model import ts
from tests.exporter import objects
from tests.exporter.test_prometheus import parse_text
from volcano_monitor.core.kinds import (
    NetworkTopology,
    SubGroup,
    condition_reason,
    parse_cronjob,
    parse_hypernode,
    parse_jobflow,
)
from volcano_monitor.core.model import parse_podgroup, parse_queue
from volcano_monitor.exporter.families import cronjob, hypernode, jobflow, podgroup
from volcano_monitor.exporter.store import ExporterStore

Samples = dict[str, list[tuple[dict[str, str], float]]]


def samples(rendered: tuple[str, ...]) -> Samples:
    out: Samples = {}
    for name, labels, value in parse_text("".join(rendered)):
        out.setdefault(name, []).append((labels, value))
    return out


def test_podgroup_topology_and_subgroups() -> None:
    group = parse_podgroup(objects.topology_podgroup())
    assert group.problems == ()
    assert group.network_topology == NetworkTopology("soft", 2, "spine")
    assert group.subgroups == (SubGroup("worker", 4, 2, NetworkTopology("hard", 1, "")),
                               SubGroup("ps", None, None, None))
    s = samples(podgroup.render(group))
    assert s["volcano_podgroup_spec_network_topology_info"] == [
        ({"namespace": "nlp", "podgroup": "bert", "mode": "soft", "highest_tier_name": "spine"}, 1)]
    assert s["volcano_podgroup_spec_network_topology_highest_tier_allowed"] == [
        ({"namespace": "nlp", "podgroup": "bert"}, 2)]
    assert s["volcano_podgroup_spec_subgroup_size"] == [
        ({"namespace": "nlp", "podgroup": "bert", "subgroup": "worker"}, 4)]
    assert s["volcano_podgroup_spec_subgroup_min_subgroups"] == [
        ({"namespace": "nlp", "podgroup": "bert", "subgroup": "worker"}, 2)]


def test_a_podgroup_of_an_older_release_has_no_topology_series() -> None:
    group = parse_podgroup(objects.kubeflow_podgroup())  # v1.11 shape: neither field
    assert group.network_topology is None and group.subgroups == ()
    s = samples(podgroup.render(group))
    assert not {name for name in s if "network_topology" in name or "subgroup" in name}


def test_an_empty_network_topology_is_hard_by_default() -> None:
    raw = objects.kubeflow_podgroup()
    raw["spec"]["networkTopology"] = {}
    assert parse_podgroup(raw).network_topology == NetworkTopology("hard", None, "")


@pytest.mark.parametrize(("reason", "label"), [
    ("NotEnoughResources", "NotEnoughResources"), ("NotEnoughTasks", "NotEnoughTasks"),
    ("NotEnoughPodsOfTask", "NotEnoughPodsOfTask"), ("PodFailed", "PodFailed"), ("PodDeleted", "PodDeleted"),
    ("3/4 tasks in gang unschedulable", "Other"), ("", "Other"),
])
def test_condition_reasons_come_from_a_fixed_set(reason: str, label: str) -> None:
    assert condition_reason(reason) == label
    raw = objects.kubeflow_podgroup()
    raw["status"]["conditions"][0]["reason"] = reason
    raw["status"]["conditions"].append({"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready"})
    raw["status"]["conditions"].append({"type": "Unschedulable", "status": "False", "reason": "PodFailed"})
    s = samples(podgroup.render(parse_podgroup(raw)))
    assert s["volcano_podgroup_status_condition_reason"] == [
        ({"namespace": "nlp", "podgroup": "bert", "queue": "nlp", "type": "Unschedulable", "reason": label}, 1)]


def test_cronjob() -> None:
    cron = parse_cronjob(objects.full_cronjob())
    assert cron.problems == ()
    assert (cron.schedule, cron.time_zone, cron.concurrency_policy, cron.suspend) == (
        "0 2 * * *", "Europe/Berlin", "Forbid", True)
    assert cron.active == ("nightly-29000000", "nightly-29000060")
    s = samples(cronjob.render(cron))
    key = {"namespace": "bi", "cronjob": "nightly"}
    assert s["volcano_cronjob_info"] == [({**key, "schedule": "0 2 * * *", "timezone": "Europe/Berlin",
                                          "concurrency_policy": "Forbid"}, 1)]
    assert s["volcano_cronjob_spec_suspend"] == [(key, 1)]
    assert s["volcano_cronjob_status_active"] == [(key, 2)]
    assert s["volcano_cronjob_status_last_schedule_time_seconds"] == [(key, ts(objects.T2))]
    assert s["volcano_cronjob_status_last_successful_time_seconds"] == [(key, ts(objects.T1))]


def test_a_cronjob_that_never_ran() -> None:
    raw = objects.full_cronjob()
    del raw["status"], raw["spec"]["concurrencyPolicy"], raw["spec"]["suspend"]
    s = samples(cronjob.render(parse_cronjob(raw)))
    assert s["volcano_cronjob_status_active"][0][1] == 0 and s["volcano_cronjob_spec_suspend"][0][1] == 0
    assert s["volcano_cronjob_info"][0][0]["concurrency_policy"] == "Allow"  # the CRD's default
    assert "volcano_cronjob_status_last_schedule_time_seconds" not in s


def test_hypernode() -> None:
    node = parse_hypernode(objects.full_hypernode())
    assert node.problems == () and node.members == (("HyperNode", 2), ("Node", 1))
    s = samples(hypernode.render(node))
    assert s["volcano_hypernode_info"] == [({"hypernode": "spine-0", "tier": "2", "tier_name": "spine"}, 1)]
    assert s["volcano_hypernode_spec_tier"] == [({"hypernode": "spine-0"}, 2)]
    assert s["volcano_hypernode_spec_members"] == [({"hypernode": "spine-0", "type": "HyperNode"}, 2),
                                                   ({"hypernode": "spine-0", "type": "Node"}, 1)]
    assert s["volcano_hypernode_status_nodes"] == [({"hypernode": "spine-0"}, 12)]


def test_jobflow() -> None:
    flow = parse_jobflow(objects.full_jobflow())
    assert flow.problems == ()
    s = samples(jobflow.render(flow))
    key = {"namespace": "ml", "jobflow": "pipeline"}
    assert s["volcano_jobflow_spec_flows"] == [(key, 3)]
    assert s["volcano_jobflow_status_phase"] == [({**key, "phase": "Running"}, 1)]
    assert {labels["state"]: v for labels, v in s["volcano_jobflow_status_jobs"]} == {
        "pending": 1, "running": 1, "completed": 1, "failed": 0, "terminated": 0, "unknown": 0}
    assert s["volcano_jobflow_job_state"] == [({**key, "job_name": "prep", "state": "Completed"}, 1),
                                              ({**key, "job_name": "train", "state": "Running"}, 1)]
    assert s["volcano_jobflow_job_restarts"] == [({**key, "job_name": "prep"}, 0), ({**key, "job_name": "train"}, 2)]


MALFORMED: list[tuple[str, Any, dict[str, Any]]] = [
    ("cronjob", parse_cronjob, {"spec": {"schedule": 5, "suspend": "yes"}, "status": {"active": "x",
                                                                                      "lastScheduleTime": "soon"}}),
    ("hypernode", parse_hypernode, {"spec": {"tier": "2", "members": [7, {"type": 3}]}, "status": {"nodeCount": "a"}}),
    ("jobflow", parse_jobflow, {"spec": {"flows": {}}, "status": {
        "state": [], "runningJobs": 3, "jobStatusList": [{"name": "a", "restartCount": "1"}]}}),
    ("podgroup", parse_podgroup, {"spec": {"networkTopology": "hard", "subGroupPolicy": [{"subGroupSize": "4"}, 1]}}),
]


@pytest.mark.parametrize(("kind", "parse", "broken"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_fields_are_reported_not_raised(kind: str, parse: Any, broken: dict[str, Any]) -> None:
    raw = {"metadata": {"name": "x", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, **broken}
    view = parse(raw)
    assert len(view.problems) >= 3, view.problems
    render = {"cronjob": cronjob.render, "hypernode": hypernode.render, "jobflow": jobflow.render,
              "podgroup": podgroup.render}[kind]
    assert parse_text("".join(render(view)))  # still rendered, with defaults
    for junk in (3, "x", [], {"spec": []}):  # not an object at all, or a spec of the wrong type
        assert parse(junk).problems


def test_gzip_scrapes_carry_the_newer_kinds_and_the_roll_ups() -> None:
    """Prometheus asks for gzip: its body (cached members) must hold what the plain one does."""
    store = ExporterStore()
    store.on_other("cronjobs", "ADDED", parse_cronjob(objects.full_cronjob()))
    store.on_other("hypernodes", "ADDED", parse_hypernode(objects.full_hypernode()))
    store.on_other("jobflows", "ADDED", parse_jobflow(objects.full_jobflow()))
    store.on_queue_tree("ADDED", parse_queue(objects.full_queue()))
    plain = b"".join(store.chunks())
    for name in (b"volcano_cronjob_info", b"volcano_hypernode_info", b"volcano_jobflow_status_phase",
                 b"volcano_queue_subtree_allocated"):
        assert name in plain
    assert gzip.decompress(store.gzip()) == plain
    store.on_other("cronjobs", "DELETED", parse_cronjob(objects.full_cronjob()))
    assert b"volcano_cronjob_info{" not in gzip.decompress(store.gzip())


def test_max_objects_caps_the_newer_kinds_too() -> None:
    """`--max-objects hypernodes=2`: the third HyperNode gets no series and is counted once; deleting one
    admits it at its next change."""
    from volcano_monitor.exporter.cardinality import Options

    store = ExporterStore(options=Options(max_objects={"hypernodes": 2}))

    def node(name: str) -> Any:
        raw = objects.full_hypernode()
        raw["metadata"]["name"] = name
        return parse_hypernode(raw)

    def served() -> set[str]:
        text = b"".join(store.chunks()).decode()
        return {labels["hypernode"] for name, labels, _ in parse_text(text) if name == "volcano_hypernode_info"}

    for name in ("a", "b", "c"):
        store.on_other("hypernodes", "ADDED", node(name))
    store.on_other("hypernodes", "MODIFIED", node("c"))
    assert served() == {"a", "b"} and store.caps.dropped["hypernodes"] == 1
    store.on_other("hypernodes", "DELETED", node("a"))
    store.on_other("hypernodes", "MODIFIED", node("c"))
    assert served() == {"b", "c"} and store.caps.refused("hypernodes") == 0
