"""Queue: one queue in depth — its configuration and limits over time, what it admits and runs, who waits,
and how much of what its running pods requested they actually use (cAdvisor and DCGM, joined to the
queue through `volcano_pod_info`)."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from volcano_monitor.dashboards.common import (
    CLUSTER,
    CPU_USED,
    GPU_UTIL,
    MEMORY_USED,
    PHYSICAL_GPU,
    RESOURCES,
    Column,
    Panel,
    Query,
    attributed,
    build_dashboard,
    cluster_variable,
    datasource_variable,
    query_variable,
    running_requests,
    stat_panel,
    table_panel,
    timeseries_panel,
    unit_note,
)

UID = "volcano-queue"
TITLE = "Volcano queue"
Q = f'{CLUSTER}, queue=~"$queue"'
QUEUES = f"label_values(volcano_queue_info{{{CLUSTER}}}, queue)"
UNSCHEDULABLE = 'type="Unschedulable"'


def _summary() -> list[Panel]:
    return [
        stat_panel("State", "The queue's state: Open, Closing, Closed or Unknown.",
                   [Query(f"max by (cluster, state) (volcano_queue_status_state{{{Q}}})", "{{state}}")], show_name=True,
                   no_value="unknown"),
        stat_panel("Weight", "Weight for proportional sharing between queues.",
                   [Query(f"max(volcano_queue_spec_weight{{{Q}}})")]),
        stat_panel("Parent", "The parent queue (`spec.parent`; every queue but root has one).",
                   [Query(f"max by (cluster, parent) (volcano_queue_info{{{Q}}})", "{{parent}}")], show_name=True,
                   no_value="none (root)"),
        stat_panel("Running jobs", "Volcano Jobs in phase Running.",
                   [Query(f'sum(volcano_queue_jobs{{{Q}, phase="Running"}})')]),
        stat_panel("Pending jobs", "Volcano Jobs in phase Pending.",
                   [Query(f'sum(volcano_queue_jobs{{{Q}, phase="Pending"}})')], steps=((None, "green"), (1, "yellow"))),
        stat_panel("Running pods", "The queue's pods in phase Running.",
                   [Query(f'count(volcano_pod_status_phase{{{Q}, phase="Running"}})')]),
        stat_panel("Pending pods", "The queue's pods in phase Pending.",
                   [Query(f'count(volcano_pod_status_phase{{{Q}, phase="Pending"}})')],
                   steps=((None, "green"), (1, "yellow"))),
    ]


def _resources() -> list[Panel]:
    panels: list[Panel] = []
    for resource, name, unit in RESOURCES:
        r = f'resource="{resource}"'
        panels.append(timeseries_panel(
            f"{name}: limits and use", "Guarantee (reserved), deserved (fair share), capability (hard limit; dashed, "
            "with the watchdog's planned capability when a policy manages the queue), allocated now, and the "
            "requests of the running and pending pods, all in the Queue's units." + unit_note(resource),
            [Query(f"max(volcano_queue_spec_guarantee{{{Q}, {r}}})", "guarantee"),
             Query(f"max(volcano_queue_spec_deserved{{{Q}, {r}}})", "deserved"),
             Query(f"max(volcano_queue_spec_capability{{{Q}, {r}}})", "capability"),
             Query(f"max(volcano_watchdog_queue_capability_target{{{Q}, {r}}})", "capability planned"),
             Query(f"max(volcano_queue_status_allocated{{{Q}, {r}}})", "allocated"),
             Query(f'sum(volcano_queue_pod_requests{{{Q}, phase="running", {r}}})', "running pods' requests"),
             Query(f'sum(volcano_queue_pod_requests{{{Q}, phase="pending", {r}}})', "pending pods' requests")],
            unit=unit, width=8, height=9, dashed="capability.*"))
    return panels


def _work() -> list[Panel]:
    return [
        timeseries_panel("PodGroups by phase",
                         "The queue's PodGroups by phase, counted by the exporter from the PodGroups.",
                         [Query(f"max by (cluster, phase) (volcano_queue_status_podgroups{{{Q}}})", "{{phase}}")],
                         width=8, stacked=True),
        timeseries_panel("Jobs by phase", "Volcano Jobs in the queue by phase.",
                         [Query(f"sum by (cluster, phase) (volcano_queue_jobs{{{Q}}})", "{{phase}}")], width=8,
                         stacked=True),
        timeseries_panel("Pods by phase", "The queue's pods by phase.",
                         [Query(f"count by (cluster, phase) (volcano_pod_status_phase{{{Q}}})", "{{phase}}")],
                         width=8, stacked=True),
        table_panel("Unschedulable PodGroups", "PodGroups of the queue that the scheduler cannot place, with the "
                    "reason and how long ago the condition changed.",
                    [Column(Query("time() - max by (cluster, namespace, podgroup) "
                                  f"(volcano_podgroup_condition_last_transition_timestamp_seconds{{{CLUSTER}, "
                                  f"{UNSCHEDULABLE}}}) "
                                  "* on(cluster, namespace, podgroup) group_left(reason) "
                                  "max by (cluster, namespace, podgroup, reason) "
                                  f'(volcano_podgroup_condition{{{CLUSTER}, {UNSCHEDULABLE}, status="True"}}) '
                                  "* on(cluster, namespace, podgroup) group_left(job_name) "
                                  "max by (cluster, namespace, podgroup, job_name) "
                                  f"(volcano_podgroup_info{{{Q}}})", "unschedulable for"), "s")],
                    width=12, sort_by="unschedulable for"),
        timeseries_panel("Capability changes (watchdog)", "The watchdog's capability plans for this queue by outcome: "
                         "applied, dry_run, unchanged, held by a guardrail, conflict, failed.",
                         [Query("sum by (cluster, outcome) "
                                f"(increase(volcano_watchdog_queue_capability_updates_total{{{Q}}}"
                                "[$__rate_interval]))", "{{outcome}}")], bars=True),
    ]


def _usage() -> list[Panel]:
    running = 'phase="running"'
    jobs = ("job_name",)
    key = "namespace, job_name"
    return [
        timeseries_panel("CPU: used vs requested", "Cores used by the queue's containers (cAdvisor) against the "
                         "requests of its running pods.",
                         [Query(f"sum({attributed(CPU_USED, Q, ('queue',))})", "used"),
                          Query(f'sum(volcano_queue_pod_requests{{{Q}, {running}, resource="cpu"}})', "requested")],
                         width=8),
        timeseries_panel("Memory: used vs requested", "Working set of the queue's containers (cAdvisor) against the "
                         "requests of its running pods.",
                         [Query(f"sum({attributed(MEMORY_USED, Q, ('queue',))})", "used"),
                          Query(f'sum(volcano_queue_pod_requests{{{Q}, {running}, resource="memory"}})', "requested")],
                         unit="bytes", width=8),
        timeseries_panel("GPUs: busy vs requested", "GPU utilisation of the queue's pods (DCGM) as busy GPUs "
                         "(sum of utilisation / 100) against the physical GPUs its running pods requested "
                         "(resource physical_gpu: a card shared by several pods counts once).",
                         [Query(f"sum({attributed(GPU_UTIL, Q, ('queue',))}) / 100", "busy"),
                          Query(f'sum(volcano_queue_pod_requests{{{Q}, {running}, resource="{PHYSICAL_GPU}"}})',
                                "requested")], width=8),
        table_panel("Jobs: usage vs requests", "The queue's jobs with running pods: requests of those pods and what "
                    "their containers use now.",
                    [Column(Query(f"sum by (cluster, {key}) ({running_requests(Q, 'cpu')})", "CPU requested")),
                     Column(Query(f"sum by (cluster, {key}) ({attributed(CPU_USED, Q, jobs)})", "CPU used")),
                     Column(Query(f"sum by (cluster, {key}) ({running_requests(Q, 'memory')})", "memory requested"),
                            "bytes"),
                     Column(Query(f"sum by (cluster, {key}) ({attributed(MEMORY_USED, Q, jobs)})", "memory used"),
                            "bytes"),
                     Column(Query(f"sum by (cluster, {key}) ({running_requests(Q, PHYSICAL_GPU)})",
                                  "GPUs requested")),
                     Column(Query(f"avg by (cluster, {key}) ({attributed(GPU_UTIL, Q, jobs)}) / 100",
                                  "GPU utilisation"),
                            "percentunit")],
                    height=10, sort_by="CPU requested"),
    ]


def build() -> Dashboard:
    return build_dashboard(
        UID, TITLE, "One queue: limits over time, PodGroups, jobs and pods, and usage against requests.",
        [datasource_variable(), cluster_variable(), query_variable("queue", "Queue", QUEUES, multi=False)],
        [("Queue", _summary()),
         ("Resources", _resources()),
         ("PodGroups, jobs and pods", _work()),
         ("Usage vs requests", _usage())])
