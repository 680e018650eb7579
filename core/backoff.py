"""Retry pacing shared by the informers, the watchdog's writer and its senders."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Exponential backoff with equal jitter: half fixed, half random, capped."""

    def __init__(self, base: float = 0.5, cap: float = 30.0) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * (2 ** min(self.failures, 30)))
        self.failures += 1
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))

    def reset(self) -> None:
        self.failures = 0
