"""Every watch stream recorded from real Volcano v1.12.4 (../shared/volcano/recorded), replayed into the
watchdog on a clock that follows the recording, on SQLite and PostgreSQL: the ledger rows and the
alerts must be what the recorded objects say (expectations computed from them, see replay.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from tests.recorded import load, scenario_names
from tests.watchdog.replay import expected_run, fired, last_event_message, ledger_rows, replay
from volcano_monitor.watchdog.findings.detectors.failure import FailureDetector
from volcano_monitor.watchdog.state.db.models import Alert

FAILURE_KINDS = FailureDetector.KINDS
WAIT_KINDS = frozenset({"GangUnschedulable", "PartialGang", "QueueStarved"})

# What each recording must raise (kinds of alerts that fired), and nothing else.
EXPECTED_KINDS: dict[str, set[str]] = {
    "job-completes": set(),
    "tf-ps-worker-completes": set(),
    "hierarchical-queues": set(),
    "job-deleted-while-running": set(),
    "gang-too-big": {"GangUnschedulable"},
    "gang-unschedulable": {"GangUnschedulable"},
    "queue-capability-wait": {"QueueStarved"},
    "queue-order": {"QueueStarved"},
    "pod-error-abort": {"JobFailed"},
    "pod-rejected-outofcpu": {"PodRejected", "JobFailed"},
    "pod-oomkilled-job-fails": {"PodOOMKilled", "JobRetrying", "JobFailed", "RetryExhausted"},
    "pod-oomkilled-gang2-restart-stuck": {"PodOOMKilled", "JobRetrying"},
}


def kinds(alerts: list[Alert]) -> set[str]:
    return {a.kind for a in alerts}


def by_kind(alerts: list[Alert], kind: str) -> list[Alert]:
    return [a for a in alerts if a.kind == kind]


def test_every_recording_is_covered() -> None:
    assert sorted(EXPECTED_KINDS) == scenario_names()


@pytest.mark.parametrize("name", scenario_names())
def test_ledger_matches_the_recorded_jobs(name: str, engine: Engine, database_url: str) -> None:
    scenario = load(name)
    replay(scenario, engine, database_url)
    rows = ledger_rows(engine)
    assert set(rows) == {e.name for e in scenario.of("jobs")}
    for job, row in rows.items():
        want = expected_run(scenario, job)
        got = (row.phase, row.retry_count, row.started_at, row.finished_at, row.object_deleted, row.deleted_at)
        assert got == (want.phase, want.retry_count, want.started_at, want.finished_at, want.deleted,
                       want.deleted_at), job
        assert (row.pods_succeeded, row.pods_failed) == (want.pods_succeeded, want.pods_failed), job
        if want.finished_at is not None and (want.pods_succeeded or want.pods_failed):
            assert row.pods_succeeded + row.pods_failed > 0, f"{job}: counts lost with the final status"


@pytest.mark.parametrize("name", scenario_names())
def test_alerts_match_the_recording(name: str, engine: Engine, database_url: str) -> None:
    replay(load(name), engine, database_url)
    assert kinds(fired(engine)) == EXPECTED_KINDS[name]


def test_gang_too_big_reason_is_the_schedulers_message(engine: Engine, database_url: str) -> None:
    """Real Volcano writes no PodGroup condition for a gang bigger than the cluster: the reason comes
    from its Events; the gang does not fit even an empty cluster, so it is no QueueStarved."""
    scenario = load("gang-too-big")
    replay(scenario, engine, database_url)
    (alert,) = fired(engine)
    group = scenario.of("podgroups")[-1].object
    assert alert.kind == "GangUnschedulable" and alert.state == "firing" and alert.subject == group["metadata"]["name"]
    assert not group.get("status", {}).get("conditions")  # the recording's point
    assert alert.details["message"] == last_event_message(scenario, alert.subject)
    assert alert.details["source"] == "event" and alert.details["message"] in alert.summary
    assert alert.job_name == scenario.of("jobs")[-1].name


def test_gang_unschedulable_inqueue_not_enough_resources(engine: Engine, database_url: str) -> None:
    scenario = load("gang-unschedulable")
    replay(scenario, engine, database_url)
    (alert,) = fired(engine)
    reasons = {c.get("reason") for c in scenario.of("podgroups")[-1].object["status"].get("conditions", [])}
    assert "NotEnoughResources" in reasons
    assert alert.kind == "GangUnschedulable" and alert.details["phase"] == "Inqueue"
    assert "gang unschedulable" in alert.details["message"]


def test_queue_capability_wait_is_queue_starved_only(engine: Engine, database_url: str) -> None:
    """`second` waits Pending for queue `small` (capability cpu 2) while `first` runs: one cause, one
    alert — QueueStarved on the queue, no GangUnschedulable for the group."""
    scenario = load("queue-capability-wait")
    replay(scenario, engine, database_url)
    (alert,) = fired(engine)
    queue = next(e.object for e in scenario.of("queues") if e.object["spec"].get("capability"))
    assert alert.kind == "QueueStarved" and alert.queue == queue["metadata"]["name"]
    assert alert.details["scope"] == "queue" and alert.details["resource"] == "cpu"
    assert alert.details["capability"] == float(queue["spec"]["capability"]["cpu"])
    assert alert.details["example"].startswith("default/second-")
    assert alert.state == "resolved"  # `second` got in when `first` completed


def test_queue_order_waits_are_queue_starved_on_the_queue_only(engine: Engine, database_url: str) -> None:
    """In queue `narrow` (cpu 4) `big` (4 cpu) waits behind `holder`, then behind `urgent` and `plain`, which
    the scheduler takes first when `holder` ends; `small` starts at once beside `holder`. The cause is the
    queue's capability throughout: QueueStarved on `narrow` only, no alert per waiting gang. It is two
    episodes, as the queue was: when `holder` ended the queue was empty and `big` fit, for the moment
    before the scheduler admitted `urgent` and `plain` (both resolved: every job completed)."""
    scenario = load("queue-order")
    replay(scenario, engine, database_url)
    alerts = sorted(fired(engine), key=lambda a: a.started_at)
    queue = next(e.object for e in scenario.of("queues") if e.object["spec"].get("capability"))
    assert [(a.kind, a.queue, a.state) for a in alerts] == [("QueueStarved", "narrow", "resolved")] * 2
    first, second = alerts
    assert first.resolved_at is not None and first.resolved_at <= second.started_at
    assert {a.details["scope"] for a in alerts} == {"queue"} and {a.details["resource"] for a in alerts} == {"cpu"}
    assert {a.details["capability"] for a in alerts} == {float(queue["spec"]["capability"]["cpu"])}
    assert first.details["waiting"] == 3 and second.details["waiting"] == 1  # big, urgent, plain; then big
    assert all(a.details["example"].startswith("default/big-") for a in alerts)


def test_oom_job_fails_with_oomkilled(engine: Engine, database_url: str) -> None:
    """maxRetry 2 = two runs; the restart recreates the pod under the same name with a new uid."""
    scenario = load("pod-oomkilled-job-fails")
    replay(scenario, engine, database_url)
    alerts = fired(engine)
    (failed,) = by_kind(alerts, "JobFailed")
    assert failed.severity == "critical" and "OOMKilled" in failed.summary
    assert {t["reason"] for t in failed.details["pod_terminations"]} == {"OOMKilled"}
    (exhausted,) = by_kind(alerts, "RetryExhausted")
    assert exhausted.state == "firing" and exhausted.details["retry_count"] == 2
    (retrying,) = by_kind(alerts, "JobRetrying")
    assert retrying.state == "resolved"  # the job is terminal: RetryExhausted says the rest
    pod_uids = {e.object["metadata"]["uid"] for e in scenario.of("pods")}
    ooms = by_kind(alerts, "PodOOMKilled")
    assert len(pod_uids) == 2 and {a.details["pod_uid"] for a in ooms} == pod_uids
    kept = scenario.of("pods")[-1].object["metadata"]["uid"]  # the last OOMKilled pod is kept
    assert {a.details["pod_uid"] for a in ooms if a.state == "firing"} == {kept}


def test_error_abort_is_job_failed(engine: Engine, database_url: str) -> None:
    replay(load("pod-error-abort"), engine, database_url)
    (failed,) = by_kind(fired(engine), "JobFailed")
    assert failed.severity == "warning" and failed.details["phase"] == "Aborted" and "Error" in failed.summary


def test_outofcpu_rejection(engine: Engine, database_url: str) -> None:
    scenario = load("pod-rejected-outofcpu")
    replay(scenario, engine, database_url)
    alerts = fired(engine)
    (rejected,) = by_kind(alerts, "PodRejected")
    assert rejected.details["reason"] == scenario.of("pods")[-1].object["status"]["reason"] == "OutOfcpu"
    (failed,) = by_kind(alerts, "JobFailed")
    assert "OutOfcpu" in failed.summary


@pytest.mark.parametrize("name", ["job-completes", "tf-ps-worker-completes", "hierarchical-queues",
                                  "job-deleted-while-running"])
def test_healthy_recordings_raise_nothing(name: str, engine: Engine, database_url: str) -> None:
    replay(load(name), engine, database_url)
    assert not kinds(fired(engine)) & (FAILURE_KINDS | WAIT_KINDS)
