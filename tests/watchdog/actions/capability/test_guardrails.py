"""Guardrails (pure): rounding, hierarchy, allocation floor, tolerance, maximum step, cooldown."""

from __future__ import annotations

import pytest

from volcano_monitor.watchdog.actions.capability.guardrails import (
    Limits,
    format_quantity,
    hierarchy_order,
    parent_limits,
    plan_queue,
    plan_resource,
    round_up,
)
from volcano_monitor.watchdog.actions.capability.policy import Target

GI = 2**30
FREE = Limits(max_step_fraction=100, cooldown_seconds=0, tolerance_fraction=0)
STEP = Limits(max_step_fraction=0.25, cooldown_seconds=900, tolerance_fraction=0.05)


def plan(resource: str, current: float | None, target: float | None, allocated: float = 0.0,
         parent: float | None = None, limits: Limits = STEP, cooldown_left: float = 0.0) -> tuple[float | None, bool]:
    p = plan_resource(resource, current, target, allocated, parent, limits, cooldown_left, "policy")
    return p.planned, p.held


def test_rounding_and_quantities() -> None:
    assert round_up("cpu", 2.00001) == pytest.approx(2.001)
    assert round_up("memory", 1.2 * GI) == 1229 * 2**20  # up to the next MiB
    assert round_up("nvidia.com/gpu", 1.5) == 2.0
    assert round_up("nvidia.com/gpu", 2.0 + 1e-12) == 2.0  # float noise is not a whole GPU
    assert [format_quantity("cpu", v) for v in (8.0, 2.5, 0.25)] == ["8", "2500m", "250m"]
    assert [format_quantity("memory", v) for v in (64 * GI, 1.5 * GI, 1000.0)] == ["64Gi", "1536Mi", "1000"]
    assert format_quantity("nvidia.com/gpu", 8.0) == "8"


def test_max_step_limits_each_change_both_ways() -> None:
    assert plan("cpu", 100.0, 10.0) == (75.0, False)
    assert plan("cpu", 100.0, 1000.0) == (125.0, False)
    assert plan("cpu", 100.0, 110.0) == (110.0, False)  # within one step: straight there


def test_small_integer_capabilities_still_move_one_unit() -> None:
    assert plan("nvidia.com/gpu", 2.0, 8.0) == (3.0, False)  # 25% of 2 is half a GPU: one whole GPU
    assert plan("nvidia.com/gpu", 2.0, 0.0) == (1.0, False)


def test_unset_or_zero_capability_is_set_to_the_target_at_once() -> None:
    assert plan("nvidia.com/gpu", None, 8.0) == (8.0, False)
    assert plan("nvidia.com/gpu", 0.0, 8.0) == (8.0, False)


def test_tolerance_skips_small_changes() -> None:
    assert plan("cpu", 100.0, 96.0) == (100.0, False)  # 4% < 5%: not worth a change, and not "held"
    assert plan("cpu", 100.0, 94.0) == (94.0, False)


def test_never_below_allocated() -> None:
    assert plan("nvidia.com/gpu", 8.0, 0.0, allocated=6.0, limits=FREE) == (6.0, False)
    # at allocated already: the policy wants less, the floor holds it
    assert plan("nvidia.com/gpu", 6.0, 0.0, allocated=6.0, limits=FREE) == (6.0, True)
    # already below allocated (someone set it so): not lowered further, not raised by a lower target
    assert plan("nvidia.com/gpu", 4.0, 0.0, allocated=6.0, limits=FREE) == (4.0, True)
    assert plan("nvidia.com/gpu", None, 0.0, allocated=6.0, limits=FREE) == (6.0, False)


def test_child_never_exceeds_parent() -> None:
    assert plan("cpu", 10.0, 40.0, parent=16.0, limits=FREE) == (16.0, False)
    assert plan("cpu", 16.0, 40.0, parent=16.0, limits=FREE) == (16.0, True)


def test_cooldown_holds_every_change() -> None:
    assert plan("cpu", 100.0, 10.0, cooldown_left=30.0) == (100.0, True)
    assert plan("cpu", None, 10.0, cooldown_left=30.0) == (None, True)
    assert plan("cpu", 100.0, 98.0, cooldown_left=30.0) == (100.0, False)  # nothing to hold


def test_unknown_target_leaves_the_capability_alone() -> None:
    assert plan("cpu", 100.0, None) == (100.0, False)
    assert plan("cpu", None, None) == (None, False)


def test_queue_verdicts() -> None:
    target = Target({"cpu": 50.0, "memory": 10.0 * GI}, {"cpu": "c", "memory": "m"}, {"policy": "share"})
    current = {"cpu": 100.0, "memory": 10.0 * GI}
    moving = plan_queue("q", target, current, {}, {}, STEP, 0.0)
    assert (moving.verdict, moving.changes, moving.policy) == ("change", {"cpu": 75.0}, "share")
    assert plan_queue("q", target, current, {}, {}, STEP, 60.0).verdict == "held"
    still = plan_queue("q", Target({"cpu": 100.0}, {}), current, {}, {}, STEP, 0.0)
    assert (still.verdict, still.changes) == ("unchanged", {})


def test_parent_limits_prefer_the_parents_plan_then_its_capability() -> None:
    capabilities = {"root": {"cpu": 100.0, "memory": 8.0}, "eng": {"cpu": 40.0}}
    assert parent_limits("root", {}, capabilities) == {"cpu": 100.0, "memory": 8.0}
    assert parent_limits("root", {"root": {"cpu": 60.0}}, capabilities) == {"cpu": 60.0, "memory": 8.0}
    assert parent_limits("", {}, capabilities) == {}
    assert parent_limits("missing", {}, capabilities) == {}


def test_hierarchy_order_puts_parents_first() -> None:
    parents = {"prod": "eng", "eng": "root", "ml": "root", "loop-a": "loop-b", "loop-b": "loop-a"}
    order = hierarchy_order(["prod", "ml", "eng", "root", "loop-a"], parents)
    assert order.index("root") < order.index("eng") < order.index("prod")
    assert order.index("root") < order.index("ml")
    assert "loop-a" in order  # a cycle does not hang
