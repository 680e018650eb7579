"""Shared pytest configuration."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from hypothesis import settings

# Property-based test budgets: "ci" (default) is thorough and deterministic in time (no deadline);
# "dev" is quick for local edit-test loops. Select with HYPOTHESIS_PROFILE=dev.
settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile("long", max_examples=2000, deadline=None)  # on demand: HYPOTHESIS_PROFILE=long
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class _OneNamePerModule(importlib.abc.MetaPathFinder):
    """The repository's top-level folders are importable only as `volcano_monitor.<part>`: pytest puts the
    repository root on sys.path (for `tests.*`), which would also make `exporter`, `watchdog`, ... importable
    under their bare names, as second copies of the same modules. Refuse those, so a stray bare import fails
    here as it would in an installed wheel; a bare `watchdog` finds PyPI's package if one is installed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None) -> ModuleSpec | None:
        if path is not None or fullname not in PARTS:
            return None
        elsewhere = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
        spec = importlib.machinery.PathFinder.find_spec(fullname, elsewhere)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} (import volcano_monitor.{fullname})",
                                      name=fullname)
        return spec


ROOT = Path(__file__).resolve().parents[1]
PARTS = frozenset({"core", "exporter", "watchdog", "simulator", "dashboards"})
sys.meta_path.insert(0, _OneNamePerModule())


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture parameters, which it keeps within a file
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a `slow(seconds)` test run first, the slowest first; the others keep their order after them.

    `make test` runs the suite on one worker per CPU (-n logical, --dist loadfile): a five-minute test handed out
    last holds the whole run up while the other worker idles, and handed out first it runs beside the rest
    of the suite. Whole files move, so a module fixture still starts once in a run without xdist too."""
    seconds: dict[Path, float] = {}
    for item in items:
        marker = item.get_closest_marker("slow")
        if marker is not None:
            hint = float(marker.args[0]) if marker.args else 1.0
            seconds[item.path] = max(seconds.get(item.path, 0.0), hint)
    items.sort(key=lambda item: -seconds.get(item.path, 0.0))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What a test recorded as `record_property("summary", text)` (e.g. how many requests the API's
    schemathesis run sent), at the end of the run. Printed here because output from inside a test is lost
    under xdist; reports, and their user properties, reach the controller."""
    lines = [str(value) for reports in terminalreporter.stats.values() for report in reports
             if getattr(report, "when", "") == "call"
             for name, value in getattr(report, "user_properties", ()) if name == "summary"]
    if lines:
        terminalreporter.write_sep("-", "test summaries")
        for text in lines:
            terminalreporter.write_line(text)
