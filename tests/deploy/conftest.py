from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import FIXTURE_DASHBOARD, FIXTURE_RULES, chart_copy


@pytest.fixture(scope="session")
def fixture_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart with one fixture rule file and one fixture dashboard in files/."""
    return chart_copy(tmp_path_factory.mktemp("fixture-chart"),
                      {"volcano-fixture.rules.yml": FIXTURE_RULES}, {"volcano_fixture.json": FIXTURE_DASHBOARD})


@pytest.fixture(scope="session")
def empty_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart with nothing in files/ (no rules, no dashboards yet)."""
    return chart_copy(tmp_path_factory.mktemp("empty-chart"))
