"""docs/metrics.md is generated from the metric families: it must be current."""

from __future__ import annotations

import difflib
from pathlib import Path

from volcano_monitor.exporter.docs import REGENERATE, all_families, render_metrics_doc

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_metrics_doc_is_current() -> None:
    expected = render_metrics_doc()
    actual = DOC.read_text() if DOC.exists() else ""
    if actual != expected:
        diff = "".join(difflib.unified_diff(actual.splitlines(keepends=True), expected.splitlines(keepends=True),
                                            "docs/metrics.md", "render_metrics_doc()", n=1))
        raise AssertionError(f"docs/metrics.md is out of date; regenerate it with `{REGENERATE}` (from the "
                             f"repository root, with the project's Python, e.g. .venv/bin/python)\n{diff[:4000]}")


def test_metrics_doc_lists_every_family_once() -> None:
    doc = render_metrics_doc()
    families = all_families()
    assert len({f.name for f in families}) == len(families), "a family is defined twice"
    for family in families:
        assert doc.count(f"| `{family.name}` |") == 1, family.name
    assert "## Other" not in doc, "a family belongs to no group: add it to exporter.docs.GROUPS"
