"""Job: one job (namespace + job_name) — its phase over time, its pods and tasks, each task's usage
against its request (cAdvisor and DCGM joined through `volcano_pod_info`), restarts and OOM kills
(kube-state-metrics) and retries. Kubeflow/Spark jobs appear too: their pods and PodGroup carry the
owner's name as `job_name`; the Volcano-Job-only panels (phase, retries) stay empty for them."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from volcano_monitor.dashboards.common import (
    CLUSTER,
    CPU_USED,
    GPU_UTIL,
    MEMORY_USED,
    PHYSICAL_GPU,
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
    state_timeline_panel,
    table_panel,
    timeseries_panel,
)

UID = "volcano-job"
TITLE = "Volcano job"
J = f'{CLUSTER}, namespace=~"$namespace", job_name=~"$job_name"'
POD_LABELS = ("task", "node")
RESTARTS = f"kube_pod_container_status_restarts_total{{{CLUSTER}}}"


def _pods(usage: str) -> str:
    """`usage` of this job's pods, with their task and node."""
    return attributed(usage, J, POD_LABELS)


def _status() -> list[Panel]:
    return [
        stat_panel("Phase", "The Volcano Job's current phase.",
                   [Query(f"max by (cluster, phase) (volcano_job_status_phase{{{J}}})", "{{phase}}")], show_name=True,
                   no_value="-"),
        stat_panel("Queue", "The queue the job runs in (from its PodGroup).",
                   [Query(f"max by (cluster, queue) (volcano_podgroup_info{{{J}}})", "{{queue}}")], show_name=True,
                   no_value="-"),
        stat_panel("Waited", "From creation until the job started running.",
                   [Query(f"max(volcano_job_wait_duration_seconds{{{J}}})")], unit="s", no_value="-"),
        stat_panel("Run time", "From start until it finished; for a running job, until now.",
                   [Query(f"max(volcano_job_run_duration_seconds{{{J}}}) "
                          f"or (time() - max(volcano_job_start_time_seconds{{{J}}}))")], unit="s", no_value="-"),
        stat_panel("Retries", "Times the job has been retried so far.",
                   [Query(f"max(volcano_job_status_retry_count{{{J}}})")], steps=((None, "green"), (1, "orange"))),
        stat_panel("Min available", "Pods that must run together for the job to run (gang size).",
                   [Query(f"max(volcano_job_spec_min_available{{{J}}})")], no_value="-"),
        state_timeline_panel("Phase over time", "Which phase was current when.",
                             [Query(f"max by (cluster, phase) (volcano_job_status_phase{{{J}}})", "{{phase}}")]),
    ]


def _pod_panels() -> list[Panel]:
    return [
        timeseries_panel("Pods by state (job status)", "The job's pods by state, as the Volcano Job's status counts "
                         "them.", [Query(f"max by (cluster, state) (volcano_job_status_pods{{{J}}})", "{{state}}")],
                         width=8, stacked=True),
        timeseries_panel("Tasks: pods by phase", "Pods of each task by phase (status.taskStatusCount), with each "
                         "task's replicas dashed.",
                         [Query(f"max by (cluster, task, phase) (volcano_task_status_pods{{{J}}})",
                                "{{task}} {{phase}}"),
                          Query(f"max by (cluster, task) (volcano_task_spec_replicas{{{J}}})", "{{task}} replicas")],
                         width=8, dashed=".* replicas"),
        timeseries_panel("Pods by phase (pod objects)", "The job's pod objects by phase; works for Kubeflow and "
                         "Spark jobs too.",
                         [Query("count by (cluster, phase) (max by (cluster, namespace, pod, phase) "
                                f"(volcano_pod_status_phase{{{CLUSTER}}}) "
                                "* on(cluster, namespace, pod) group_left() "
                                f"max by (cluster, namespace, pod) (volcano_pod_info{{{J}}}))", "{{phase}}")],
                         width=8, stacked=True),
    ]


