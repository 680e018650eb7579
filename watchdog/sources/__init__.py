"""Usage collection: collectors turn a source (metrics API, Prometheus) into `UsageSample`s, the
recorder attributes them to jobs and keeps rollups, histograms and ledger integrals."""

from volcano_monitor.watchdog.state.samples import PodInfo, PodLookup, UsageSample

__all__ = ["PodInfo", "PodLookup", "UsageSample"]
