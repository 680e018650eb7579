"""The cluster's HyperNodes (`topology.volcano.sh`, Volcano v1.12+), for the fragmentation view
(`watchdog.findings.topology`): written straight from their informer's thread, read at scrape and `/why`
time, behind a lock.

Why a table of its own, like `state.nodes.NodeTable`: nothing about a HyperNode is stored, only the latest
spec of each feeds a computation, so the writer's queue and the observer stay out of it. On a cluster without
the CRD (before v1.12) the informer stays idle and the table empty: no HyperNode series, no topology verdict.
"""

from __future__ import annotations

import threading

from volcano_monitor.core.kube.informer import DELETED
from volcano_monitor.core.topology import HyperNodeSpec

__all__ = ["HyperNodeTable"]


class HyperNodeTable:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._specs: dict[str, HyperNodeSpec] = {}
        self.version = 0  # bumped by every change: readers cache what they derive from the specs by it
        self.skipped = 0  # events without a name

    def on_hypernode(self, event_type: str, spec: HyperNodeSpec) -> None:
        """Informer handler (the HyperNode informer's thread)."""
        with self.lock:
            if not spec.name:
                self.skipped += 1
                return
            if event_type == DELETED:
                self._specs.pop(spec.name, None)
            else:
                self._specs[spec.name] = spec
            self.version += 1

    def specs(self) -> tuple[int, list[HyperNodeSpec]]:
        """The version and the HyperNodes, by name."""
        with self.lock:
            return self.version, [self._specs[name] for name in sorted(self._specs)]
