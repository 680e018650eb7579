"""Amounts on the pages read as numbers a person writes: no exponents, three significant digits."""

from __future__ import annotations

import pytest

from volcano_monitor.watchdog.views.ui.html import amounts, cores, gib, number


@pytest.mark.parametrize(("value", "shown"), [
    (0.0, "0"), (0.25, "0.25"), (6.5312, "6.53"), (442.4, "442"), (999.4, "999"), (2290.3, "2,290"),
    (1_540_000.0, "1,540,000"), (-1234.0, "-1,234"),
])
def test_number(value: float, shown: str) -> None:
    assert number(value) == shown


def test_queue_amounts_of_a_big_cluster_have_no_exponent() -> None:
    text = amounts({"cpu": 380.0, "memory": 2290.0 * 2**30, "nvidia.com/gpu": 24.0})
    assert text == "cpu: 380, memory: 2,290 GiB, nvidia.com/gpu: 24"
    assert "e+" not in gib(1540.0 * 2**30) + cores(12345.0)
