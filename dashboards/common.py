"""What every volcano-monitor dashboard shares: the `${datasource}` variable that every panel and query
variable uses, the query variables, the panel kinds with their defaults, and the PromQL that joins
cAdvisor/DCGM usage to queues and jobs.

Panels are laid out by the SDK (rows of panels, left to right, wrapping at 24 columns); ids are given
here after the build, in order, because the SDK leaves them at 0 and Grafana needs them unique.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import bargauge, histogram, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["volcano", "volcano-monitor"]

# The `cluster` variable's matcher, in every selector of every query. Prometheus external labels or the
# chart's ServiceMonitor relabelling add the label (docs/dashboards.md#several-clusters); "All" is `.*`,
# which also matches a series without the label (its value is empty), so a single-cluster Prometheus
# without the label sees every series as before. Every `by (...)` and `on(...)` keeps `cluster` too, so
# two clusters' same-named queues, jobs and pods are never merged or joined to each other.
CLUSTER = 'cluster=~"$cluster"'

# Per-container usage series. cAdvisor also exports a pod-level cgroup (container="") and the pause
# container (container="POD"): counting them would add every pod's usage twice.
CPU_USED = ('rate(container_cpu_usage_seconds_total{cluster=~"$cluster", container!="", container!="POD"}'
            '[$__rate_interval])')
MEMORY_USED = 'container_memory_working_set_bytes{cluster=~"$cluster", container!="", container!="POD"}'
# DCGM utilisation in percent, one series per GPU a pod holds (pod="": a GPU no pod holds), in either
# label style: `namespace/pod/container` (scraped with honorLabels) as it is, `exported_namespace/
# exported_pod/exported_container` (the exporter pod's target labels won) copied into those (label_join
# of one label copies it), so every join `on(cluster, namespace, pod)` works with both (docs/external-metrics.md;
# the watchdog detects the style).
GPU_UTIL = ('(DCGM_FI_DEV_GPU_UTIL{cluster=~"$cluster", exported_pod="", pod!=""} or label_join(label_join(label_join('
            'DCGM_FI_DEV_GPU_UTIL{cluster=~"$cluster", exported_pod!=""}, "namespace", "", "exported_namespace"), '
            '"pod", "", "exported_pod"), "container", "", "exported_container"))')

# (resource label value, display name, Grafana unit) of the resources the Queue panels chart. These are
# the Queue's own units (spec.capability/deserved and status.allocated are Kubernetes resource names), so
# GPUs here are `nvidia.com/gpu`: vGPUs under HAMi, absent under Volcano vGPU (docs/gpu-sharing.md).
RESOURCES = (("cpu", "CPU (cores)", "short"), ("memory", "Memory", "bytes"), ("nvidia_com_gpu", "GPUs", "short"))
# The exporter's derived resource counting physical cards (unit gpu) on every GPU pod, whatever the sharing
# scheme: panels counting the GPUs pods, jobs or queues request use it, so a card shared by four HAMi pods
# counts once, not four times, and Volcano vGPU pods count at all (core/gpushare.py PHYSICAL_GPU).
PHYSICAL_GPU = "physical_gpu"


def unit_note(resource: str) -> str:
    """The sentence a Queue panel's description ends with to say which GPU unit it shows: the Queue's
    `nvidia.com/gpu` is not the physical cards the other GPU panels count, and a reader comparing them
    must know."""
    if resource == "nvidia_com_gpu":
        return (" GPUs are in the Queue's own unit, the Kubernetes resource nvidia.com/gpu (vGPUs under HAMi; "
                "none under Volcano vGPU), not physical cards.")
    return ""

Panel = Builder[dm.Panel]


def selector(*matchers: str) -> str:
    """A label selector body from the non-empty matchers (so optional filters can be left out)."""
    return ", ".join(m for m in matchers if m)


def attributed(usage: str, matchers: str, labels: Sequence[str]) -> str:
    """`usage` (any per-pod series) with the pod's Volcano `labels` added, for the pods `matchers` select.

    The right side is deduplicated with `max by`: while an exporter replica is replaced, two of them
    briefly serve the same pod, and a duplicate on the "one" side of `group_left` would fail the query.
    """
    keep = ", ".join(labels)
    by = ", ".join(("namespace", "pod", *labels))
    return (f"{usage} * on(cluster, namespace, pod) group_left({keep}) "
            f"max by (cluster, {by}) (volcano_pod_info{{{matchers}}})")


def running_requests(matchers: str, resource: str) -> str:
    """Requests of the running pods only: finished pods keep their objects (and requests) for a while,
    but use nothing, so they would make every running workload look idle. Parenthesised: `and` binds
    more loosely than arithmetic."""
    requests = selector(matchers, f'resource="{resource}"')
    running = f'volcano_pod_status_phase{{{CLUSTER}, phase="Running"}}'
    return f"(volcano_pod_resource_requests{{{requests}}} and on(cluster, namespace, pod) {running})"


@dataclass(frozen=True)
class Query:
    """One target: `legend` is the series name in graphs and the column name in tables."""

    expr: str
    legend: str = ""


def _targets(queries: Sequence[Query], *, instant: bool, as_table: bool) -> list[Builder[Dataquery]]:
    targets: list[Builder[Dataquery]] = []
    for i, q in enumerate(queries):
        t = prometheus.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        if q.legend and not as_table:
            t = t.legend_format(q.legend)
        t = t.instant() if instant else t.range()
        if as_table:
            t = t.format(PromQueryFormat.TABLE)
        targets.append(t)
    return targets


def _thresholds(steps: Sequence[tuple[float | None, str]]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=value, color=color) for value, color in steps])


def timeseries_panel(title: str, description: str, queries: Sequence[Query], *, unit: str = "short",
                     width: int = 12, height: int = 8, stacked: bool = False, bars: bool = False,
                     dashed: str = "", colours: Mapping[str, str] | None = None) -> Panel:
    """A graph over time. `dashed` is a regexp of series names drawn dashed (limits, as opposed to use);
    `colours` fixes the colour of series by name (states whose meaning the palette must not invert)."""
    p = (timeseries.Panel().title(title).description(description).datasource(DATASOURCE)
         .targets(_targets(queries, instant=False, as_table=False))
         .unit(unit).span(width).height(height).fill_opacity(10).line_width(1)
         .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
                 .placement(cm.LegendPlacement.BOTTOM).show_legend(True))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)))
    if stacked:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL)).fill_opacity(60)
    if bars:
        p = p.draw_style(cm.GraphDrawStyle.BARS).fill_opacity(80)
    if dashed:
        p = p.override_by_regexp(dashed, [dm.DynamicConfigValue(
            id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})])
    for name, colour in (colours or {}).items():
        p = p.override_by_name(name, [dm.DynamicConfigValue(id_val="color", value={"mode": "fixed",
                                                                                   "fixedColor": colour})])
    return p


def stat_panel(title: str, description: str, queries: Sequence[Query], *, unit: str = "short", width: int = 4,
               height: int = 4, show_name: bool = False, no_value: str = "0",
               steps: Sequence[tuple[float | None, str]] = ((None, "green"),)) -> Panel:
    """A big number (the latest value). `show_name` shows the legend instead: for "which phase" stats,
    whose one series carries the answer in a label."""
    p = (stat.Panel().title(title).description(description).datasource(DATASOURCE)
         .targets(_targets(queries, instant=True, as_table=False))
         .unit(unit).span(width).height(height).no_value(no_value).thresholds(_thresholds(steps))
         .graph_mode(cm.BigValueGraphMode.NONE)
         .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    if show_name:
        p = p.text_mode(cm.BigValueTextMode.NAME).color_mode(cm.BigValueColorMode.NONE)
    return p


def bargauge_panel(title: str, description: str, queries: Sequence[Query], *, unit: str = "short",
                   width: int = 8, height: int = 8) -> Panel:
    """Horizontal bars of the current value per series: rankings (waste by queue or namespace)."""
    return (bargauge.Panel().title(title).description(description).datasource(DATASOURCE)
            .targets(_targets(queries, instant=True, as_table=False))
            .unit(unit).span(width).height(height).min(0).thresholds(_thresholds(((None, "orange"),)))
            .orientation(cm.VizOrientation.HORIZONTAL).display_mode(cm.BarGaugeDisplayMode.BASIC)
            .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))


def histogram_panel(title: str, description: str, query: Query, *, unit: str = "s", width: int = 12,
                    height: int = 8) -> Panel:
    """How many objects fall in each bucket of one value (e.g. jobs by wait time), from an instant table
    query so every object is one row of the single `Value` field."""
    return (histogram.Panel().title(title).description(description).datasource(DATASOURCE)
            .targets(_targets([query], instant=True, as_table=True))
            .unit(unit).span(width).height(height).fill_opacity(60).combine(True)
            .legend(cb.VizLegendOptions().show_legend(False)))


def state_timeline_panel(title: str, description: str, queries: Sequence[Query], *, width: int = 24,
                         height: int = 6) -> Panel:
    """One row per series, coloured while it is 1: when each phase was the current one."""
    present = dm.ValueMap(options={"1": dm.ValueMappingResult(text="current", color="green")})
    return (statetimeline.Panel().title(title).description(description).datasource(DATASOURCE)
            .targets(_targets(queries, instant=False, as_table=False))
            .span(width).height(height).mappings([present]).show_value(cm.VisibilityMode.NEVER)
            .merge_values(True).legend(cb.VizLegendOptions().show_legend(False)))


@dataclass(frozen=True)
class Column:
    """A table value column from one instant query; every query of a table must aggregate `by` the
    same labels, which become the key columns the `merge` transformation joins them on."""

    query: Query
    unit: str = "short"


def table_panel(title: str, description: str, columns: Sequence[Column], *, width: int = 24, height: int = 8,
                hide: Sequence[str] = (), sort_by: str = "", descending: bool = True) -> Panel:
    """A table of current values: one row per label set, one column per query (named by its legend).

    Columns named `job_name` and `queue` link to the Job and Queue dashboards. `hide` names columns to
    leave out besides Grafana's `Time`."""
    queries = [c.query for c in columns]
    value_field = ["Value"] if len(columns) == 1 else [f"Value #{chr(ord('A') + i)}" for i in range(len(columns))]
    rename = {field: c.query.legend for field, c in zip(value_field, columns, strict=True) if c.query.legend}
    exclude = {"Time": True, **{name: True for name in hide}}
    p = (table.Panel().title(title).description(description).datasource(DATASOURCE)
         .targets(_targets(queries, instant=True, as_table=True))
         .span(width).height(height).filterable(True)
         .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
         .with_transformation(dm.DataTransformerConfig(
             id_val="organize", options={"excludeByName": exclude, "renameByName": rename})))
    for c in columns:
        if c.unit != "short" and c.query.legend:
            p = p.override_by_name(c.query.legend, [dm.DynamicConfigValue(id_val="unit", value=c.unit)])
    p = p.override_by_name("job_name", [_link("Job dashboard", JOB_LINK)])
    p = p.override_by_name("queue", [_link("Queue dashboard", QUEUE_LINK)])
    if sort_by:
        p = p.sort_by([cb.TableSortByFieldState().display_name(sort_by).desc(descending)])
    return p


