"""watchdog.findings.recommendations.output: the four formats of `volcano-watchdog recommend -o`. The yaml is
parsed, its patches' shape checked, and one merged into a recorded Volcano Job that must still pass the Job
CRD's schema."""

from __future__ import annotations

import copy
import csv
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from tests.crdschema import schema_errors
from tests.exporter import objects
from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.watchdog.findings.recommendations.output import format_cpu, format_memory, render
from volcano_monitor.watchdog.findings.recommendations.policy import NOT_ENOUGH_HISTORY, Recommendation

GiB, MiB = 2**30, 2**20
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def sample_recommendations() -> list[Recommendation]:
    return [
        Recommendation("team-a", "train", "worker", "main", 0.25, 0.2, 1.5, 1.5 * GiB, 1 * GiB, 3 * GiB, 0.43,
                       4320, T0, T0 + timedelta(days=3), False, cpu_limit_cores=0.5, memory_limit_bytes=3 * GiB,
                       capped_by={"memory": "max_allowed"}, current_requests={"cpu": 1.0, "memory": 2 * GiB},
                       current_limits={"cpu": 2.0, "memory": 4 * GiB}),
        Recommendation("team-a", "train", "worker", "sidecar", 0.025, 0.025, 0.1, 250 * MiB, 250 * MiB, 900 * MiB,
                       0.43, 4320, T0, T0 + timedelta(days=3), False, current_requests={}, current_limits={}),
        Recommendation("team-b", "etl", "", "main", 0.025, 0.025, 0.1, 250 * MiB, 250 * MiB, 9000 * MiB, 0.0,
                       1, T0, T0, True, status=NOT_ENOUGH_HISTORY, message="not enough history (1 samples over 0s)",
                       memory_limit_bytes=500 * MiB),
    ]


def test_table_is_for_people() -> None:
    lines = render(sample_recommendations(), "table").splitlines()
    assert lines[0].split()[:6] == ["NAMESPACE", "WORKLOAD", "TASK", "CONTAINER", "CPU", "CPU"]
    assert "250m" in lines[1] and "500m" in lines[1] and "200m-1500m" in lines[1] and "1.5Gi" in lines[1]
    assert "1Gi-3Gi" in lines[1] and "memory=max_allowed" in lines[1]
    assert "250Mi-900Mi" in lines[2]
    # no patch below the threshold: requests and limits are dashes, the range and the reason stay
    assert "not enough history (1 samples over 0s)" in lines[3] and "OOM bump" in lines[3]
    assert "250Mi-8.79Gi" in lines[3] and "500Mi" not in lines[3]
    assert format_cpu(0.0251) == "26m" and format_memory(1023.5 * MiB) == "1024Mi"
    assert format_memory(2.345 * GiB) == "2.35Gi"
    assert "no recommendations" in render([], "table")


def test_csv_has_the_tables_cells_under_a_header() -> None:
    rows = list(csv.DictReader(io.StringIO(render(sample_recommendations(), "csv"))))
    assert [r["container"] for r in rows] == ["main", "sidecar", "main"]
    assert rows[0]["cpu_limit"] == "500m" and rows[0]["memory_limit"] == "3Gi" and rows[0]["capped_by"] == \
        "memory=max_allowed"
    assert rows[1]["cpu_limit"] == "-" and rows[1]["memory_limit"] == "-"  # the container sets none
    assert rows[2]["cpu"] == "-" and rows[2]["memory_range"] == "250Mi-8.79Gi"
    assert render([], "csv").strip() == ",".join(r for r in rows[0])


def test_json_is_for_programs() -> None:
    as_json = json.loads(render(sample_recommendations(), "json"))
    assert as_json[0]["cpu_target_cores"] == 0.25 and as_json[0]["memory_limit_bytes"] == 3 * GiB
    assert as_json[0]["first_sample_at"] == "2024-05-01T00:00:00+00:00"
    assert as_json[2]["status"] == "not_enough_history" and as_json[2]["oom_bumped"] is True
    assert set(as_json[0]) == set(Recommendation.__dataclass_fields__)
    assert json.loads(render([], "json")) == []
    with pytest.raises(ValueError, match="unknown output"):
        render(sample_recommendations(), "xml")


def test_yaml_is_a_job_patch_per_workload() -> None:
    docs = list(yaml.safe_load_all(render(sample_recommendations(), "yaml")))
    assert [(d["namespace"], d["workload"]) for d in docs] == [("team-a", "train"), ("team-b", "etl")]
    train, etl = docs
    assert set(train) == {"namespace", "workload", "patch", "capped_by"} and set(train["patch"]) == {"spec"}
    (task,) = train["patch"]["spec"]["tasks"]
    assert task["name"] == "worker" and set(task) == {"name", "template"}
    main, sidecar = task["template"]["spec"]["containers"]
    assert main == {"name": "main", "resources": {"requests": {"cpu": "250m", "memory": "1536Mi"},
                                                  "limits": {"cpu": "500m", "memory": "3072Mi"}}}
    assert sidecar == {"name": "sidecar", "resources": {"requests": {"cpu": "25m", "memory": "250Mi"}}}
    assert train["capped_by"] == {"worker/main": {"memory": "max_allowed"}}
    assert "patch" not in etl and etl["not_patched"] == {"/main": "not enough history (1 samples over 0s)"}
    for quantity in (main["resources"]["requests"]["cpu"], main["resources"]["limits"]["memory"]):
        assert parse_quantity(quantity) > 0
    assert list(yaml.safe_load_all(render([], "yaml"))) == []


def merge_by_name(job: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """What the docs tell a user to do with a patch: merge it into the manifest by task and container name."""
    out = copy.deepcopy(job)
    tasks = {t["name"]: t for t in out["spec"]["tasks"]}
    for task in patch["spec"]["tasks"]:
        containers = {c["name"]: c for c in tasks[task["name"]]["template"]["spec"]["containers"]}
        for container in task["template"]["spec"]["containers"]:
            containers[container["name"]]["resources"] = container["resources"]
    return out


def test_a_patch_merged_into_a_real_job_is_a_valid_job() -> None:
    """A recorded Volcano Job with a patch merged in by name still validates against the Job CRD, strictly,
    and carries the recommended requests and limits (everything else as it was)."""
    job = objects.full_job()
    (task,) = job["spec"]["tasks"]
    (container,) = task["template"]["spec"]["containers"]
    rec = Recommendation("ns", "w", task["name"], container["name"], 0.25, 0.2, 1.5, 1.5 * GiB, GiB, 3 * GiB, 1.0,
                         10080, T0, T0, False, cpu_limit_cores=0.5, memory_limit_bytes=3 * GiB)
    (doc,) = yaml.safe_load_all(render([rec], "yaml"))
    merged = merge_by_name(job, doc["patch"])
    assert schema_errors(merged) == []
    resources = merged["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "250m", "memory": "1536Mi"}, "limits": {"cpu": "500m", "memory": "3072Mi"}}
    merged["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = container.get("resources")
    if container.get("resources") is None:
        del merged["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    assert merged == job
