"""A waiting job's expected start (`findings.expected`, the last estimation round) in the words of an
alert: the fields GangUnschedulable and QueueStarved put into `details` and the clause they add to the
summary, so a chat message says when the job should start and what it waits for, or why it never will.

Times are rounded to the minute: a round runs every 30 s and a start "when there is room now" moves with
the clock, so unrounded values would rewrite the stored alert every round. Rounded, the alert row changes
at most once a minute (the alert book's own touch interval). Nothing here enters the fingerprint: the
estimate moving opens no new episode and, since the outbox queues a message only on a state change (firing,
resolved), sends no message of its own. The firing message shows the estimate of the round that fired it
(the alert's row is updated before the message is made); a repeat resends what the outbox stored then, while
the alert's page and the API show the latest.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from volcano_monitor.watchdog.findings.estimates import Estimate

__all__ = ["Expected", "expected_clause", "expected_details"]

# (namespace, job name) -> the last round's estimate, None before the first round or for a job the round did not
# see (e.g. partly placed). ExpectedStarts.get.
Expected = Callable[[str, str], Estimate | None]


def _minute(ts: float) -> datetime:
    return datetime.fromtimestamp(round(ts / 60.0) * 60.0, UTC)


def _iso(ts: float | None) -> str | None:
    return _minute(ts).isoformat().replace("+00:00", "Z") if ts is not None else None


def expected_details(est: Estimate) -> dict[str, Any]:
    """`expected_start`, `expected_start_low`, `expected_start_high` (RFC 3339, to the minute; null without an
    estimate), `waits_for` (the event it waits for, or why there is no estimate) and `no_estimate_reason`."""
    return {"expected_start": _iso(est.start), "expected_start_low": _iso(est.low),
            "expected_start_high": _iso(est.high), "waits_for": est.waits_for, "no_estimate_reason": est.reason}


def _clock(ts: float, now: float) -> str:
    """"14:20", with the date when it is not today's ("Dec 03 14:20")."""
    at = _minute(ts)
    return at.strftime("%H:%M") if at.date() == datetime.fromtimestamp(now, UTC).date() else at.strftime("%b %d %H:%M")


def expected_clause(est: Estimate, now: float) -> str:
    """"expected to start around 14:20 UTC (14:05-14:50), when research/llama-pretrain ends"; without an
    estimate "no expected start: queue narrow: capability of cpu below the request"."""
    if est.start is None:
        return f"no expected start: {est.waits_for or est.reason or 'unknown'}"
    text = f"expected to start around {_clock(est.start, now)} UTC"
    low, high = _clock(est.low if est.low is not None else est.start, now), \
        _clock(est.high if est.high is not None else est.start, now)
    if (low, high) != (_clock(est.start, now),) * 2:
        text += f" ({low}-{high})"
    if est.waits_for.startswith("when "):
        text += f", {est.waits_for}"
    elif est.waits_for:
        text += f" ({est.waits_for})"
    return text
