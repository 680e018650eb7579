"""Efficiency and recommendations: where requested resources go unused. Two views of waste — the
watchdog's tally of finished runs (by queue, last 24 h) and, live, the requests of running pods minus
what their containers use (by namespace, over the selected range) — then idle running jobs, GPU nodes
whose GPUs CPU-only pods hold hostage and nodes running hot, HyperNode fragmentation (free GPUs per
HyperNode, the largest gang one HyperNode of each tier takes), the efficiency of finished runs, and the
watchdog's request recommendations."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from volcano_monitor.dashboards.common import (
    CLUSTER,
    CPU_USED,
    GPU_UTIL,
    PHYSICAL_GPU,
    Column,
    Panel,
    Query,
    attributed,
    bargauge_panel,
    build_dashboard,
    cluster_variable,
    datasource_variable,
    query_variable,
    running_requests,
    selector,
    stat_panel,
    table_panel,
    timeseries_panel,
)

UID = "volcano-efficiency"
TITLE = "Volcano efficiency and recommendations"
Q = f'{CLUSTER}, queue=~"$queue"'
N = 'namespace=~"$namespace"'
QN = selector(Q, N)
HOUR = 3600

# Every watchdog replica reads the same database and serves the same values: one copy per label set.
WASTED = "max by (cluster, queue) (volcano_watchdog_queue_wasted_{}{{{}}})"
EFFICIENCY = f"max by (cluster, namespace, job_name, queue, resource) (volcano_watchdog_job_efficiency_ratio{{{QN}}})"
JOB = "namespace, job_name, queue"
WORKLOAD = "namespace, workload, task, container"


def _idle_per_pod(resource: str, used: str) -> str:
    """Requested minus used, per running pod, never below 0 (a pod above its request wastes nothing,
    and must not hide another pod's waste in a sum)."""
    return f"clamp_min({running_requests(QN, resource)} - on(cluster, namespace, pod) group_left() ({used}), 0)"


IDLE_CORES = _idle_per_pod("cpu", f"sum by (cluster, namespace, pod) ({CPU_USED})")
IDLE_GPUS = _idle_per_pod(PHYSICAL_GPU, f"sum by (cluster, namespace, pod) ({GPU_UTIL}) / 100")


def _alerts(kind: str) -> str:
    """Unresolved watchdog alerts of one kind (every replica serves the same counts: one copy each)."""
    return f'sum(max by (cluster, kind, severity, state) (volcano_watchdog_alerts{{{CLUSTER}, kind="{kind}"}}))'


def _finished() -> list[Panel]:
    panels: list[Panel] = [
        stat_panel("Wasted core-hours, 24 h", "Requested minus used CPU core-hours of the runs that finished in the "
                   "last 24 hours (watchdog).",
                   [Query(f"sum({WASTED.format('core_seconds', Q)}) / {HOUR}")], width=8, no_value="-"),
        stat_panel("Wasted GPU-hours, 24 h", "Requested minus used GPU-hours (utilisation-weighted) of the runs that "
                   "finished in the last 24 hours (watchdog).",
                   [Query(f"sum({WASTED.format('gpu_seconds', Q)}) / {HOUR}")], width=8, no_value="-"),
        stat_panel("Wasted memory, GiB-hours, 24 h", "Requested minus used memory of the runs that finished in the "
                   "last 24 hours, in GiB-hours (watchdog).",
                   [Query(f"sum({WASTED.format('memory_byte_seconds', Q)}) / {HOUR} / 2^30")], width=8,
                   no_value="-"),
    ]
    for kind, what, scale in (("core_seconds", "core-hours", f"{HOUR}"), ("gpu_seconds", "GPU-hours", f"{HOUR}"),
                              ("memory_byte_seconds", "GiB-hours", f"{HOUR} / 2^30")):
        panels.append(bargauge_panel(f"Wasted {what} by queue, 24 h", f"Wasted {what} of the runs that finished in "
                                     "the last 24 hours, per queue (watchdog).",
                                     [Query(f"sort_desc({WASTED.format(kind, Q)} / {scale})", "{{queue}}")]))
    return panels


def _live() -> list[Panel]:
    return [
        timeseries_panel("Idle requested cores by namespace", "Cores requested by running pods but not used "
                         "(request minus cAdvisor usage, per pod, at least 0).",
                         [Query(f"sum by (cluster, namespace) ({IDLE_CORES})", "{{namespace}}")], stacked=True),
        timeseries_panel("Idle requested GPUs by namespace", "GPUs requested by running pods but idle (request minus "
                         "DCGM utilisation / 100, per pod, at least 0).",
                         [Query(f"sum by (cluster, namespace) ({IDLE_GPUS})", "{{namespace}}")], stacked=True),
        bargauge_panel("Wasted core-hours by namespace, time range", "Idle requested cores summed over the selected "
                       "time range (5-minute steps), in core-hours.",
                       [Query("sort_desc(sum_over_time("
                              f"(sum by (cluster, namespace) ({IDLE_CORES}))[$__range:5m]) / 12)",
                              "{{namespace}}")], width=12),
        bargauge_panel("Wasted GPU-hours by namespace, time range", "Idle requested GPUs summed over the selected "
                       "time range (5-minute steps), in GPU-hours.",
                       [Query("sort_desc(sum_over_time("
                              f"(sum by (cluster, namespace) ({IDLE_GPUS}))[$__range:5m]) / 12)",
                              "{{namespace}}")], width=12),
    ]


def _idle_jobs() -> list[Panel]:
    cpu_used = f"sum by (cluster, {JOB}) ({attributed(CPU_USED, QN, ('queue', 'job_name'))})"
    cpu_requested = f"sum by (cluster, {JOB}) ({running_requests(QN, 'cpu')})"
    gpu_util = f"avg by (cluster, {JOB}) ({attributed(GPU_UTIL, QN, ('queue', 'job_name'))}) / 100"
    return [
        stat_panel("Idle jobs (watchdog)", "Unresolved JobIdle alerts: running jobs whose usage stayed far below "
                   "their request over the watchdog's idle window (all queues).",
                   [Query(_alerts("JobIdle"))], width=6, steps=((None, "green"), (1, "orange"))),
        stat_panel("Over-requested runs (watchdog)", "Unresolved OverRequested alerts: finished runs that used a "
                   "small fraction of their request (all queues).",
                   [Query(_alerts("OverRequested"))], width=6, steps=((None, "green"), (1, "orange"))),
        timeseries_panel("Idle alerts by severity (watchdog)", "Unresolved JobIdle alerts over time.",
                         [Query("sum by (cluster, severity) (max by (cluster, kind, severity, state) "
                                f'(volcano_watchdog_alerts{{{CLUSTER}, kind="JobIdle"}}))', "{{severity}}")],
                         stacked=True),
        table_panel("Running jobs with the lowest CPU use", "CPU used / requested by the running pods of each job, "
                    "lowest 20.",
                    [Column(Query(f"bottomk(20, {cpu_used} / {cpu_requested})", "CPU used / requested"),
                            "percentunit")], width=12, height=10, sort_by="CPU used / requested", descending=False),
        table_panel("Running jobs with the lowest GPU use", "Mean utilisation of each job's GPUs (DCGM), lowest 20.",
                    [Column(Query(f"bottomk(20, {gpu_util})", "GPU utilisation"), "percentunit")],
                    width=12, height=10, sort_by="GPU utilisation", descending=False),
        *_gpu_idle(),
    ]


def _gpu_idle() -> list[Panel]:
    """The watchdog's GPU idle streaks (docs/gpu-idle.md): what its queues' limits and the abort act on."""
    streak = f"max by (cluster, {JOB}) (volcano_watchdog_job_gpu_idle_seconds_total{{{QN}}})"
    no_data_matchers = selector(QN, 'state="no_gpu_data"')
    no_data = f"max by (cluster, {JOB}) (volcano_watchdog_job_gpu_state{{{no_data_matchers}}}) == 1"
    return [
        table_panel("Longest GPU idle streaks (watchdog)", "Seconds each running job's GPUs have all been idle "
                    "without a break (below the watchdog's gpu_idle.idle_util_percent), longest 20. Queue limits "
                    "raise GpuIdle; an opted-in queue's jobs are aborted after the grace period.",
                    [Column(Query(f"topk(20, {streak} > 0)", "idle for"), "s")],
                    width=12, height=10, sort_by="idle for"),
        table_panel("GPU jobs without GPU data (watchdog)", "Running jobs that request GPUs while Prometheus has no "
                    "DCGM_FI_DEV_GPU_UTIL series for them: never counted as idle. Check the DCGM exporter on their "
                    "nodes and its label style (docs/gpu-idle.md).",
                    [Column(Query(no_data, "no GPU data"))], width=12, height=10),
    ]


def _nodes() -> list[Panel]:
    stranded = f"max by (cluster, node) (volcano_watchdog_node_stranded_gpus{{{CLUSTER}}})"  # served by the leader only
    return [
        stat_panel("Stranded GPUs now (watchdog)", "Free GPUs no GPU pod can use because pods requesting no GPU "
                   "hold their node's CPU or memory (GpuStranded; all nodes).",
                   [Query(f"sum({stranded})")], width=6, no_value="-", steps=((None, "green"), (1, "orange"))),
        stat_panel("Hot nodes (watchdog)", "Unresolved NodeHot alerts: nodes whose used CPU or memory stayed above "
                   "the threshold of their allocatable (all nodes).",
                   [Query(_alerts("NodeHot"))], width=6, steps=((None, "green"), (1, "orange"))),
        timeseries_panel("Stranded GPUs by node (watchdog)", "GPUs held hostage per node over time: free, but the "
                         "CPU or memory a GPU pod needs is taken by CPU-only pods (see the GpuStranded alert for the "
                         "pods and their queues).", [Query(f"{stranded} > 0", "{{node}}")], stacked=True),
    ]


def _topology() -> list[Panel]:
    """HyperNode fragmentation (docs/gpu-sharing.md#hypernode-fragmentation): served by the watchdog's leader."""
    gang = f"max by (cluster, tier) (volcano_hypernode_largest_gang_gpus{{{CLUSTER}}})"
    free = f"max by (cluster, hypernode, tier) (volcano_hypernode_free_gpus{{{CLUSTER}}})"
    problems = f"max by (cluster, problem) (volcano_watchdog_hypernode_problems{{{CLUSTER}}})"
    return [
        bargauge_panel("Largest gang per HyperNode tier now (GPUs)", "The most GPUs a gang can get inside one "
                       "HyperNode of each tier, at the typical CPU and memory per GPU (GpuStranded's). A hard-topology "
                       "gang bigger than its allowed tier's value waits (topology_fragmented in /why), whatever the "
                       "cluster's free GPUs.", [Query(gang, "tier {{tier}}")], width=8),
        bargauge_panel("Free GPUs per HyperNode now", "Free physical GPUs on the Ready, schedulable nodes under each "
                       "HyperNode.", [Query(free, "{{hypernode}} (tier {{tier}})")], width=10),
        stat_panel("HyperNode tree problems", "Members naming unknown nodes or HyperNodes, loops, regexes that do not "
                   "compile: those members pick nothing (the watchdog logs each).", [Query(f"sum({problems})")],
                   width=6, height=8, no_value="-", steps=((None, "green"), (1, "orange"))),
        timeseries_panel("Largest gang per tier over time (GPUs)", "How the room for a topology-bound gang changed.",
                         [Query(gang, "tier {{tier}}")], width=12),
        timeseries_panel("Free GPUs per HyperNode over time", "Free physical GPUs per HyperNode.",
                         [Query(free, "{{hypernode}} (tier {{tier}})")], width=12),
    ]


def _efficiency() -> list[Panel]:
    return [
        timeseries_panel("Median efficiency of finished runs by resource", "Used / requested resource-seconds, "
                         "median over the runs that finished in the last 24 hours (watchdog).",
                         [Query(f"quantile by (cluster, resource) (0.5, {EFFICIENCY})", "{{resource}}")],
                         unit="percentunit"),
        table_panel("Least efficient finished runs", "Used / requested of the runs that finished in the last 24 "
                    "hours, lowest 25 (watchdog; one row per job and resource).",
                    [Column(Query(f"bottomk(25, {EFFICIENCY})", "efficiency"), "percentunit")],
                    width=12, height=10, sort_by="efficiency", descending=False),
    ]


def _recommendations() -> list[Panel]:
    def rec(metric: str, bound: str) -> str:
        matchers = selector(CLUSTER, N, f'bound="{bound}"')
        return f"max by (cluster, {WORKLOAD}) ({metric}{{{matchers}}})"

    columns = [Column(Query(rec("volcano_watchdog_recommendation_cpu_cores", bound), f"CPU {bound}"))
               for bound in ("target", "lower", "upper")]
    columns += [Column(Query(rec("volcano_watchdog_recommendation_memory_bytes", bound), f"memory {bound}"), "bytes")
                for bound in ("target", "lower", "upper")]
    columns.append(Column(Query(f"max by (cluster, {WORKLOAD}) "
                                f"(volcano_watchdog_recommendation_confidence{{{CLUSTER}, {N}}})",
                                "confidence"), "percentunit"))
    return [table_panel("Recommended requests (watchdog)", "Per workload (job name without its run suffix), task "
                        "and container: the recommended CPU and memory request (target) with its lower and upper "
                        "bounds, and the confidence, which grows with the length of the history.",
                        columns, height=12, sort_by="confidence")]


def build() -> Dashboard:
    return build_dashboard(
        UID, TITLE, "Wasted core/GPU-hours by queue and namespace, idle jobs, job efficiency, recommendations.",
        [datasource_variable(), cluster_variable(),
         query_variable("queue", "Queue", f"label_values(volcano_queue_info{{{CLUSTER}}}, queue)", multi=True),
         query_variable("namespace", "Namespace", f"label_values(volcano_podgroup_info{{{Q}}}, namespace)",
                        multi=True)],
        [("Waste of finished runs (last 24 h)", _finished()),
         ("Waste of running pods (selected time range)", _live()),
         ("Idle jobs", _idle_jobs()),
         ("GPUs held hostage and hot nodes", _nodes()),
         ("HyperNode fragmentation", _topology()),
         ("Job efficiency (finished runs, last 24 h)", _efficiency()),
         ("Recommendations", _recommendations())])
