"""A small 5-field cron schedule (minute hour day-of-month month day-of-week), in UTC.

Why not a dependency: digests need one question answered, "when was the schedule last due", and no
cron library is among the watchdog's dependencies. Fields take `*`, numbers, ranges `a-b`, steps
`*/n` and `a-b/n`, lists `a,b`, and three-letter month and day names. As in Vixie cron, when both
day-of-month and day-of-week are restricted a day matches either; 7 is Sunday as well as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_MONTHS = {name: i + 1 for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (name, lowest, highest, names) per field
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS))
# Longest look back: every schedule fires within 4 years (29 February on a given weekday: 28).
_MAX_DAYS = 366 * 28


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day-of-month is `*`
    any_weekday: bool  # day-of-week is `*`

    def day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month, in_week = day.day in self.days, (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def previous(self, now: datetime) -> datetime | None:
        """The latest time at or before `now` (UTC, to the minute) the schedule was due; None if never
        within 28 years (a date that does not exist, like 30 February)."""
        now = now.astimezone(UTC).replace(second=0, microsecond=0)
        day = now.replace(hour=0, minute=0)
        for back in range(_MAX_DAYS):
            candidate = day - timedelta(days=back)
            if not self.day_matches(candidate):
                continue
            for hour in sorted(self.hours, reverse=True):
                for minute in sorted(self.minutes, reverse=True):
                    at = candidate.replace(hour=hour, minute=minute)
                    if at <= now:
                        return at
        return None


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"{name}: bad step {step_text!r}")
            step = int(step_text)
        if body == "*":
            start, end = low, high
        else:
            first, dash, last = body.partition("-")
            start = _number(first, name, low, high, names)
            end = _number(last, name, low, high, names) if dash else (high if step_text else start)
            if end < start:
                raise ValueError(f"{name}: range {body!r} runs backwards")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _number(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    value = names.get(text.lower()) if names else None
    if value is None:
        if not text.isdigit():
            raise ValueError(f"{name}: not a number: {text!r}")
        value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{name}: {value} is outside {low}-{high}")
    return value


def parse_cron(text: str) -> Cron:
    """A Cron from `m h dom mon dow`; ValueError naming the field otherwise."""
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"a cron schedule has 5 fields (minute hour day-of-month month day-of-week): {text!r}")
    sets = [_field(part, *spec) for part, spec in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    return Cron(text=text, minutes=sets[0], hours=sets[1], days=sets[2], months=sets[3], weekdays=weekdays,
                any_day=parts[2] == "*", any_weekday=parts[4] == "*")
