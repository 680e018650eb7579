"""The Kubernetes resource kinds volcano-monitor reads, and their API paths."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResourceKind:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    # Served only by some Volcano releases: while its CRD is not installed (404) the informer stays idle,
    # says so in `volcano_exporter_resource_served`, and does not hold back readiness.
    optional: bool = False

    @property
    def name(self) -> str:
        """`plural.group`, as RBAC and kubectl spell it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


PODS = ResourceKind("", "v1", "pods", "Pod", True)
NODES = ResourceKind("", "v1", "nodes", "Node", False)
# Nodes as the exporter reads them (topology_fragmented, only once a HyperNode exists): an older RBAC lacks them.
OPTIONAL_NODES = ResourceKind("", "v1", "nodes", "Node", False, optional=True)
EVENTS = ResourceKind("", "v1", "events", "Event", True)
JOBS = ResourceKind("batch.volcano.sh", "v1alpha1", "jobs", "Job", True)
PODGROUPS = ResourceKind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
QUEUES = ResourceKind("scheduling.volcano.sh", "v1beta1", "queues", "Queue", False)
POD_METRICS = ResourceKind("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True)
LEASES = ResourceKind("coordination.k8s.io", "v1", "leases", "Lease", True)
# The values behind `priorityClassName`, by which Volcano orders a queue's jobs (core/queueorder.py).
# Optional: without them (not granted, or an API server that lacks them) every job ranks as priority 0.
PRIORITYCLASSES = ResourceKind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False,
                               optional=True)
# Kinds later Volcano releases added (../shared/volcano/crds-by-release): JobFlow in every release from
# v1.9 (installed with the optional jobflow chart), HyperNode from v1.12, CronJob from v1.13.
JOBFLOWS = ResourceKind("flow.volcano.sh", "v1alpha1", "jobflows", "JobFlow", True, optional=True)
HYPERNODES = ResourceKind("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False, optional=True)
CRONJOBS = ResourceKind("batch.volcano.sh", "v1alpha1", "cronjobs", "CronJob", True, optional=True)
