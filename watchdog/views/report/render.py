"""A report as a table, CSV, JSON, Markdown, a self-contained HTML page, or FinOps FOCUS CSV.

Every format but FOCUS carries the same columns (`COLUMNS`, one row per queue, namespace or workload
and a last row for all of them, costs included) and, except CSV, the top wasters; numbers are rounded
to 2 decimals for reading (JSON keeps them whole, for scripts). The HTML page has no script and no
external asset: a chat link opens it as is, and every value is escaped.

FOCUS (`focus`): one row per run and resource (cpu, memory, gpu) with a cost or a quantity, in the
column names of the FinOps FOCUS specification (`FOCUS_COLUMNS`; docs/cost.md says which we fill and
how), so FinOps tools import it as they import a cloud bill.
"""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import asdict
from typing import Any

from volcano_monitor.watchdog.state.prices import GIB, HOUR, RESOURCES
from volcano_monitor.watchdog.views.report.compute import PERCENTILES, Group, Report

FORMATS = ("table", "csv", "json", "html", "md", "focus")
COLUMNS = ("group", "runs", "succeeded", "failed", "running",
           "cpu_core_hours_requested", "cpu_core_hours_used", "cpu_core_hours_wasted",
           "memory_gib_hours_requested", "memory_gib_hours_used", "memory_gib_hours_wasted",
           "gpu_hours_requested", "gpu_hours_used", "gpu_hours_wasted",
           "cost_requested", "cost_used", "cost_idle", "currency", "alerts_fired",
           *(f"wait_seconds_p{p}" for p in PERCENTILES), *(f"run_seconds_p{p}" for p in PERCENTILES))
_SHORT = {"cpu_core_hours": "cpu h", "memory_gib_hours": "mem GiB·h", "gpu_hours": "gpu h"}
WASTER_COLUMNS = ("cluster", "namespace", "name", "queue", "cpu_core_hours", "memory_gib_hours", "gpu_hours")


FOCUS_COLUMNS = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd",
                 "ChargeCategory", "ChargeDescription", "BilledCost", "EffectiveCost", "ListCost", "BillingCurrency",
                 "ConsumedQuantity", "ConsumedUnit", "PricingQuantity", "PricingUnit", "ResourceId", "ResourceName",
                 "ResourceType", "ServiceCategory", "ServiceName", "SkuId", "Tags")
# Per resource: the unit of its quantity and the divisor from the ledger's resource-seconds to it.
FOCUS_UNITS = {"cpu": ("Core-Hours", HOUR), "memory": ("GiB-Hours", HOUR * GIB), "gpu": ("GPU-Hours", HOUR)}


def row(group: Group, currency: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"group": group.name, "runs": group.runs, "succeeded": group.succeeded,
                           "failed": group.failed, "running": group.running}
    for prefix, hours in (("cpu_core_hours", group.cpu), ("memory_gib_hours", group.memory),
                          ("gpu_hours", group.gpu)):
        out.update({f"{prefix}_requested": hours.requested, f"{prefix}_used": hours.used,
                    f"{prefix}_wasted": hours.wasted})
    out.update({"cost_requested": group.cost.requested, "cost_used": group.cost.used, "cost_idle": group.cost.idle,
                "currency": currency})
    out["alerts_fired"] = sum(group.alerts.values())
    out.update({f"wait_seconds_p{p}": group.wait_seconds.get(p) for p in PERCENTILES})
    out.update({f"run_seconds_p{p}": group.run_seconds.get(p) for p in PERCENTILES})
    return out


def rows(report: Report) -> list[dict[str, Any]]:
    """One row per group, then the total."""
    return [row(g, report.currency) for g in (*report.groups, report.total)]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _shown(values: dict[str, Any], column: str) -> str:
    """A cell for people: a run without a queue is in group "", shown as "-"."""
    return _cell(values[column] or "-") if column == "group" else _cell(values[column])


def title(report: Report) -> str:
    return (f"Volcano usage report by {report.by}, {report.since:%Y-%m-%d %H:%M} to "
            f"{report.until:%Y-%m-%d %H:%M} UTC")


def to_json(report: Report) -> str:
    return json.dumps({
        "since": report.since.isoformat(), "until": report.until.isoformat(), "by": report.by,
        "currency": report.currency, "groups": rows(report)[:-1], "total": row(report.total, report.currency),
        "alerts": {g.name: g.alerts for g in report.groups if g.alerts}, "alerts_total": report.total.alerts,
        "top_wasters": [asdict(w) for w in report.top_wasters],
    }, indent=2) + "\n"


def to_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows(report))
    return out.getvalue()


