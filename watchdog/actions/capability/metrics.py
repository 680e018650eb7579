"""The capability families of the watchdog's /metrics, rendered from the controller's memory (no
database read): the target per queue and resource, and the plans counted by outcome.

Resources are labelled as the exporter labels them (`nvidia.com/gpu` -> `nvidia_com_gpu`, unit `core`,
`byte` or `integer`), so a target joins with `volcano_queue_spec_capability` on (queue, resource, unit).
"""

from __future__ import annotations

from typing import Protocol

from volcano_monitor.core.exposition import COUNTER, Family
from volcano_monitor.core.model import res_from

CAPABILITY_TARGET = Family("volcano_watchdog_queue_capability_target",
                           "Capability the queue's policy plans, per resource (unit: cores, bytes or devices).",
                           ("queue", "resource", "unit"))
CAPABILITY_UPDATES = Family("volcano_watchdog_queue_capability_updates_total",
                            "Capability plans by outcome: applied, dry_run, unchanged, held (guardrail), conflict "
                            "(409, retried), failed.", ("queue", "outcome"), COUNTER)


class CapabilityCounters(Protocol):
    def targets(self) -> dict[str, dict[str, float]]: ...

    def update_counts(self) -> dict[tuple[str, str], int]: ...


def render_capability_metrics(controller: CapabilityCounters) -> str:
    targets = controller.targets()
    target_lines = [CAPABILITY_TARGET.resource_lines((queue,), res_from(targets[queue], share=False), cache=False)
                    for queue in sorted(targets)]  # targets follow demand: uncached, as queues' allocations
    counts = controller.update_counts()
    update_lines = [CAPABILITY_UPDATES.line(key, value) for key, value in sorted(counts.items())]
    return CAPABILITY_TARGET.header + "".join(target_lines) + CAPABILITY_UPDATES.header + "".join(update_lines)
