"""The simulator's scheduler admits waiting jobs the way real Volcano v1.12.4 did in the recording
`queue-order` (../shared/volcano/recorded): in one capped queue, a waiting job that fits starts while an
earlier one that does not waits, and priority (the PodGroup's PriorityClass) comes before creation time.

Both sides are reduced to the same shapes, derived from their pod and PodGroup events (not written down
here): the jobs in the order their pods first ran, grouped into the ones that started together; for each
job the jobs already running beside it when it started; the jobs in the order their PodGroups were admitted
(`Inqueue`), grouped the same way. Where they disagree the recording wins: fix the simulator."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from tests.recorded import Recorded, load
from tests.simulator.recorded_play import collapse, play, podgroup_phases, recorded
from volcano_monitor.simulator.recorded_scenarios import RECORDED_WORKLOADS

NAME = "queue-order"
WORKLOADS = tuple(w.name for w in RECORDED_WORKLOADS[NAME][1])
TOGETHER = 1.0  # seconds: pods that start within one scheduling period started together


def workload_of(job: str) -> str:
    """The workload a Job belongs to (the simulator adds a suffix to the name, the recording not)."""
    return next(w for w in WORKLOADS if job == w or job.startswith(f"{w}-"))


def spans(events: Iterable[Recorded]) -> dict[str, tuple[float, float]]:
    """Per workload, when its pod first ran and when it stopped running (Succeeded, Failed, deleted)."""
    started: dict[str, float] = {}
    stopped: dict[str, float] = {}
    for e in events:
        if e.what != "pods":
            continue
        job = workload_of(e.object["metadata"]["labels"]["volcano.sh/job-name"])
        phase = (e.object.get("status") or {}).get("phase")
        if phase == "Running" and e.type != "DELETED":
            started.setdefault(job, e.received)
        elif job in started and (e.type == "DELETED" or phase in ("Succeeded", "Failed")):
            stopped.setdefault(job, e.received)
    return {job: (start, stopped.get(job, float("inf"))) for job, start in started.items()}


def start_groups(events: Iterable[Recorded]) -> list[set[str]]:
    """The workloads in the order they started, those starting within TOGETHER of each other as one group."""
    groups: list[set[str]] = []
    last = float("-inf")
    for job, (start, _) in sorted(spans(events).items(), key=lambda item: item[1][0]):
        if start - last > TOGETHER or not groups:
            groups.append(set())
        groups[-1].add(job)
        last = start
    return groups


def beside(events: Iterable[Recorded]) -> dict[str, set[str]]:
    """Per workload, the workloads already running when it started (not those starting with it)."""
    s = spans(events)
    return {job: {other for other, (o_start, o_stop) in s.items()
                  if other != job and o_start < start - TOGETHER and o_stop > start}
            for job, (start, _) in s.items()}


@pytest.fixture(scope="module")
def both() -> tuple[list[Recorded], list[Recorded]]:
    scenario = load(NAME)
    return recorded(NAME), play(NAME, scenario.end - scenario.start + 20)  # the simulated pulls take longer


def test_recording_shows_start_order_is_not_position_order(both: tuple[list[Recorded], list[Recorded]]) -> None:
    """The recording itself: what this test guards (a check that the derivation reads it right)."""
    volcano, _ = both
    assert start_groups(volcano) == [{"holder"}, {"small"}, {"urgent", "plain"}, {"big"}]
    assert beside(volcano)["small"] == {"holder"}


def test_same_start_order_and_groups(both: tuple[list[Recorded], list[Recorded]]) -> None:
    volcano, sim = both
    assert start_groups(sim) == start_groups(volcano)


def test_same_jobs_running_beside(both: tuple[list[Recorded], list[Recorded]]) -> None:
    volcano, sim = both
    assert beside(sim) == beside(volcano)


def admit_groups(events: Iterable[Recorded]) -> list[set[str]]:
    """The workloads in the order their PodGroups went `Inqueue`, those within TOGETHER as one group."""
    admitted: dict[str, float] = {}
    for e in events:
        if e.what == "podgroups" and e.type != "DELETED" and (e.object.get("status") or {}).get("phase") == "Inqueue":
            admitted.setdefault(workload_of(e.object["metadata"]["ownerReferences"][0]["name"]), e.received)
    groups: list[set[str]] = []
    last = float("-inf")
    for job, at in sorted(admitted.items(), key=lambda item: item[1]):
        if at - last > TOGETHER or not groups:
            groups.append(set())
        groups[-1].add(job)
        last = at
    return groups


def test_same_admission_order_and_groups(both: tuple[list[Recorded], list[Recorded]]) -> None:
    """The enqueue action admits no more than the queue's capability holds, counting the groups already
    admitted: `big` is not admitted beside `urgent` and `plain` to wait `Inqueue` for them to finish."""
    volcano, sim = both
    assert admit_groups(volcano) == [{"holder"}, {"small"}, {"urgent", "plain"}, {"big"}]
    assert admit_groups(sim) == admit_groups(volcano)


def test_waiting_podgroups_stay_pending_until_admitted(both: tuple[list[Recorded], list[Recorded]]) -> None:
    """A job the queue cannot admit yet is `Pending`, then `Inqueue` -> `Running` once admitted. (The
    recording's `Completed` just before a deletion is a scheduler cycle racing the job controller, which the
    simulator does not play: dropped.)"""
    volcano, sim = both

    def phases(events: list[Recorded]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, seq in podgroup_phases(events).items():
            kept = [p for i, p in enumerate(seq)
                    if p != "" and not (p == "Completed" and seq[i + 1:i + 2] == ["DELETED"])]
            out[workload_of(name.rsplit("-", 5)[0])] = collapse(kept)
        return out

    assert phases(sim) == phases(volcano)