JOB_LINK = ("/d/volcano-job/volcano-job?var-namespace=${__data.fields.namespace}&var-job_name=${__value.raw}"
            "&${cluster:queryparam}&${datasource:queryparam}&${__url_time_range}")
QUEUE_LINK = ("/d/volcano-queue/volcano-queue?var-queue=${__value.raw}&${cluster:queryparam}"
              "&${datasource:queryparam}&${__url_time_range}")


def _link(title: str, url: str) -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(id_val="links", value=[{"title": title, "url": url}])


def datasource_variable() -> Builder[dm.VariableModel]:
    return db.DatasourceVariable("datasource").label("Data source").type("prometheus")


def cluster_variable() -> Builder[dm.VariableModel]:
    """`cluster`, from the exporter's build info (one series per replica, always there while it is
    scraped). Without the label it offers only "All" (`.*`), which matches every series: Grafana cannot
    hide a variable that has no values, so it stays visible and harmless."""
    return query_variable("cluster", "Cluster", "label_values(volcano_exporter_build_info, cluster)", multi=True)


def query_variable(name: str, label: str, query: str, *, multi: bool,
                   all_value: str | None = ".*") -> Builder[dm.VariableModel]:
    """A variable filled from `label_values(...)` over the dashboard's time range. Multi-value ones
    include "All", by default as `.*`, which panels use in `=~` matchers (no huge alternation of every
    value). `all_value` None makes "All" the alternation of the values found: for a label that other
    series share (Prometheus' `job`), where `.*` would select too much."""
    v = (db.QueryVariable(name).label(label).query(query).datasource(DATASOURCE)
         .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC))
    if multi:
        v = v.multi(True).include_all(True)
        if all_value is not None:
            v = v.all_value(all_value)
    return v


def build_dashboard(uid: str, title: str, description: str, variables: Sequence[Builder[dm.VariableModel]],
                    sections: Sequence[tuple[str, Sequence[Panel]]]) -> dm.Dashboard:
    """The dashboard model: `sections` are (row title, panels) in order."""
    b = (db.Dashboard(title).uid(uid).description(description).tags(TAGS).editable()
         .tooltip(dm.DashboardCursorSync.CROSSHAIR).time("now-6h", "now").refresh("1m").timezone("browser")
         .annotation(db.AnnotationQuery().name("Annotations & Alerts").built_in(1).type("dashboard").enable(True)
                     .hide(True).icon_color("rgba(0, 211, 255, 1)")
                     .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --")))
         .link(db.DashboardLink("volcano-monitor").type(dm.DashboardLinkType.DASHBOARDS).tags(["volcano-monitor"])
               .as_dropdown(True).include_vars(True).keep_time(True)))
    for variable in variables:
        b = b.with_variable(variable)
    for row_title, panels in sections:
        b = b.with_row(db.Row(row_title).datasource(DATASOURCE))
        for panel in panels:
            b = b.with_panel(panel)
    model = b.build()
    for i, built in enumerate(model.panels or [], start=1):
        built.id_val = i
    return model
