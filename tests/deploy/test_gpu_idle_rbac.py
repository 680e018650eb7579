"""The chart grants `create` on Volcano Commands (bus.volcano.sh) exactly when the watchdog runs the GPU
idle abort action — as the watchdog itself reads `gpu_idle.abort.enabled` from the rendered config and
its environment — or when told to (`watchdog.rbac.createCommands`, for a config the chart cannot see)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import one, render
from tests.deploy.test_chart import WATCHDOG_RULES, granted, watchdog_settings

CREATE_COMMANDS = {("bus.volcano.sh", "commands", "create")}
ABORT_ENV = "watchdog.extraEnv[0].name=VOLCANO_WATCHDOG_GPU_IDLE__ABORT__ENABLED"


@pytest.mark.parametrize(("sets", "creates"), [
    ((), False),
    (("watchdog.config.gpu_idle.abort.enabled=false",), False),
    (("watchdog.config.gpu_idle.abort.enabled=true",), True),
    (("watchdog.config.gpu_idle.abort.enabled=true", "watchdog.config.gpu_idle.abort.mode=dry-run"), True),
    (("watchdog.config.gpu_idle.default.gpu_idle_limit_seconds=3600",), False),  # alerts only
    ((ABORT_ENV, "watchdog.extraEnv[0].value=on"), True),
    (("watchdog.config.gpu_idle.abort.enabled=true", ABORT_ENV, "watchdog.extraEnv[0].value=false"), False),
], ids=["default", "off", "on", "dry-run", "limit-only", "env-on", "env-off"])
def test_create_commands_is_granted_exactly_when_the_abort_action_is_on(
        sets: tuple[str, ...], creates: bool, tmp_path: Path) -> None:
    docs = render(sets=sets)
    assert granted(one(docs, "ClusterRole", "-watchdog")) == WATCHDOG_RULES | (CREATE_COMMANDS if creates else set())
    assert watchdog_settings(docs, tmp_path).gpu_idle.abort.enabled is creates


def test_create_commands_with_an_existing_config_secret_needs_rbac_create_commands() -> None:
    unseen = render(sets=("watchdog.existingConfigSecret=my-config", "watchdog.config.gpu_idle.abort.enabled=true"))
    assert granted(one(unseen, "ClusterRole", "-watchdog")) == WATCHDOG_RULES
    told = render(sets=("watchdog.existingConfigSecret=my-config", "watchdog.rbac.createCommands=true"))
    assert granted(one(told, "ClusterRole", "-watchdog")) == WATCHDOG_RULES | CREATE_COMMANDS
