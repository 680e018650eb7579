"""Write every dashboard's JSON next to this file: `python -m volcano_monitor.dashboards.generate`.

`--check` writes nothing and exits 1 when a committed file differs from what the code builds (CI runs
it, so neither side can drift). The JSON is indented and key-sorted: stable, reviewable diffs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from volcano_monitor.dashboards import efficiency, health, job, overview, queue

DIRECTORY = Path(__file__).resolve().parent

# file name -> builder, in the order the docs present them.
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "volcano-overview.json": overview.build,
    "volcano-queue.json": queue.build,
    "volcano-job.json": job.build,
    "volcano-efficiency.json": efficiency.build,
    "volcano-monitor-health.json": health.build,
}


def render(dashboard: Dashboard) -> str:
    """The file content for one dashboard."""
    return json.dumps(dashboard, cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def rendered() -> dict[str, str]:
    """File name -> content of every dashboard."""
    return {name: render(build()) for name, build in DASHBOARDS.items()}


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, PromQL) of every query of every panel, in dashboard order.

    The expressions still contain Grafana variables. Every dashboard variable is used in `=~` matchers, so
    `.*` selects everything (`tests/promql.py:substitute_grafana_variables(expr, {"queue": ".*", ...})`);
    `$__rate_interval`, `$__range` and `$__range_s` are Grafana's built-ins.
    """
    out: list[tuple[str, str, str]] = []
    for build in DASHBOARDS.values():
        model = json.loads(render(build()))
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                out.append((model["title"], panel["title"], target["expr"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m volcano_monitor.dashboards.generate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name, content in rendered().items():
        path = DIRECTORY / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == content:
            continue
        if args.check:
            stale.append(name)
        else:
            path.write_text(content, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run `python -m volcano_monitor.dashboards.generate`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
