"""Naming conventions of every metric family, and no collision with the names Volcano exports itself."""

from __future__ import annotations

import re
from typing import NamedTuple, Protocol

import pytest

from tests.exporter import objects
from tests.exporter.test_prometheus import parse_text
from volcano_monitor.core.exposition import COUNTER, GAUGE, HISTOGRAM
from volcano_monitor.core.kinds import parse_cronjob, parse_hypernode, parse_jobflow
from volcano_monitor.core.model import parse_job, parse_pod, parse_podgroup, parse_queue
from volcano_monitor.exporter import selfmetrics
from volcano_monitor.exporter.cardinality import Options
from volcano_monitor.exporter.docs import all_families
from volcano_monitor.exporter.store import ExporterStore


class FamilyLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def help(self) -> str: ...
    @property
    def labels(self) -> tuple[str, ...]: ...


class Fake(NamedTuple):
    """A family as someone might write it, for the checkers' self-tests (`Family` itself refuses some)."""

    name: str
    type: str = GAUGE
    help: str = "Something."
    labels: tuple[str, ...] = ()


# What Volcano's scheduler and controllers export (DESIGN §3); `*` stands for any part of a name.
VOLCANO_OWN = (
    "volcano_queue_weight",
    "volcano_queue_share",
    "volcano_queue_overused",
    "volcano_queue_allocated_*",
    "volcano_queue_request_*",
    "volcano_queue_deserved_*",
    "volcano_queue_capacity_*",
    "volcano_queue_real_capacity_*",
    "volcano_queue_inqueue_*",
    "volcano_queue_pod_group_*_count",
    "volcano_job_share",
    "volcano_job_retry_counts",
    "volcano_job_completed_phase_count",
    "volcano_job_failed_phase_count",
    "volcano_e2e_*",
)
_VOLCANO_OWN = [(p, re.compile("[a-z0-9_:]*".join(map(re.escape, p.split("*"))))) for p in VOLCANO_OWN]

# Names promtool would flag for a reserved suffix, kept because DESIGN §4 fixes them.
RESERVED_SUFFIX_EXCEPTIONS = {"volcano_job_status_retry_count"}

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
TIME_WORDS = re.compile(r"(^|_)(time|timestamp|duration|latency|age|seconds)(_|$)")
TIME_HELP = re.compile(r"\b(unix time|unix \w+ timestamp|seconds)\b", re.IGNORECASE)


def volcano_collision(name: str) -> str | None:
    """The Volcano metric `name` equals or starts with (wildcards match any run of name characters)."""
    for pattern, regex in _VOLCANO_OWN:
        if regex.match(name):
            return pattern
    return None


def name_problems(family: FamilyLike) -> list[str]:
    name, problems = family.name, []
    if not SNAKE.match(name) or not name.startswith("volcano_"):
        problems.append("not a snake_case name starting with volcano_")
    if family.type not in (GAUGE, COUNTER, HISTOGRAM):
        problems.append(f"type {family.type!r} (only gauge, counter and histogram are rendered)")
    if family.type == HISTOGRAM and "le" in family.labels:
        problems.append("a histogram with its own `le` label")
    if family.type == COUNTER and not name.endswith("_total"):
        problems.append("a counter whose name does not end in _total")
    if name.endswith("_total") and family.type != COUNTER:
        problems.append("_total on a family that is not a counter")
    if "_total_" in name:
        problems.append("_total inside the name")
    is_time = TIME_WORDS.search(name.removeprefix("volcano_")) or TIME_HELP.search(family.help)
    if is_time and not name.endswith("_seconds"):
        problems.append("a time or duration whose name does not end in _seconds")
    if re.search(r"_(milli|micro|nano)?(second|minute|hour|ms|us|ns)s?$", name) and not name.endswith("_seconds"):
        problems.append("a time unit other than seconds")
    if name.endswith("_info") and family.type != GAUGE:
        problems.append("an _info family that is not a gauge")
    if re.search(r"_(count|sum|bucket)$", name) and name not in RESERVED_SUFFIX_EXCEPTIONS:
        problems.append("a suffix histograms and summaries reserve (_count, _sum, _bucket)")
    for label in family.labels:
        if not SNAKE.match(label):
            problems.append(f"label {label!r} is not snake_case")
    if {"job", "instance"} & set(family.labels):
        problems.append("a label named job or instance (Prometheus owns them)")
    if len(set(family.labels)) != len(family.labels):
        problems.append(f"a label repeated in {family.labels}")
    if not family.help.strip() or "\n" in family.help:
        problems.append("an empty or multi-line help")
    collision = volcano_collision(name)
    if collision:
        problems.append(f"collides with Volcano's own {collision}")
    return problems


FAMILIES = all_families()

# The one exception to "volcano_*": the families of Volcano's forked kube-state-metrics, served only with
# --compat-kube-state-metrics-fork so that Volcano's own dashboards work (docs/compat.md). They are the
# fork's names, not those of Volcano's scheduler or controllers that DESIGN §3 forbids.
COMPAT_FORK_NAMES = frozenset({"kube_pod_volcano_container_resource_requests",
                               "kube_pod_volcano_container_resource_limits",
                               "kube_pod_volcano_container_status_running"})
OWN_FAMILIES = [f for f in FAMILIES if f.name not in COMPAT_FORK_NAMES]
COMPAT_FAMILIES = [f for f in FAMILIES if f.name in COMPAT_FORK_NAMES]


@pytest.mark.parametrize("family", OWN_FAMILIES, ids=[f.name for f in OWN_FAMILIES])
def test_family_follows_conventions(family: FamilyLike) -> None:
    assert name_problems(family) == []


