"""BudgetForecast and BudgetExceeded (periodic, per queue and period): a queue's spending against the budget
`costs.budgets` gives it per week or month.

Spent: the requested-basis cost of the queue and its children in the period so far, counted as the
report counts it (`watchdog.state.prices.queue_period_cost`: runs that ended in the period, and the cost so
far of those still running). BudgetExceeded holds while spent >= budget. BudgetForecast holds while the
period's rate so far (spent / elapsed) would pass the budget before the period ends, the budget is not yet
spent, and at least `forecast_after_seconds` of the period have gone (one early burst is no rate).

Each period is an episode of its own (the fingerprint names the period's start): a new week starts with
no alert, and the last week's resolves at the first check of the new one. Computed from the database
only, so any leader says the same.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.cost_settings import Budget, Costs
from volcano_monitor.watchdog.state.prices import queue_period_cost, queue_period_first_start
from volcano_monitor.watchdog.state.signals import BUDGET_EXCEEDED, BUDGET_FORECAST, Signal, fingerprint

__all__ = ["BudgetDetector", "period_bounds"]


def period_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the week (Monday 00:00 UTC) or month (the 1st, 00:00 UTC) holding `now`."""
    now = now.astimezone(UTC)
    if period == "week":
        start = (now - timedelta(days=now.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=7)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end


class BudgetDetector:
    KINDS = frozenset({BUDGET_FORECAST, BUDGET_EXCEEDED})

    def __init__(self, costs: Costs) -> None:
        self.costs = costs

    def check(self, session: Session, now: datetime) -> list[Signal]:
        signals: list[Signal] = []
        for budget in self.costs.budgets:
            signals += self._judge(budget, session, now)
        return signals

    def _judge(self, budget: Budget, session: Session, now: datetime) -> list[Signal]:
        start, end = period_bounds(budget.period, now)
        spent = queue_period_cost(session, self.costs, budget.queue, start, now)
        first = queue_period_first_start(session, budget.queue, start, now)
        origin = max(start, first) if first is not None else start
        elapsed = (now - origin).total_seconds()  # how long the rate has run
        projected = spent * (end - origin).total_seconds() / elapsed if elapsed > 0 else spent
        currency = self.costs.currency
        details = {"queue": budget.queue, "period": budget.period, "period_start": start.isoformat(),
                   "period_end": end.isoformat(), "budget": budget.amount, "spent": round(spent, 4),
                   "projected": round(projected, 4), "rate_since": origin.isoformat(), "currency": currency}
        parts = (budget.queue, budget.period, start.isoformat())
        exceeded = spent >= budget.amount
        forecast = not exceeded and elapsed >= budget.forecast_after_seconds and projected > budget.amount
        what = f"queue {budget.queue}'s {budget.period}ly budget of {budget.amount:g} {currency}"
        out = [Signal(BUDGET_EXCEEDED, fingerprint(BUDGET_EXCEEDED, *parts), exceeded, severity="critical",
                      queue=budget.queue, subject=budget.queue,
                      summary=f"{what} is spent: {spent:.2f} {currency} since {start:%Y-%m-%d}", details=details)]
        when = ""
        if forecast and spent > 0:
            passes = origin + timedelta(seconds=elapsed * budget.amount / spent)
            when = f", around {passes:%Y-%m-%d %H:%M} UTC"
            details["passes_at"] = passes.isoformat()
        out.append(Signal(BUDGET_FORECAST, fingerprint(BUDGET_FORECAST, *parts), forecast, queue=budget.queue,
                          subject=budget.queue,
                          summary=f"{what} will be passed at this rate: {spent:.2f} spent, {projected:.2f} "
                                  f"projected by {end:%Y-%m-%d}{when}", details=details))
        return out
