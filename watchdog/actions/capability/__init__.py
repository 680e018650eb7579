"""Queue capability kept up to date by policy (DESIGN §5, docs/capability.md): `share` of the matching
nodes' allocatable, or `demand` from usage history, moved within guardrails, applied by the leader only,
and recorded (database, Kubernetes Event, chat notice through `announce`)."""

from volcano_monitor.watchdog.actions.capability.settings import (
    CapabilitySettings,
    DemandPolicy,
    QueuePolicy,
    SharePolicy,
)

__all__ = ["CapabilitySettings", "DemandPolicy", "QueuePolicy", "SharePolicy"]
