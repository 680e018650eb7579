"""OOM auto scale-up (docs/watchdog.md): when a Volcano Job ends Failed or Aborted because its pods
were OOM-killed, the leader resubmits it as `<name>-oom<N>` with more memory for the killed
containers, up to `max_attempts` per lineage, and records every decision (database, Event on the
Job, one chat notice, `volcano_watchdog_oom_resubmissions_total`)."""

from volcano_monitor.watchdog.actions.oomscale.settings import OomScaleUpSettings

__all__ = ["OomScaleUpSettings"]
