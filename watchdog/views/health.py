"""What the running watchdog tells its views about itself (readiness, collectors, leadership, queues as
the informer sees them): callables and plain records, so the API, the UI and /metrics read live state without
importing the runtime that owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class CollectorHealth:
    enabled: bool
    last_success: float | None  # epoch seconds of the last successful round
    errors: int
    samples: int
    interval_seconds: float | None = None  # when given, "up" also means "succeeded within 3 intervals"


@dataclass
class Health:
    ready: Callable[[], bool]
    collectors: Callable[[], dict[str, CollectorHealth]]
    leader: Callable[[], bool] = lambda: True
    # (receiver, outcome) -> deliveries since start; every configured receiver appears (zeros included)
    notifications: Callable[[], dict[tuple[str, str], int]] = dict
    extra_metrics: Callable[[], str] = str  # more families, already rendered (queue capability)


@dataclass
class QueueView:
    """A Queue as the app's informer knows it; amounts in base units keyed by resource name."""

    name: str
    parent: str
    capability: dict[str, float]
    allocated: dict[str, float]
    state: str
    deserved: dict[str, float] = field(default_factory=dict)  # for the UI's queue page
