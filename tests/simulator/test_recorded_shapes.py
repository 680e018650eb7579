"""The simulator against the recordings of real Volcano v1.12.4 (../shared/volcano/recorded): each
recorded scenario is played by its mirror (`recorded-<name>`) and compared both ways on
(a) the JSON paths present per kind (paths Volcano writes that the simulator does not, and the
    reverse), and
(b) the order of status transitions: Job conditions collapsed to phase changes, PodGroup phases
    and their deletion, pod phases.
Where they disagree the recording wins: fix the simulator, not this test."""

from __future__ import annotations

import pytest

from tests.recorded import load
from tests.simulator.recorded_play import (
    collapse,
    job_phases,
    path_set,
    play,
    pod_phases,
    podgroup_phases,
    recorded,
)

SCENARIOS = (
    "job-completes", "tf-ps-worker-completes", "pod-oomkilled-job-fails", "pod-error-abort", "gang-too-big",
    "gang-unschedulable", "queue-capability-wait", "pod-rejected-outofcpu", "job-deleted-while-running",
    "hierarchical-queues", "queue-order",
)  # not pod-oomkilled-gang2-restart-stuck: a Volcano bug (the Job stays Restarting forever)
KINDS = ("jobs", "podgroups", "queues", "pods", "events")

# Not compared, and why:
IGNORED = {
    # The API server's bookkeeping, not what the controllers write.
    "*": ("metadata.managedFields", "metadata.resourceVersion", "metadata.generation"),
    # A Job's metadata and spec are the user's manifest (the mirrors' templates differ in labels,
    # commands, TTL); only the status is the controller's.
    "jobs": ("metadata", "spec"),
    # A pod's spec is the user's template plus the API server's admission defaults (service-account
    # volume, default tolerations, ...); user labels/annotations (kwok.test/*, template labels) are
    # data. The recorded pods were played by kwok, which writes no container IDs, no waiting
    # (ContainerCreating) state and no condition reasons; a real kubelet does, and so does the simulator.
    "pods": ("spec", "metadata.annotations.*", "metadata.labels.*", "status.conditions[].reason",
             "status.containerStatuses[].containerID", "status.containerStatuses[].state.terminated.containerID",
             "status.containerStatuses[].state.waiting"),
    # The simulator's store stamps deletionTimestamp on every DELETED object.
    "podgroups": ("metadata.deletionTimestamp",),
    # The recorded queues' hierarchy annotations are user input (and ignored by v1.12).
    "queues": ("metadata.annotations",),
    # kwok writes no kubelet or kernel Events: the simulator's (OutOfcpu, OOMKilling) name their host.
    "events": ("source.host",),
}

# Transient states the recordings caught between a scheduler cycle and the job controller deleting
# the PodGroup (a few milliseconds in Volcano), which the simulator does not play.
TRANSIENT_PATHS = {
    ("tf-ps-worker-completes", "podgroups"): {"status.conditions[].message"},
    ("pod-oomkilled-job-fails", "podgroups"): {"status.conditions[].message", "status.failed"},
    ("queue-capability-wait", "podgroups"): {"status.succeeded"},
    ("pod-rejected-outofcpu", "podgroups"): {"status.failed"},
    ("hierarchical-queues", "podgroups"): {"status.running", "status.succeeded"},
    # kwok leaves `started` out for pods it holds running; a kubelet writes it.
    ("job-deleted-while-running", "pods"): {"status.containerStatuses[].started"},
}


def without_transient(seq: list[str]) -> list[str]:
    """Drop a phase a scheduler cycle wrote just before the job controller deleted the group
    (Running -> Completed/Pending -> DELETED in the recordings)."""
    return [p for i, p in enumerate(seq)
            if not (p in ("Completed", "Pending") and 0 < i < len(seq) - 1
                    and seq[i - 1] == "Running" and seq[i + 1] == "DELETED")]


@pytest.fixture(scope="module", params=SCENARIOS)
def pair(request: pytest.FixtureRequest) -> tuple[str, list, list]:  # type: ignore[type-arg]
    name = request.param
    scenario = load(name)
    seconds = max(scenario.end - scenario.start + 5, 45.0)
    return name, recorded(name), play(name, seconds)


@pytest.mark.parametrize("kind", KINDS)
def test_same_paths_both_ways(pair: tuple[str, list, list], kind: str) -> None:  # type: ignore[type-arg]
    name, volcano, sim = pair
    ignored = IGNORED["*"] + IGNORED.get(kind, ())
    expected, got = path_set(volcano, kind, ignored), path_set(sim, kind, ignored)
    transient = TRANSIENT_PATHS.get((name, kind), set())
    assert sorted(expected - got - transient) == [], f"{name}: {kind} paths Volcano writes, the simulator not"
    assert sorted(got - expected - transient) == [], f"{name}: {kind} paths the simulator writes, Volcano not"


def test_job_phase_order(pair: tuple[str, list, list]) -> None:  # type: ignore[type-arg]
    name, volcano, sim = pair
    assert sorted(job_phases(sim).values()) == sorted(job_phases(volcano).values()), name


def test_podgroup_phase_order(pair: tuple[str, list, list]) -> None:  # type: ignore[type-arg]
    name, volcano, sim = pair
    expected = sorted(collapse(without_transient(s)) for s in podgroup_phases(volcano).values())
    got = sorted(collapse(without_transient(s)) for s in podgroup_phases(sim).values())
    assert got == expected, name


def test_pod_phase_orders(pair: tuple[str, list, list]) -> None:  # type: ignore[type-arg]
    name, volcano, sim = pair
    assert set(map(tuple, pod_phases(sim).values())) == set(map(tuple, pod_phases(volcano).values())), name
