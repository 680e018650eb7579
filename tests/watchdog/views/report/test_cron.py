"""The cron parser against a brute force: every minute of a span checked field by field, the way
crontab(5) states the rules, must agree with `previous`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from volcano_monitor.core.cron import parse_cron


def brute_matches(spec: str, at: datetime) -> bool:
    """crontab(5) read literally, with sets built here from the text by hand-written expansions."""
    minute, hour, dom, month, dow = spec.split()
    expansions = {
        "*": None, "0": {0}, "30": {30}, "*/15": {0, 15, 30, 45}, "9": {9}, "8-17/3": {8, 11, 14, 17},
        "1,15": {1, 15}, "mon": {1}, "mon-fri": {1, 2, 3, 4, 5}, "7": {0}, "feb": {2}, "29": {29}, "1": {1},
    }

    def ok(text: str, value: int) -> bool:
        allowed = expansions[text]
        return allowed is None or value in allowed

    weekday = at.isoweekday() % 7
    both_restricted = dom != "*" and dow != "*"
    day_ok = (ok(dom, at.day) or ok(dow, weekday)) if both_restricted else (ok(dom, at.day) and ok(dow, weekday))
    return ok(minute, at.minute) and ok(hour, at.hour) and ok(month, at.month) and day_ok


@pytest.mark.parametrize("spec", ["0 9 * * mon", "*/15 8-17/3 * * mon-fri", "30 0 1,15 * 7", "0 0 1 * mon",
                                  "0 9 * * *", "* * * * *"])
def test_previous_agrees_with_brute_force(spec: str) -> None:
    cron = parse_cron(spec)
    start = datetime(2027, 2, 20, 0, 0, tzinfo=UTC)
    for probe in (start + timedelta(minutes=m) for m in range(0, 60 * 24 * 12, 397)):
        at = probe
        while not brute_matches(spec, at):
            at -= timedelta(minutes=1)
            if probe - at > timedelta(days=366 * 5):
                raise AssertionError(f"{spec} never fires before {probe}")
        assert cron.previous(probe + timedelta(seconds=42)) == at, (spec, probe)


def test_29_february_looks_back_years() -> None:
    assert parse_cron("0 0 29 feb *").previous(datetime(2027, 3, 1, tzinfo=UTC)) == datetime(2024, 2, 29, tzinfo=UTC)


def test_a_date_that_never_exists() -> None:
    assert parse_cron("0 0 30 feb *").previous(datetime(2027, 3, 1, tzinfo=UTC)) is None


@pytest.mark.parametrize(("spec", "message"), [
    ("0 9 * *", "5 fields"), ("60 * * * *", "minute: 60 is outside 0-59"), ("* 24 * * *", "hour"),
    ("* * 0 * *", "day of month"), ("* * * 13 *", "month"), ("* * * * 8", "day of week"),
    ("*/0 * * * *", "bad step"), ("5-1 * * * *", "backwards"), ("x * * * *", "not a number"),
    ("* * * * funday", "not a number"),
])
def test_bad_schedules_name_the_field(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cron(spec)
