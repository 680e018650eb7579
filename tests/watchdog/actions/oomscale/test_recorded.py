"""OOM auto scale-up against the watch streams recorded from real Volcano v1.12.4: the Job whose pod was
OOM-killed (exit 137, reason OOMKilled) until the Job ended Failed is resubmitted with more memory; a Job
aborted by its policy after a pod error (no OOM) is left alone. Checks the shapes the controller reads
(Job phase, the pods' last termination) against the real controller, not the simulator."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session

from tests.recorded import load
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.core.model import parse_pod
from volcano_monitor.watchdog.actions.oomscale.controller import OomScaleUpController, job_seen
from volcano_monitor.watchdog.actions.oomscale.settings import OomScaleUpSettings
from volcano_monitor.watchdog.state.db.engine import migrate
from volcano_monitor.watchdog.state.db.models import OomResubmission


def replay(name: str, engine: Engine) -> dict[str, str]:
    from kubernetes import client

    controller = OomScaleUpController(OomScaleUpSettings(enabled=True, mode="dry-run"), engine,
                                      client.ApiClient(), AlwaysLeader().start())
    for event in load(name).events:
        if event.what == "jobs":
            controller._on_job(event.type, job_seen(event.object))
        elif event.what == "pods":
            controller._on_pod(event.type, parse_pod(event.object))
    return controller.reconcile()


def test_the_recorded_oom_killed_job_is_planned_with_more_memory(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'w.db'}")
    migrate(engine)
    outcomes = replay("pod-oomkilled-job-fails", engine)
    assert list(outcomes.values()) == ["dry_run"], outcomes
    with Session(engine) as session:
        (row,) = session.scalars(select(OomResubmission)).all()
    assert row.attempt == 1 and row.new_name.endswith("-oom1") and row.outcome == "dry_run"
    assert row.containers, row
    for container in row.containers.values():
        assert container["new_limit"] > container["limit"] and container["new_request"] > container["request"]


def test_a_recorded_job_aborted_without_an_oom_is_left_alone(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'w.db'}")
    migrate(engine)
    assert replay("pod-error-abort", engine) == {}
    with Session(engine) as session:
        assert session.scalars(select(OomResubmission)).all() == []
