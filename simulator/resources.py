"""The resource types the simulated API server serves, with what discovery needs to say about them.

kubectl resolves `vcjob`, `pg`, `q` through the short names listed here, and decides whether
`-A` makes sense through `namespaced`; keep these aligned with the CRDs in ../shared/volcano/crds.
"""

from __future__ import annotations

from dataclasses import dataclass

READ_WRITE_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    has_status: bool = False  # a status subresource: the main resource then ignores status writes
    verbs: tuple[str, ...] = READ_WRITE_VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        return (self.group, self.version)


NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, "namespace", ("ns",), True)
NODES = ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), True)
PODS = ResourceType("", "v1", "pods", "Pod", True, "pod", ("po",), True)
EVENTS = ResourceType("", "v1", "events", "Event", True, "event", ("ev",))
JOBS = ResourceType("batch.volcano.sh", "v1alpha1", "jobs", "Job", True, "job", ("vcjob", "vj"), True)
# PodGroup has no status subresource in Volcano's CRD: status is written through the object itself.
PODGROUPS = ResourceType(
    "scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True, "podgroup", ("pg", "podgroup-v1beta1")
)
QUEUES = ResourceType(
    "scheduling.volcano.sh", "v1beta1", "queues", "Queue", False, "queue", ("q", "queue-v1beta1"), True
)
POD_METRICS = ResourceType(
    "metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, "", (), False, ("get", "list", "watch")
)
NODE_METRICS = ResourceType(
    "metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, "", (), False, ("get", "list", "watch")
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease")
# Volcano's bus: a Command asks the job controller for an action on a Job (AbortJob, ...); every
# release ships it (crds-by-release/*/bus.volcano.sh_commands.yaml). No status: the controller deletes it.
COMMANDS = ResourceType("bus.volcano.sh", "v1alpha1", "commands", "Command", True, "command")
# Kinds only some Volcano releases serve (simulator.releases decides): JobFlow (v1.9+, with its chart),
# HyperNode (v1.12+), CronJob (v1.13+). All three have a status subresource.
JOBFLOWS = ResourceType("flow.volcano.sh", "v1alpha1", "jobflows", "JobFlow", True, "jobflow", ("jf",), True)
HYPERNODES = ResourceType("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False, "hypernode", ("hn",),
                          True)
CRONJOBS = ResourceType("batch.volcano.sh", "v1alpha1", "cronjobs", "CronJob", True, "cronjob",
                        ("cronvcjob", "cronvj"), True)

# Cluster-scoped, read by the exporter and the watchdog for Volcano's job order (core.queueorder).
PRIORITY_CLASSES = ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, "priorityclass",
                                ("pc",))

# What the simulator serves unless told a Volcano release (`--volcano-release`).
BASE_TYPES: tuple[ResourceType, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    JOBS,
    PODGROUPS,
    QUEUES,
    POD_METRICS,
    NODE_METRICS,
    LEASES,
    COMMANDS,
    PRIORITY_CLASSES,
)
RELEASE_TYPES: tuple[ResourceType, ...] = (JOBFLOWS, HYPERNODES, CRONJOBS)
ALL_TYPES: tuple[ResourceType, ...] = BASE_TYPES + RELEASE_TYPES

GROUP_PREFERRED_VERSION = {rt.group: rt.version for rt in ALL_TYPES}


def find_type(group: str, version: str, plural: str) -> ResourceType | None:
    for rt in ALL_TYPES:
        if rt.group == group and rt.version == version and rt.plural == plural:
            return rt
    return None
