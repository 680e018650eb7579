"""The exporter against the simulator's default scenario: values, not just names, checked against
the objects the API server holds (computed here independently of the exporter's model)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from tests.exporter.harness import start_exporter
from tests.exporter.scrape import parse, select, value
from volcano_monitor.core.quantity import parse_quantity, resource_label_and_unit
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.runtime import SimulatorThread

TERMINAL = ("Completed", "Failed", "Aborted", "Terminated")


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def objects(sim: SimulatorThread, rtype: R.ResourceType) -> list[dict[str, Any]]:
    return sim.call(sim.store.objects, rtype)


def test_job_times_follow_the_condition_timestamps(scenario_sim: SimulatorThread, tmp_path: Path,
                                                   exporters: list[Exporter]) -> None:
    exporter = start_exporter(scenario_sim, tmp_path)
    exporters.append(exporter)
    s = parse(exporter.scrape())
    jobs = objects(scenario_sim, R.JOBS)
    phases = {job["status"]["state"]["phase"] for job in jobs}
    assert {"Running", "Pending"} <= phases and phases & set(TERMINAL), phases
    checked_finished = 0
    for job in jobs:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        queue = job["spec"]["queue"]
        conditions = {c["status"]: ts(c["lastTransitionTime"]) for c in job["status"].get("conditions", [])}
        created = ts(job["metadata"]["creationTimestamp"])
        assert value(s, "volcano_job_created_timestamp_seconds", namespace=ns, job_name=name) == created
        phase = job["status"]["state"]["phase"]
        assert value(s, "volcano_job_status_phase", namespace=ns, job_name=name, queue=queue, phase=phase) == 1
        if "Running" not in conditions:
            assert not select(s, "volcano_job_start_time_seconds", namespace=ns, job_name=name)
            continue
        start = conditions["Running"]
        assert value(s, "volcano_job_start_time_seconds", namespace=ns, job_name=name) == start
        assert value(s, "volcano_job_wait_duration_seconds", namespace=ns, job_name=name, queue=queue) == \
            start - created
        if phase in TERMINAL:
            finish = conditions[phase]
            assert value(s, "volcano_job_completion_time_seconds", namespace=ns, job_name=name, phase=phase) == finish
            assert value(s, "volcano_job_run_duration_seconds", namespace=ns, job_name=name) == finish - start
            checked_finished += 1
    assert checked_finished >= 1


def resources(raw: dict[str, Any] | None) -> dict[tuple[str, str], float]:
    return {resource_label_and_unit(k): parse_quantity(v) for k, v in (raw or {}).items()}


def test_queue_capability_and_allocated_match_the_queues(scenario_sim: SimulatorThread, tmp_path: Path,
                                                         exporters: list[Exporter]) -> None:
    exporter = start_exporter(scenario_sim, tmp_path)
    exporters.append(exporter)
    s = parse(exporter.scrape())
    queues = objects(scenario_sim, R.QUEUES)
    assert any(q["spec"].get("capability") for q in queues) and any(q["status"].get("allocated") for q in queues)
    for queue in queues:
        name = queue["metadata"]["name"]
        for family, raw in (("volcano_queue_spec_capability", queue["spec"].get("capability")),
                            ("volcano_queue_status_allocated", queue["status"].get("allocated"))):
            expected = resources(raw)
            got = {(dict(k)["resource"], dict(k)["unit"]): v for k, v in select(s, family, queue=name).items()}
            assert got == expected, (name, family)
        assert value(s, "volcano_queue_spec_weight", queue=name) == queue["spec"].get("weight", 1)
        assert value(s, "volcano_queue_status_state", queue=name, state=queue["status"]["state"]) == 1
        assert value(s, "volcano_queue_info", queue=name, parent=queue["spec"].get("parent", "")) == 1


def test_pod_info_carries_queue_job_and_task(scenario_sim: SimulatorThread, tmp_path: Path,
                                             exporters: list[Exporter]) -> None:
    exporter = start_exporter(scenario_sim, tmp_path)
    exporters.append(exporter)
    s = parse(exporter.scrape())
    groups = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in objects(scenario_sim, R.PODGROUPS)}
    pods = objects(scenario_sim, R.PODS)
    kubeflow = 0
    for pod in pods:
        meta = pod["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        group_name = annotations.get("scheduling.k8s.io/group-name", "")
        if "volcano.sh/job-name" in labels:
            queue, job_name, kind = labels["volcano.sh/queue-name"], labels["volcano.sh/job-name"], "Job"
        else:  # Kubeflow: only the group annotation; the group says the queue and the owner
            group = groups[(meta["namespace"], group_name)]
            owner = next(o for o in group["metadata"]["ownerReferences"] if o.get("controller"))
            queue, job_name, kind = group["spec"]["queue"], owner["name"], owner["kind"]
            kubeflow += 1
        assert value(s, "volcano_pod_info", namespace=meta["namespace"], pod=meta["name"], uid=meta["uid"],
                     queue=queue, job_name=job_name, job_kind=kind, task=labels.get("volcano.sh/task-spec", ""),
                     podgroup=group_name, node=pod["spec"].get("nodeName", "")) == 1
    assert kubeflow >= 1 and len(select(s, "volcano_pod_info")) == len(pods)


def test_derived_queue_aggregates_equal_a_full_recount(scenario_sim: SimulatorThread, tmp_path: Path,
                                                       exporters: list[Exporter]) -> None:
    exporter = start_exporter(scenario_sim, tmp_path)
    exporters.append(exporter)
    s = parse(exporter.scrape())
    expected: dict[tuple[str, str, str], float] = {}
    for pod in objects(scenario_sim, R.PODS):
        phase = pod["status"].get("phase")
        info = select(s, "volcano_pod_info", namespace=pod["metadata"]["namespace"], pod=pod["metadata"]["name"])
        queue = dict(next(iter(info)))["queue"]
        if phase not in ("Pending", "Running"):
            continue
        for lbls, amount in select(s, "volcano_pod_resource_requests", namespace=pod["metadata"]["namespace"],
                                   pod=pod["metadata"]["name"]).items():
            key = (queue, phase.lower(), dict(lbls)["resource"])
            expected[key] = expected.get(key, 0.0) + amount
    got = {(dict(k)["queue"], dict(k)["phase"], dict(k)["resource"]): v
           for k, v in select(s, "volcano_queue_pod_requests").items()}
    assert got.keys() == expected.keys()
    for key, amount in expected.items():
        assert abs(got[key] - amount) <= 1e-9 * max(1.0, amount), key
    jobs: dict[tuple[str, str], int] = {}
    for job in objects(scenario_sim, R.JOBS):
        key = (job["spec"]["queue"], job["status"]["state"]["phase"])
        jobs[key] = jobs.get(key, 0) + 1
    assert {(dict(k)["queue"], dict(k)["phase"]): v for k, v in select(s, "volcano_queue_jobs").items()} == jobs
