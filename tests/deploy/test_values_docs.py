"""Every key of the chart's values.yaml is commented there and listed in the chart README's values table,
and the table names no key that does not exist."""

from __future__ import annotations

import re

import yaml

from tests.deploy.chart import CHART

VALUES = CHART / "values.yaml"
README = CHART / "README.md"


def key_lines(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    """Dotted path of every mapping key in values.yaml -> its 0-based line."""
    found: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = f"{prefix}{key.value}"
            found[path] = key.start_mark.line
            found |= key_lines(value, path + ".")
    return found


def documented() -> set[str]:
    rows = [line for line in README.read_text().split("## Values", 1)[1].splitlines() if line.startswith("| `")]
    return {re.match(r"\| `([^`]+)`", row).group(1) for row in rows}  # type: ignore[union-attr]


def test_values_table_covers_every_key_and_only_real_keys() -> None:
    keys = key_lines(yaml.compose(VALUES.read_text()))
    table = documented()
    assert table, "no values table in the chart README"
    assert table <= keys.keys(), f"README documents keys values.yaml lacks: {sorted(table - keys.keys())}"
    # A key is covered when it, or the free-form map it belongs to (resources, podSecurityContext, ...), is
    # listed; a section (image, exporter.sharding, ...) is covered by its listed keys.
    uncovered = [key for key in keys
                 if not any(key == doc or key.startswith(doc + ".") or doc.startswith(key + ".") for doc in table)]
    assert not uncovered, f"values.yaml keys missing from the README values table: {uncovered}"


def test_every_documented_key_is_commented_in_values_yaml() -> None:
    lines = VALUES.read_text().splitlines()
    keys = key_lines(yaml.compose(VALUES.read_text()))
    table = documented()
    sections = {key for key in keys if any(doc.startswith(key + ".") for doc in table)}
    for key in table | sections:
        above = lines[keys[key] - 1].strip()
        assert above.startswith("#") and len(above) > 2, f"values.yaml: no comment above `{key}`"
