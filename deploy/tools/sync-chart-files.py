#!/usr/bin/env python3
"""Copy the alert rules and Grafana dashboards into the Helm chart, or check that the copies are current.

Helm can only read files inside the chart, so the chart carries copies:

    alerts/*.rules.yml   ->  deploy/helm/volcano-monitor/files/alerts/
    dashboards/*.json    ->  deploy/helm/volcano-monitor/files/dashboards/

The repository's alerts/ and dashboards/ are the sources; the copies are never edited by hand. A missing
source directory counts as empty (no rules yet means no PrometheusRule, not an error). Copies whose
source is gone are removed, so a renamed rule file does not leave a stale PrometheusRule behind.

    deploy/tools/sync-chart-files.py            # update the copies
    deploy/tools/sync-chart-files.py --check    # exit 1 and name the differences (tests, CI)
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "volcano-monitor"


@dataclass(frozen=True)
class Mirror:
    """Files matching `pattern` in `source` are mirrored into `target`."""

    source: Path
    pattern: str
    target: Path


def mirrors(repo: Path = REPO, chart: Path = CHART) -> list[Mirror]:
    return [
        Mirror(repo / "alerts", "*.rules.yml", chart / "files" / "alerts"),
        Mirror(repo / "dashboards", "*.json", chart / "files" / "dashboards"),
    ]


def _matching(directory: Path, pattern: str) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {path.name: path.read_bytes() for path in sorted(directory.glob(pattern)) if path.is_file()}


def differences(mirror: Mirror) -> list[str]:
    """What differs between the source and the copy, one line per file (empty: in sync)."""
    wanted = _matching(mirror.source, mirror.pattern)
    present = _matching(mirror.target, mirror.pattern)
    found = []
    for name in sorted(wanted.keys() | present.keys()):
        copy = mirror.target / name
        if name not in present:
            found.append(f"missing {copy} (copy of {mirror.source / name})")
        elif name not in wanted:
            found.append(f"stale {copy} (no {mirror.source / name})")
        elif wanted[name] != present[name]:
            found.append(f"outdated {copy} (differs from {mirror.source / name})")
    return found


def sync(mirror: Mirror) -> list[str]:
    """Make the copy equal to the source; returns what was changed."""
    changed = differences(mirror)
    wanted = _matching(mirror.source, mirror.pattern)
    mirror.target.mkdir(parents=True, exist_ok=True)
    for name in _matching(mirror.target, mirror.pattern).keys() - wanted.keys():
        (mirror.target / name).unlink()
    for name, content in wanted.items():
        copy = mirror.target / name
        if not copy.is_file() or copy.read_bytes() != content:
            copy.write_bytes(content)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a copy differs")
    parser.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    parser.add_argument("--chart", type=Path, default=CHART, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    found: list[str] = []
    for mirror in mirrors(args.repo, args.chart):
        found += differences(mirror) if args.check else sync(mirror)
    for line in found:
        print(line, file=sys.stderr if args.check else sys.stdout)
    if args.check and found:
        print("chart files are out of date: run deploy/tools/sync-chart-files.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
