"""Detectors (DESIGN §5): event-driven ones take informer events and return `Signal`s at once;
periodic ones keep a little state from events (or read the database) and report, each round, every
condition that holds. `watchdog.state.alerts.AlertBook` turns signals into stored alert episodes.

Detectors are not thread-safe: feed them and call `check()` from one thread (events from the
informers' threads are handed to that thread), as with every database write."""

from volcano_monitor.watchdog.findings.detectors.failure import FailureDetector
from volcano_monitor.watchdog.findings.detectors.gang import GangDetector
from volcano_monitor.watchdog.findings.detectors.queue import QueueDetector
from volcano_monitor.watchdog.findings.detectors.waste import WasteDetector
from volcano_monitor.watchdog.state.signals import ONCE_PER_RUN_KINDS, Signal, fingerprint

__all__ = ["ONCE_PER_RUN_KINDS", "FailureDetector", "GangDetector", "QueueDetector", "Signal", "WasteDetector",
           "fingerprint"]
