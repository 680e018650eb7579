"""`costs:`: what an hour of a core, a GiB of memory and a GPU costs, so the ledger can price every run
(watchdog.state.prices applies them; docs/cost.md says what the numbers mean).

Why prices per node (pools and GPU models) and not one price per resource: a core on a spot pool and a
core on an on-demand pool are not worth the same, nor is an A100 hour and a T4 hour. A run is priced by
the node its pods ran on: `node_pools` (the first whose `node_selector` matches the Node's labels)
replace the base prices they name, then `gpu_models` (the Node label `nvidia.com/gpu.product` that GPU
feature discovery sets) replace the price of a GPU on nodes of that model.

A GPU price is per physical GPU-hour (a card), whatever the device plugin: a pod holding a quarter of a
shared card (HAMi, Volcano vGPU; `core.gpushare`) pays a quarter of it, four such pods one card. Pods of
Volcano's vGPU (`volcano.sh/vgpu-number`, no `*/gpu` resource) pay `nvidia.com/gpu`'s price.

`budgets`: a queue (its children included) may spend `amount` per week (from Monday 00:00 UTC) or
month (from the 1st, 00:00 UTC) on the requested basis; BudgetForecast fires when the period's rate so
far would pass it before the period ends, BudgetExceeded when it has (watchdog.findings.detectors.budget).

Every price is per hour and must be a finite number >= 0: a negative or non-numeric price, an unknown
resource name or an unknown key is one line naming the key, and the CLI exits 2.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from volcano_monitor.core.settings import Section

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_CURRENCY = re.compile(r"^[A-Za-z]{3}$")


def _not_a_bool(value: Any) -> Any:
    """YAML reads `yes`/`true` as a boolean, which pydantic would take as the price 1.0."""
    if isinstance(value, bool):
        raise ValueError(f"a price must be a number, not {str(value).lower()}")
    return value


Price = Annotated[float, BeforeValidator(_not_a_bool)]


def check_prices(prices: dict[str, float]) -> dict[str, float]:
    """Prices per hour by resource: `cpu` (per core), `memory` (per GiB) or a GPU resource (`*/gpu`, per
    GPU). Anything else is refused: the ledger accounts only these, a price of another resource would be
    silently ignored."""
    for name, price in prices.items():
        if name not in ("cpu", "memory") and not (name.endswith("/gpu") and len(name) > 4):
            raise ValueError(f"{name!r} is not a priced resource: use cpu (per core-hour), memory (per GiB-hour) "
                             "or a GPU resource such as nvidia.com/gpu (per GPU-hour)")
        if not math.isfinite(price) or price < 0:
            raise ValueError(f"the price of {name} must be a finite number >= 0 per hour (got {price!r})")
    return prices


def check_price(price: float, what: str) -> float:
    if not math.isfinite(price) or price < 0:
        raise ValueError(f"the price of {what} must be a finite number >= 0 per hour (got {price!r})")
    return price


class NodePool(Section):
    """Prices of the nodes whose labels carry every `node_selector` pair."""

    node_selector: dict[str, str] = Field(description="Node labels (all must match), e.g. "
                                                      "{cloud.google.com/gke-spot: \"true\"}.")
    prices: dict[str, Price] = Field(description="Per-hour prices on these nodes (the resources not named keep "
                                                 "the base price).")

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("an empty node_selector would match every node: name at least one label")
        return value

    @field_validator("prices")
    @classmethod
    def _prices(cls, value: dict[str, Price]) -> dict[str, Price]:
        return check_prices(value)


class Budget(Section):
    """What a queue and its children may spend per period (requested basis)."""

    queue: str = Field(min_length=1, description="The queue (its children count in it).")
    period: Literal["week", "month"] = Field(description="week (from Monday 00:00 UTC) or month (from the 1st).")
    amount: Price = Field(description="The most the queue may spend in one period, in `costs.currency`.")
    forecast_after_seconds: float = Field(
        default=3600.0, ge=0,
        description="BudgetForecast extrapolates only once its rate has run this long: from the period's start, or "
                    "from the queue's first run in the period if later (an early burst is no rate).")

    @field_validator("amount")
    @classmethod
    def _amount(cls, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"a budget must be a finite number > 0 (got {value!r})")
        return value


class Costs(Section):
    currency: str = Field(default="USD", description="ISO 4217 code the prices are in (reports, /metrics, FOCUS).")
    prices: dict[str, Price] = Field(
        default_factory=dict,
        description="Per hour: `cpu` per core, `memory` per GiB, a GPU resource (`nvidia.com/gpu`, `amd.com/gpu`) "
                    "per physical GPU (a pod holding a quarter of a shared card pays a quarter). Empty: every run "
                    "costs 0 (the ledger still keeps its hours).")
    gpu_models: dict[str, Price] = Field(
        default_factory=dict,
        description="Per-GPU-hour price by the Node label nvidia.com/gpu.product (e.g. NVIDIA-A100-SXM4-80GB: 4.1); "
                    "wins over prices and node_pools for GPUs on such nodes.")
    node_pools: list[NodePool] = Field(
        default_factory=list,
        description="Node pools: [{node_selector: {label: value}, prices: {...}}]; the first whose selector "
                    "matches a node's labels replaces the prices it names there.")

    budgets: list[Budget] = Field(
        default_factory=list,
        description="[{queue, period: week or month, amount}]: BudgetForecast and BudgetExceeded per queue and period.")

    @field_validator("budgets")
    @classmethod
    def _one_budget_per_queue_and_period(cls, value: list[Budget]) -> list[Budget]:
        seen = [(b.queue, b.period) for b in value]
        for queue, period in seen:
            if seen.count((queue, period)) > 1:
                raise ValueError(f"queue {queue!r} has two {period}ly budgets")
        return value

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str) -> str:
        if not _CURRENCY.match(value):
            raise ValueError("must be a three-letter ISO 4217 code such as USD or EUR")
        return value.upper()

    @field_validator("prices")
    @classmethod
    def _prices(cls, value: dict[str, Price]) -> dict[str, Price]:
        return check_prices(value)

    @field_validator("gpu_models")
    @classmethod
    def _models(cls, value: dict[str, Price]) -> dict[str, Price]:
        for model, price in value.items():
            check_price(price, f"a GPU of model {model}")
        return value
