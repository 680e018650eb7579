"""PromQL for the usage back-fill (watchdog.findings.recommendations.backfill): which pods belong to a batch of
workloads, and the range queries that read their history.

Why pod-name regexes: on the first day of an install Prometheus holds months of cAdvisor series but
no `volcano_pod_info` to join them with (the exporter came with the install), so the only link from
a series to a workload is its pod's name. A Volcano Job's pods are `<job>-<task>-<index>` and a run's
job name is the workload plus a generated run suffix (watchdog.state.workload), so a workload's pods of all
its past runs match `<workload>(<run suffix>)?-(<task>|...)-[0-9]+`. One query selects a whole batch
of workloads (their namespaces as a set, their patterns joined with `|`); each returned series is
then attributed locally with the same patterns, which also drops a pod that only matched a
pattern of another namespace.

Why escaping: namespace, workload and task names come from the cluster. `regex_literal` makes each
one match only itself inside the pattern, `promql_string` makes the pattern a valid string literal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from volcano_monitor.watchdog.sources.prometheus import CONTAINER_MATCHERS, promql_string, regex_literal

# The run suffixes watchdog.state.workload strips (a generated 4-5 character suffix, numeric date/time parts).
RUN_SUFFIX = r"(-[bcdfghjklmnpqrstvwxz0-9]{4,5}|(-[0-9]+)+)?"


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload to back-fill and the tasks its pods run (from the live pods)."""

    namespace: str
    name: str
    tasks: tuple[str, ...]


def pod_pattern(workload: Workload) -> str:
    """RE2 (and Python `re`) pattern matching the names of every pod of every run of `workload`."""
    tasks = "|".join(regex_literal(task) for task in sorted(set(workload.tasks)))
    return f"{regex_literal(workload.name)}{RUN_SUFFIX}-({tasks})-[0-9]+"


def batch_selector(workloads: Sequence[Workload]) -> str:
    """Label matchers selecting the containers of every pod of the batch (and possibly a few more, which
    `Attributor` drops): the namespaces as one set, the pod patterns as one alternation."""
    namespaces = sorted({w.namespace for w in workloads})
    patterns = sorted({pod_pattern(w) for w in workloads})
    return ", ".join((CONTAINER_MATCHERS,
                      "namespace=~" + promql_string("|".join(regex_literal(ns) for ns in namespaces)),
                      "pod=~" + promql_string("|".join(f"(?:{p})" for p in patterns))))


def cpu_range_query(selector: str, rate_window: str) -> str:
    """Cores used per container (a container can have more than one cgroup series: they add up)."""
    return f"sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{{{selector}}}[{rate_window}]))"


def memory_peak_query(selector: str, window_seconds: float) -> str:
    """Each container's highest working set over the `window_seconds` before the evaluation time (the
    peak of one memory interval); max over a container's cgroup series, which do not add up."""
    window = f"{max(1, round(window_seconds * 1000))}ms"
    return ("max by (namespace, pod, container) "
            f"(max_over_time(container_memory_working_set_bytes{{{selector}}}[{window}]))")


class Attributor:
    """Which workload and task a pod of a batch belongs to (None: not one of the batch's)."""

    def __init__(self, workloads: Iterable[Workload]) -> None:
        self._patterns: dict[str, list[tuple[re.Pattern[str], str]]] = {}
        for w in workloads:
            self._patterns.setdefault(w.namespace, []).append((re.compile(pod_pattern(w)), w.name))
        for patterns in self._patterns.values():  # the longest name first: `etl-daily` before `etl`
            patterns.sort(key=lambda item: -len(item[1]))
        self._cache: dict[tuple[str, str], tuple[str, str] | None] = {}

    def __call__(self, namespace: str, pod: str) -> tuple[str, str] | None:
        key = (namespace, pod)
        if key in self._cache:
            return self._cache[key]
        found = None
        for pattern, name in self._patterns.get(namespace, ()):
            match = pattern.fullmatch(pod)
            if match is not None:
                found = (name, match.group(match.re.groups))  # the task: the last group
                break
        self._cache[key] = found
        return found
