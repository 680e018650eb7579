"""Volcano overview: every queue's limits against what it holds and what waits, jobs by phase, how long
jobs wait and run, and what failed. The page a platform team opens first."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from volcano_monitor.dashboards.common import (
    CLUSTER,
    RESOURCES,
    Column,
    Panel,
    Query,
    bargauge_panel,
    build_dashboard,
    cluster_variable,
    datasource_variable,
    histogram_panel,
    query_variable,
    stat_panel,
    table_panel,
    timeseries_panel,
    unit_note,
)

UID = "volcano-overview"
TITLE = "Volcano overview"
Q = f'{CLUSTER}, queue=~"$queue"'
QUEUES = f"label_values(volcano_queue_info{{{CLUSTER}}}, queue)"
FAILED = 'phase=~"Failed|Aborted|Terminated"'
FIRING = f'{CLUSTER}, state="firing"'
FAILURE_ALERTS = f'{CLUSTER}, kind=~"JobFailed|RetryExhausted|JobRetrying|PodOOMKilled|PodRejected"'

# Every watchdog replica reads the same database and reports the same alert counts: take one copy.
ALERTS = "max by (cluster, kind, severity, state) (volcano_watchdog_alerts{{{}}})"


def _now() -> list[Panel]:
    return [
        stat_panel("Queues", "Queues selected (volcano_queue_info).",
                   [Query(f"count(max by (cluster, queue) (volcano_queue_info{{{Q}}}))")]),
        stat_panel("Running jobs", "Volcano Jobs in phase Running.",
                   [Query(f'sum(volcano_queue_jobs{{{Q}, phase="Running"}})')]),
        stat_panel("Pending jobs", "Volcano Jobs in phase Pending (not yet admitted or scheduled).",
                   [Query(f'sum(volcano_queue_jobs{{{Q}, phase="Pending"}})')], steps=((None, "green"), (1, "yellow"))),
        stat_panel("Pending pods", "Pods of the selected queues in phase Pending.",
                   [Query(f'count(volcano_pod_status_phase{{{Q}, phase="Pending"}})')],
                   steps=((None, "green"), (1, "yellow"))),
        stat_panel("Unschedulable PodGroups", "PodGroups whose Unschedulable condition is True (gang cannot fit).",
                   [Query('count(max by (cluster, namespace, podgroup) '
                          f'(volcano_podgroup_condition{{{CLUSTER}, type="Unschedulable", status="True"}}) '
                          '* on(cluster, namespace, podgroup) max by (cluster, namespace, podgroup) '
                          f'(volcano_podgroup_info{{{Q}}}))')],
                   steps=((None, "green"), (1, "orange"))),
        stat_panel("Firing watchdog alerts", "Alerts the watchdog is firing now, all queues.",
                   [Query(f"sum({ALERTS.format(FIRING)})")], steps=((None, "green"), (1, "red"))),
    ]


def _resources() -> list[Panel]:
    panels: list[Panel] = []
    for resource, name, unit in RESOURCES:
        r = f'resource="{resource}"'
        panels.append(timeseries_panel(
            f"{name}: capability, deserved, allocated, pending demand",
            "Per queue: capability (hard limit, dashed), deserved (fair share), allocated now, and the requests "
            "of its pending pods (demand that is waiting), all in the Queue's units." + unit_note(resource),
            [Query(f"max by (cluster, queue) (volcano_queue_spec_capability{{{Q}, {r}}})", "{{queue}} capability"),
             Query(f"max by (cluster, queue) (volcano_queue_spec_deserved{{{Q}, {r}}})", "{{queue}} deserved"),
             Query(f"max by (cluster, queue) (volcano_queue_status_allocated{{{Q}, {r}}})", "{{queue}} allocated"),
             Query(f'sum by (cluster, queue) (volcano_queue_pod_requests{{{Q}, phase="pending", {r}}})',
                   "{{queue}} pending demand")],
            unit=unit, width=8, height=9, dashed=".* capability"))
    columns = [Column(Query(f"max by (cluster, queue) (volcano_queue_spec_weight{{{Q}}})", "weight"))]
    for resource, name, unit in RESOURCES:
        r = f'resource="{resource}"'
        short = name.split(" ")[0]
        columns += [
            Column(Query(f"max by (cluster, queue) (volcano_queue_status_allocated{{{Q}, {r}}})", f"{short} allocated"),
                   unit),
            Column(Query(f"max by (cluster, queue) (volcano_queue_spec_deserved{{{Q}, {r}}})", f"{short} deserved"),
                   unit),
            Column(Query(f"max by (cluster, queue) (volcano_queue_spec_capability{{{Q}, {r}}})", f"{short} capability"),
                   unit),
            Column(Query(f'sum by (cluster, queue) (volcano_queue_pod_requests{{{Q}, phase="pending", {r}}})',
                         f"{short} pending"), unit),
        ]
    panels.append(table_panel("Queues now", "One row per queue: weight, and per resource what it holds, deserves, "
                              "may hold at most, and what its pending pods ask for." + unit_note("nvidia_com_gpu"),
                              columns, sort_by="queue", descending=False))
    panels.append(_tree())
    return panels


def _tree() -> Panel:
    """The hierarchy as Volcano uses it (`spec.parent`; v1.12 puts every new queue under `root`, whose deserved
    is the whole cluster and whose allocated is the sum of its children)."""
    def with_parent(expr: str) -> str:
        return (f"max by (cluster, queue, parent) ({expr} * on(cluster, queue) group_left(parent) "
                f"max by (cluster, queue, parent) (volcano_queue_info{{{Q}}}))")

    columns = [Column(Query(with_parent(f"volcano_queue_spec_weight{{{Q}}}"), "weight"))]
    for resource, name, unit in RESOURCES:
        short = name.split(" ")[0]
        r = f'resource="{resource}"'
        columns += [
            Column(Query(with_parent(f"volcano_queue_status_allocated{{{Q}, {r}}}"), f"{short} allocated"), unit),
            Column(Query(with_parent(f"volcano_queue_spec_deserved{{{Q}, {r}}}"), f"{short} deserved"), unit),
        ]
    columns.append(Column(Query(with_parent(f'sum by (cluster, queue) (volcano_queue_status_podgroups{{{Q}, '
                                            f'phase=~"pending|inqueue"}})'), "PodGroups waiting")))
    return table_panel("Queue tree", "Each queue with its parent (`spec.parent`; empty for `root`, whose deserved is "
                       "the whole cluster). Sort by parent to read the tree; allocation of a parent includes its "
                       "children's." + unit_note("nvidia_com_gpu"), columns, sort_by="parent", descending=False)


def _jobs() -> list[Panel]:
    return [
        timeseries_panel("Jobs by phase", "Volcano Jobs of the selected queues by phase.",
                         [Query(f"sum by (cluster, phase) (volcano_queue_jobs{{{Q}}})", "{{phase}}")], stacked=True),
        timeseries_panel("PodGroups by phase", "PodGroups (Volcano Jobs and Kubeflow/Spark jobs) of the selected "
                         "queues by phase, counted by the exporter from the PodGroups.",
                         [Query("sum by (cluster, phase) (max by (cluster, queue, phase) "
                                f"(volcano_queue_status_podgroups{{{Q}}}))",
                                "{{phase}}")], stacked=True),
        timeseries_panel("Running jobs by queue", "Volcano Jobs in phase Running, per queue.",
                         [Query(f'sum by (cluster, queue) (volcano_queue_jobs{{{Q}, phase="Running"}})', "{{queue}}")]),
        timeseries_panel("Pending jobs by queue", "Volcano Jobs in phase Pending, per queue.",
                         [Query(f'sum by (cluster, queue) (volcano_queue_jobs{{{Q}, phase="Pending"}})', "{{queue}}")]),
    ]


def _durations() -> list[Panel]:
    panels: list[Panel] = []
    for metric, what in (("volcano_job_wait_duration_seconds", "Wait time (created to running)"),
                         ("volcano_job_run_duration_seconds", "Run time (running to finished)")):
        panels.append(timeseries_panel(
            f"{what}: p50, p90, max", "Across the Jobs that exist at each moment (finished Jobs count until they "
            "are deleted), per queue.",
            [Query(f"quantile by (cluster, queue) (0.5, {metric}{{{Q}}})", "{{queue}} p50"),
             Query(f"quantile by (cluster, queue) (0.9, {metric}{{{Q}}})", "{{queue}} p90"),
             Query(f"max by (cluster, queue) ({metric}{{{Q}}})", "{{queue}} max")], unit="s"))
    for metric, what in (("volcano_job_wait_duration_seconds", "Wait time distribution"),
                         ("volcano_job_run_duration_seconds", "Run time distribution")):
        panels.append(histogram_panel(what, "Number of Jobs per duration bucket, now.", Query(f"{metric}{{{Q}}}")))
    return panels


def _failures() -> list[Panel]:
    return [
        timeseries_panel("Failed, aborted and terminated jobs", "Jobs whose current phase is Failed, Aborted or "
                         "Terminated, per queue and phase (while the Job objects exist).",
                         [Query(f"sum by (cluster, queue, phase) (volcano_job_status_phase{{{Q}, {FAILED}}})",
                                "{{queue}} {{phase}}")], stacked=True),
        timeseries_panel("Failure alerts by kind (watchdog)", "Unresolved watchdog alerts about failures: failed "
                         "and retrying jobs, OOM-killed and rejected pods (all queues).",
                         [Query(f"sum by (cluster, kind) ({ALERTS.format(FAILURE_ALERTS)})", "{{kind}}")],
                         stacked=True),
        bargauge_panel("Jobs failed in the time range, by queue", "Jobs that reached Failed, Aborted or Terminated "
                       "within the selected time range and still exist.",
                       [Query(f"sort_desc(count by (cluster, queue) (max by (cluster, namespace, job_name) "
                              f"(volcano_job_completion_time_seconds{{{CLUSTER}, {FAILED}}} > time() - $__range_s) "
                              f"* on(cluster, namespace, job_name) group_left(queue) "
                              f"max by (cluster, namespace, job_name, queue) (volcano_job_info{{{Q}}})))",
                              "{{queue}}")]),
        table_panel("Failed jobs", "Jobs in a failed phase, with the time they finished.",
                    [Column(Query("max by (cluster, namespace, job_name, queue, phase) "
                                  f"(volcano_job_status_phase{{{Q}, {FAILED}}})"
                                  " * on(cluster, namespace, job_name) group_left() "
                                  "max by (cluster, namespace, job_name) "
                                  f"(volcano_job_completion_time_seconds{{{CLUSTER}}}) * 1000", "finished"),
                            "dateTimeAsIso")],
                    width=16, sort_by="finished"),
    ]


def build() -> Dashboard:
    return build_dashboard(
        UID, TITLE, "Queues: limits vs allocation vs pending demand; jobs by phase; wait and run times; failures.",
        [datasource_variable(), cluster_variable(), query_variable("queue", "Queue", QUEUES, multi=True)],
        [("Now", _now()),
         ("Queue resources", _resources()),
         ("Jobs", _jobs()),
         ("Wait and run times", _durations()),
         ("Failures", _failures())])