@pytest.mark.parametrize("family", COMPAT_FAMILIES, ids=[f.name for f in COMPAT_FAMILIES])
def test_compat_family_breaks_only_the_prefix_rule(family: FamilyLike) -> None:
    """Everything but the volcano_ prefix still holds: no Volcano name, no job/instance label."""
    assert name_problems(family) == ["not a snake_case name starting with volcano_"]


def test_compat_names_only_behind_the_flag() -> None:
    """The exception is exactly the fork's names, and only a store with the flag knows them."""
    assert {f.name for f in COMPAT_FAMILIES} == COMPAT_FORK_NAMES
    assert not COMPAT_FORK_NAMES & {f.name for f in ExporterStore().families()}
    assert {f.name for f in ExporterStore(options=Options(compat_ksm_fork=True)).families()} >= COMPAT_FORK_NAMES


def test_no_compat_name_served_without_the_flag() -> None:
    store = ExporterStore()
    store.on_pod("ADDED", parse_pod(objects.full_pod(), statuses=True))
    out: list[bytes] = []
    store.write(out)
    assert "kube_pod_volcano" not in b"".join(out).decode()


def test_family_names_are_unique() -> None:
    names = [f.name for f in FAMILIES]
    assert sorted(names) == sorted(set(names))
    assert {f.name for f in selfmetrics.FAMILIES} <= set(names)


def test_info_families_are_one() -> None:
    """Every `_info` sample the exporter renders, for realistic objects, has the value 1."""
    store = ExporterStore()
    store.on_queue("ADDED", parse_queue(objects.full_queue()))
    store.on_podgroup_owner("ADDED", parse_podgroup(objects.topology_podgroup()))
    store.on_podgroup("ADDED", parse_podgroup(objects.topology_podgroup()))
    store.on_other("cronjobs", "ADDED", parse_cronjob(objects.full_cronjob()))
    store.on_other("hypernodes", "ADDED", parse_hypernode(objects.full_hypernode()))
    store.on_other("jobflows", "ADDED", parse_jobflow(objects.full_jobflow()))
    store.on_job("ADDED", parse_job(objects.full_job()))
    store.on_pod("ADDED", parse_pod(objects.full_pod()))
    out: list[bytes] = []
    store.write(out)
    text = b"".join(out).decode() + selfmetrics.render([], {}, 0.0, 0, settled=lambda i: True)
    info = [(name, labels, value) for name, labels, value in parse_text(text) if name.endswith("_info")]
    assert {name for name, _, _ in info} == {f.name for f in FAMILIES if f.name.endswith("_info")}
    assert [s for s in info if s[2] != 1] == []


# ---- the checkers themselves ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "volcano_queue_allocated_milli_cpu", "volcano_queue_allocated_memory_bytes", "volcano_queue_weight",
    "volcano_queue_share", "volcano_queue_overused", "volcano_queue_request_milli_cpu",
    "volcano_queue_deserved_memory_bytes", "volcano_queue_capacity_scalar_resources",
    "volcano_queue_real_capacity_milli_cpu", "volcano_queue_inqueue_milli_cpu",
    "volcano_queue_pod_group_inqueue_count", "volcano_queue_pod_group_running_count", "volcano_job_share",
    "volcano_job_retry_counts", "volcano_job_completed_phase_count", "volcano_job_failed_phase_count",
    "volcano_e2e_scheduling_latency_milliseconds", "volcano_e2e_job_scheduling_duration",
    "volcano_queue_weight_total",  # starts with a Volcano name
])
def test_checker_rejects_volcano_names(name: str) -> None:
    assert volcano_collision(name) is not None
    assert any("collides with Volcano" in p for p in name_problems(Fake(name)))


@pytest.mark.parametrize("name", [
    "volcano_queue_status_allocated", "volcano_queue_spec_weight", "volcano_queue_spec_deserved",
    "volcano_queue_pod_requests", "volcano_queue_jobs", "volcano_queue_status_podgroups",
    "volcano_job_status_retry_count", "volcano_queue_info",
])
def test_checker_accepts_our_names(name: str) -> None:
    assert volcano_collision(name) is None


@pytest.mark.parametrize(("fake", "problem"), [
    (Fake("volcano_things", COUNTER), "does not end in _total"),
    (Fake("volcano_things_total"), "_total on a family that is not a counter"),
    (Fake("volcano_job_wait_duration"), "_seconds"),
    (Fake("volcano_job_started_timestamp"), "_seconds"),
    (Fake("volcano_job_age", help="Seconds since the Job was created."), "_seconds"),
    (Fake("volcano_scrape_duration_milliseconds"), "other than seconds"),
    (Fake("volcanoJobInfo"), "snake_case"),
    (Fake("kube_job_info"), "volcano_"),
    (Fake("volcano_job_thing_info", COUNTER), "_info family that is not a gauge"),
    (Fake("volcano_job_wait_seconds", "summary"), "only gauge, counter and histogram"),
    (Fake("volcano_job_wait_seconds", HISTOGRAM, labels=("queue", "le")), "its own `le` label"),
    (Fake("volcano_queue_wait_duration", HISTOGRAM), "_seconds"),
    (Fake("volcano_job_pods_count"), "reserve"),
    (Fake("volcano_job_x", labels=("namespace", "job")), "job or instance"),
    (Fake("volcano_job_x", labels=("instance",)), "job or instance"),
    (Fake("volcano_job_x", labels=("queue", "queue")), "repeated"),
    (Fake("volcano_job_x", labels=("jobName",)), "snake_case"),
    (Fake("volcano_job_x", help=""), "help"),
])
def test_checker_rejects_bad_families(fake: Fake, problem: str) -> None:
    problems = name_problems(fake)
    assert any(problem in p for p in problems), problems