def to_focus(report: Report) -> str:
    """FinOps FOCUS rows: per run of the period and resource it requested or used, its requested cost as
    billed and effective cost (no discounts are known), its requested hours as the consumed quantity."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    start, end = report.since.isoformat(), report.until.isoformat()
    for charge in report.charges:
        tags = json.dumps({"cluster": charge.cluster, "queue": charge.queue, "namespace": charge.namespace,
                           "workload": charge.workload, "kind": charge.kind}, sort_keys=True)
        for resource in RESOURCES:
            unit, per = FOCUS_UNITS[resource]
            quantity, cost = charge.cost.held[resource] / per, charge.cost.requested[resource]
            if quantity <= 0 and cost <= 0:
                continue
            writer.writerow({
                "BillingPeriodStart": start, "BillingPeriodEnd": end, "ChargePeriodStart": start,
                "ChargePeriodEnd": end, "ChargeCategory": "Usage",
                "ChargeDescription": f"{resource} requested by {charge.kind} {charge.namespace}/{charge.name}",
                "BilledCost": cost, "EffectiveCost": cost, "ListCost": cost, "BillingCurrency": report.currency,
                "ConsumedQuantity": quantity, "ConsumedUnit": unit, "PricingQuantity": quantity, "PricingUnit": unit,
                "ResourceId": charge.uid, "ResourceName": f"{charge.namespace}/{charge.name}",
                "ResourceType": f"Volcano {charge.kind}" if charge.kind == "Job" else charge.kind,
                "ServiceCategory": "Compute", "ServiceName": "Volcano", "SkuId": resource, "Tags": tags,
            })
    return out.getvalue()


def _header(name: str) -> str:
    for prefix, short in _SHORT.items():
        if name.startswith(prefix):
            return f"{short} {name[len(prefix) + 1:]}"
    return name.replace("_seconds_", " s ").replace("_", " ")


def to_table(report: Report) -> str:
    table = [[_header(c) for c in COLUMNS], *[[_shown(r, c) for c in COLUMNS] for r in rows(report)]]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [title(report), ""]
    lines += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(line, widths, strict=True))).rstrip() for line in table]
    if report.top_wasters:
        lines += ["", "Top wasters (hours requested but not used):"]
        fleet = len({w.cluster for w in report.top_wasters}) > 1  # one cluster's report: its name says nothing
        lines += [f"  {w.cluster + ': ' if fleet else ''}{w.namespace}/{w.name} (queue {w.queue or '-'}): "
                  f"{w.cpu_core_hours:.2f} core-h, {w.memory_gib_hours:.2f} GiB-h, {w.gpu_hours:.2f} GPU-h"
                  for w in report.top_wasters]
    return "\n".join(lines) + "\n"


def to_markdown(report: Report) -> str:
    def md(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [f"# {title(report)}", "", "| " + " | ".join(_header(c) for c in COLUMNS) + " |",
             "|" + "|".join("---" if c == "group" else "---:" for c in COLUMNS) + "|"]
    lines += ["| " + " | ".join(md(_shown(r, c)) for c in COLUMNS) + " |" for r in rows(report)]
    if report.top_wasters:
        lines += ["", "## Top wasters", "", "| " + " | ".join(WASTER_COLUMNS) + " |",
                  "|---|---|---|---|---:|---:|---:|"]
        lines += ["| " + " | ".join(md(_cell(v)) for v in asdict(w).values()) + " |" for w in report.top_wasters]
    return "\n".join(lines) + "\n"


def to_html(report: Report) -> str:
    def cells(values: list[str], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(v)}</{tag}>" for v in values) + "</tr>"

    body = [f"<h1>{html.escape(title(report))}</h1>", "<table>",
            cells([_header(c) for c in COLUMNS], "th"),
            *[cells([_shown(r, c) for c in COLUMNS], "td") for r in rows(report)], "</table>"]
    if report.top_wasters:
        body += ["<h2>Top wasters</h2>", "<table>", cells(list(WASTER_COLUMNS), "th"),
                 *[cells([_cell(v) for v in asdict(w).values()], "td") for w in report.top_wasters], "</table>"]
    alerts = [(g.name, kind, n) for g in report.groups for kind, n in g.alerts.items()]
    if alerts:
        body += ["<h2>Alerts fired</h2>", "<table>", cells([report.by, "kind", "alerts"], "th"),
                 *[cells([name or "-", kind, str(n)], "td") for name, kind, n in alerts], "</table>"]
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th{text-align:left}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title(report))}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def render(report: Report, output: str) -> str:
    renderers = {"table": to_table, "csv": to_csv, "json": to_json, "html": to_html, "md": to_markdown,
                 "focus": to_focus}
    return renderers[output](report)
