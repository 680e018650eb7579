"""The resubmission's arithmetic and shape, without a cluster: new memory, the caps, who takes part,
the lineage carried from one attempt to the next, and names that stay valid."""

from __future__ import annotations

from typing import Any

import pytest

from volcano_monitor.watchdog.actions.oomscale import plan
from volcano_monitor.watchdog.actions.oomscale.settings import OomScaleUpSettings

GI, MI = 2**30, 2**20


def job(name: str = "train-x7k2", annotations: dict[str, str] | None = None, request: str = "4Gi",
        limit: str | None = "4Gi") -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": request}}
    if limit:
        resources["limits"] = {"memory": limit}
    containers = [{"name": "main", "resources": resources},
                  {"name": "sidecar", "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}}]
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "uid": "uid-1", "labels": {"team": "nlp"},
                         "annotations": annotations or {}, "resourceVersion": "7"},
            "spec": {"queue": "research", "tasks": [
                {"name": "worker", "replicas": 2, "template": {"spec": {"containers": containers}}},
                {"name": "ps", "replicas": 1, "template": {"spec": {"containers": [
                    {"name": "main", "resources": {"requests": {"memory": "1Gi"}}}]}}}]},
            "status": {"state": {"phase": "Failed"}}}


def memory_of(body: dict[str, Any], task: int, container: int) -> dict[str, Any]:
    found: dict[str, Any] = body["spec"]["tasks"][task]["template"]["spec"]["containers"][container]["resources"]
    return found


def test_only_the_killed_container_grows_by_the_largest_rule() -> None:
    settings = OomScaleUpSettings()
    made = plan.plan(job(), {("worker", "main"): 5 * GI}, settings, None)
    assert not made.capped and made.new_name == "train-x7k2-oom1"
    assert memory_of(made.body, 0, 0)["requests"]["memory"] == str(int(7.5 * GI))  # peak 5Gi x 1.5 > 4Gi x 1.5
    assert memory_of(made.body, 0, 0)["limits"]["memory"] == str(int(7.5 * GI))
    assert memory_of(made.body, 0, 0)["requests"]["cpu"] == "2"
    assert memory_of(made.body, 0, 1)["limits"]["memory"] == "256Mi"  # not killed: untouched
    assert memory_of(made.body, 1, 0)["requests"]["memory"] == "1Gi"
    assert "status" not in made.body and "resourceVersion" not in made.body["metadata"]
    small = plan.plan(job(request="100Mi", limit="100Mi"), {("worker", "main"): 0.0},
                      OomScaleUpSettings(ratio=1.1), None)
    assert memory_of(small.body, 0, 0)["limits"]["memory"] == str(200 * MI)  # request + 100Mi wins


def test_caps_max_memory_and_queue_capability() -> None:
    capped = plan.plan(job(), {("worker", "main"): 0.0}, OomScaleUpSettings(max_memory="5Gi"), None)
    assert memory_of(capped.body, 0, 0)["limits"]["memory"] == str(5 * GI)
    assert "capped by max_memory" in capped.changes[0].why
    by_queue = plan.plan(job(), {("worker", "main"): 0.0}, OomScaleUpSettings(), 4.5 * GI)
    assert memory_of(by_queue.body, 0, 0)["limits"]["memory"] == str(int(4.5 * GI))
    stuck = plan.plan(job(), {("worker", "main"): 0.0}, OomScaleUpSettings(max_memory="4Gi"), None)
    assert stuck.capped and stuck.body == {}


def test_lineage_is_carried_and_attempts_count_up() -> None:
    first = plan.plan(job(), {("worker", "main"): 0.0}, OomScaleUpSettings(), None)
    notes = first.body["metadata"]["annotations"]
    assert (notes[plan.LINEAGE], notes[plan.LINEAGE_UID], notes[plan.ATTEMPT]) == ("train-x7k2", "uid-1", "1")
    assert first.body["metadata"]["labels"] == {"team": "nlp", plan.SCALED_FROM: "train-x7k2"}
    second_job = job("train-x7k2-oom1", notes, request=str(6 * GI), limit=str(6 * GI))
    second_job["metadata"]["uid"] = "uid-2"
    second = plan.plan(second_job, {("worker", "main"): 0.0}, OomScaleUpSettings(), None)
    assert second.new_name == "train-x7k2-oom2"
    assert (second.lineage.name, second.lineage.uid, second.lineage.attempt) == ("train-x7k2", "uid-1", 2)
    assert second.body["metadata"]["annotations"][plan.SCALED_FROM] == "train-x7k2-oom1"


@pytest.mark.parametrize(("annotation", "namespaces", "queues", "expected"), [
    (None, [], [], True), ("false", [], [], False), ("true", ["other"], [], True), (None, ["other"], [], False),
    (None, ["ml"], ["research"], True), (None, ["ml"], ["prod"], False), (" True ", ["x"], ["y"], True),
])
def test_who_takes_part(annotation: str | None, namespaces: list[str], queues: list[str], expected: bool) -> None:
    notes = {plan.OPT: annotation} if annotation is not None else {}
    settings = OomScaleUpSettings(namespaces=namespaces, queues=queues)
    assert plan.takes_part("ml", "research", notes, settings) is expected


def test_long_names_stay_valid() -> None:
    name = plan.new_name("a" * 60 + "-b", 12)
    assert len(name) <= 63 and name.endswith("-oom12")


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="ratio"):
        OomScaleUpSettings(ratio=1.0)
    with pytest.raises(ValueError, match="max_memory is below min_increase"):
        OomScaleUpSettings(max_memory="10Mi")
    with pytest.raises(ValueError, match="invalid quantity"):
        OomScaleUpSettings(max_memory="64GB")