def _usage() -> list[Panel]:
    tasks = ("task",)
    panels: list[Panel] = []
    for title, used, resource, unit in (
            ("CPU per task: used vs requested", CPU_USED, "cpu", "short"),
            ("Memory per task: used vs requested", MEMORY_USED, "memory", "bytes")):
        panels.append(timeseries_panel(
            title, "What each task's containers use (cAdvisor) against the requests of its running pods (dashed).",
            [Query(f"sum by (cluster, task) ({attributed(used, J, ('queue', 'job_name', 'task'))})", "{{task}} used"),
             Query(f"sum by (cluster, task) ({running_requests(J, resource)})", "{{task}} requested")],
            unit=unit, width=8, dashed=".* requested"))
    panels.append(timeseries_panel(
        "GPUs per task: busy vs requested", "GPU utilisation (DCGM) as busy GPUs (sum of utilisation / 100) against "
        "the physical GPUs the task's running pods requested (dashed; resource physical_gpu, so a shared card "
        "counts as the pod's share of it).",
        [Query(f"sum by (cluster, task) ({attributed(GPU_UTIL, J, tasks)}) / 100", "{{task}} busy"),
         Query(f"sum by (cluster, task) ({running_requests(J, PHYSICAL_GPU)})", "{{task}} requested")],
        width=8, dashed=".* requested"))
    key = "pod, task, node"
    panels.append(table_panel(
        "Pods", "The job's pods now: CPU and memory used, restarts (kube-state-metrics).",
        [Column(Query(f"max by (cluster, {key}) (volcano_pod_info{{{J}}})", "present")),
         Column(Query(f"sum by (cluster, {key}) ({_pods(CPU_USED)})", "CPU used")),
         Column(Query(f"sum by (cluster, {key}) ({_pods(MEMORY_USED)})", "memory used"), "bytes"),
         Column(Query(f"sum by (cluster, {key}) ({_pods(RESTARTS)})", "restarts"))],
        hide=("present",), height=10, sort_by="restarts"))
    return panels


def _trouble() -> list[Panel]:
    return [
        timeseries_panel("Container restarts", "Restarts of the job's containers per interval (kube-state-metrics).",
                         [Query("sum by (cluster, pod) "
                                f"(increase(kube_pod_container_status_restarts_total{{{CLUSTER}}}[$__rate_interval]) "
                                "* on(cluster, namespace, pod) group_left() "
                                f"max by (cluster, namespace, pod) (volcano_pod_info{{{J}}}))", "{{pod}}")],
                         width=8, bars=True),
        table_panel("OOM-killed containers", "Containers of the job whose last termination was an OOM kill "
                    "(kube-state-metrics).",
                    [Column(Query(f'max by (cluster, pod, container) (kube_pod_container_status_last_terminated_reason'
                                  f'{{{CLUSTER}, reason="OOMKilled"}} * on(cluster, namespace, pod) group_left() '
                                  f"max by (cluster, namespace, pod) (volcano_pod_info{{{J}}}))", "OOM killed"))],
                    width=8),
        timeseries_panel("Retries", "Retries so far against the retries allowed before the job fails (dashed).",
                         [Query(f"max(volcano_job_status_retry_count{{{J}}})", "retries"),
                          Query(f"max(volcano_job_spec_max_retry{{{J}}})", "max retries")],
                         width=8, dashed="max retries"),
    ]


def build() -> Dashboard:
    return build_dashboard(
        UID, TITLE, "One job: phase over time, pods and tasks, usage vs request per task, restarts, OOM kills, "
        "retries.",
        [datasource_variable(), cluster_variable(),
         query_variable("namespace", "Namespace", f"label_values(volcano_podgroup_info{{{CLUSTER}}}, namespace)",
                        multi=False),
         query_variable("job_name", "Job", f'label_values(volcano_podgroup_info{{{CLUSTER}, '
                                           f'namespace=~"$namespace"}}, job_name)',
                        multi=False)],
        [("Job", _status()),
         ("Pods and tasks", _pod_panels()),
         ("Usage vs request per task", _usage()),
         ("Restarts, OOM kills, retries", _trouble())])
