"""Cost on the web UI: the job page's one line and the queue page's week and month (docs/cost.md). Apart from
`pages.py` so that module stays one page of routes.

Nothing is computed here that the rest does not compute the same way: a run's cost is the API's `job_cost`
(the report's `run_cost`), a queue's period is the budget detector's `period_bounds` and its cost
`queue_period_costs` (what the budget counts as spent is its requested basis), so the page, the report, the
API and the budget alerts agree. Without prices (`costs:` sets none) nothing is shown: zeros would read as
free runs.
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from sqlalchemy.orm import Session

from volcano_monitor.watchdog.findings.detectors.budget import period_bounds
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.models import JobRun
from volcano_monitor.watchdog.state.prices import is_priced, queue_period_costs
from volcano_monitor.watchdog.views.schema import job_cost
from volcano_monitor.watchdog.views.ui.html import esc, table, when

MEANING = "https://github.com/volcano-monitor/volcano-monitor/blob/main/docs/cost.md#the-three-bases"


def money(value: float) -> str:
    """Two decimals and thousands separators: 1,234.50."""
    return esc(f"{value:,.2f}")


def meaning() -> str:
    return f'<a href="{esc(MEANING)}">what these mean</a>'


def job_cost_line(run: JobRun, costs: Costs) -> str:
    """"Cost: 1.23 USD held, 0.40 used, 0.83 idle (what these mean)"; empty without prices."""
    cost = job_cost(run, costs)
    if cost is None:
        return ""
    return (f'<p class="cost">Cost: {money(cost.requested)} {esc(cost.currency)} held, {money(cost.used)} used, '
            f"{money(cost.idle)} idle ({meaning()})</p>")


def queue_cost_section(session: Session, costs: Costs, queue: str, now: datetime,
                       namespaces: Set[str] | None = None) -> str:
    """The queue's cost (children included) this week and this month, and its budgets with what they count as
    spent; empty when there are neither prices nor a budget of the queue. `namespaces`: a reader's scope
    (auth.mode kubernetes): only their runs, and no budget (it counts every team's spending)."""
    budgets = [b for b in costs.budgets if b.queue == queue and namespaces is None]
    if not is_priced(costs) and not budgets:
        return ""
    currency = esc(costs.currency)
    rows, spent = [], {}
    for period in ("week", "month"):
        start, _ = period_bounds(period, now)
        requested, used, idle = queue_period_costs(session, costs, queue, start, now, namespaces)
        spent[period] = requested
        rows.append([f"this {period}", when(start), money(requested), money(used), money(idle)])
    body = (f"<h2>Cost</h2><p>{esc(queue)} and the queues under it, in {currency} ({meaning()}); runs that "
            "ended in the period with all their cost, running ones with their cost so far"
            + (", of your namespaces only" if namespaces is not None else "") + ".</p>"
            + table(("period", "since", "requested (held)", "used", "idle"), rows, frozenset({2, 3, 4})))
    for budget in budgets:
        share = spent[budget.period] / budget.amount
        body += (f'<p class="budget">Budget: {money(budget.amount)} {currency} a {esc(budget.period)}; spent '
                 f"{money(spent[budget.period])} ({share * 100:.0f}%)"
                 + (' <span class="critical">exceeded</span>' if share >= 1 else "") + "</p>")
    return body
