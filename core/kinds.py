"""Slim typed views of the kinds later Volcano releases added, and of the PodGroup fields they added.

Which release has what (../shared/volcano/crds-by-release): `flow.volcano.sh` JobFlow is in every
release from v1.9; `topology.volcano.sh` HyperNode from v1.12 (`spec.tierName` from v1.14);
`batch.volcano.sh` CronJob from v1.13. PodGroup `spec.networkTopology` appears in v1.12
(`highestTierName` in v1.14) and `spec.subGroupPolicy` in v1.14. Every field read here is optional:
an object of an older release simply lacks it, and the view says "absent" (empty string, None, ()).

The parsers follow :mod:`core.model`'s rule: they never raise, a field of the wrong type is
replaced by its default and reported in ``problems``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_monitor.core.fields import (
    arr,
    boolean,
    integer,
    intern,
    istring,
    item_obj,
    obj,
    opt_integer,
    read_meta,
    root,
    string,
    timestamp,
)

# ---------------------------------------------------------------------------------- PodGroup extras


@dataclass(slots=True, frozen=True)
class NetworkTopology:
    """`spec.networkTopology`: how far (in HyperNode tiers) the gang may spread."""

    mode: str  # hard | soft ("hard" is the CRD's default, filled in by the API server)
    highest_tier_allowed: int | None
    highest_tier_name: str


@dataclass(slots=True, frozen=True)
class SubGroup:
    """One `spec.subGroupPolicy[]` entry: pods grouped by label, placed together."""

    name: str
    size: int | None
    min_subgroups: int | None
    network_topology: NetworkTopology | None


def _topology(d: Mapping[str, Any], path: str, probs: list[str]) -> NetworkTopology | None:
    if d.get("networkTopology") is None:
        return None
    t = obj(d, "networkTopology", path, probs)
    if not t and d.get("networkTopology") != {}:
        return None  # wrong type, already reported
    p = path + "networkTopology."
    return NetworkTopology(istring(t, "mode", p, probs, "hard") or "hard",
                           opt_integer(t, "highestTierAllowed", p, probs), istring(t, "highestTierName", p, probs))


def parse_podgroup_topology(spec: Mapping[str, Any], probs: list[str]) -> tuple[NetworkTopology | None,
                                                                                 tuple[SubGroup, ...]]:
    """The network topology and sub-group policy of a PodGroup spec (v1.12+ / v1.14+; absent before)."""
    subgroups = []
    for i, raw in enumerate(arr(spec, "subGroupPolicy", "spec.", probs)):
        path = f"spec.subGroupPolicy[{i}]"
        s = item_obj(raw, path, probs)
        p = path + "."
        subgroups.append(SubGroup(istring(s, "name", p, probs), opt_integer(s, "subGroupSize", p, probs),
                                  opt_integer(s, "minSubGroups", p, probs), _topology(s, p, probs)))
    return _topology(spec, "spec.", probs), tuple(subgroups)


# The reasons Volcano's scheduler and controllers write into PodGroup conditions
# (pkg/apis/scheduling: NotEnoughResourcesReason, NotEnoughPodsReason, NotEnoughPodsOfTaskReason,
# PodFailedReason, PodDeletedReason). Anything else counts as "Other", so the label stays bounded.
CONDITION_REASONS = ("NotEnoughResources", "NotEnoughTasks", "NotEnoughPodsOfTask", "PodFailed", "PodDeleted")
OTHER_REASON = "Other"


def condition_reason(reason: str) -> str:
    return reason if reason in CONDITION_REASONS else OTHER_REASON


# ------------------------------------------------------------------------------------------ CronJob


@dataclass(slots=True, frozen=True)
class CronJob:
    namespace: str
    name: str
    uid: str
    schedule: str
    time_zone: str
    concurrency_policy: str
    suspend: bool
    active: tuple[str, ...]  # names of the Jobs it runs now
    last_schedule_time: float | None
    last_successful_time: float | None
    problems: tuple[str, ...] = ()


def parse_cronjob(raw: object) -> CronJob:
    """A ``batch.volcano.sh/v1alpha1`` CronJob (v1.13+)."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    status = obj(d, "status", "", probs)
    active = []
    for i, ref in enumerate(arr(status, "active", "status.", probs)):
        name = string(item_obj(ref, f"status.active[{i}]", probs), "name", f"status.active[{i}].", probs)
        if name:
            active.append(name)
    return CronJob(
        namespace=meta[0], name=meta[1], uid=meta[2],
        schedule=string(spec, "schedule", "spec.", probs),
        time_zone=istring(spec, "timeZone", "spec.", probs),
        concurrency_policy=istring(spec, "concurrencyPolicy", "spec.", probs, "Allow") or "Allow",
        suspend=boolean(spec, "suspend", "spec.", probs) or False,
        active=tuple(active),
        last_schedule_time=timestamp(status, "lastScheduleTime", "status.", probs),
        last_successful_time=timestamp(status, "lastSuccessfulTime", "status.", probs),
        problems=tuple(probs),
    )


# ---------------------------------------------------------------------------------------- HyperNode


@dataclass(slots=True, frozen=True)
class HyperNode:
    namespace: str  # always "": cluster-scoped
    name: str
    uid: str
    tier: int
    tier_name: str  # v1.14+
    members: tuple[tuple[str, int], ...]  # (member type: Node | HyperNode, how many)
    node_count: int | None
    problems: tuple[str, ...] = ()


def parse_hypernode(raw: object) -> HyperNode:
    """A cluster-scoped ``topology.volcano.sh/v1alpha1`` HyperNode (v1.12+)."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    status = obj(d, "status", "", probs)
    members: dict[str, int] = {}
    for i, raw_member in enumerate(arr(spec, "members", "spec.", probs)):
        path = f"spec.members[{i}]"
        kind = istring(item_obj(raw_member, path, probs), "type", path + ".", probs) or "Node"
        members[kind] = members.get(kind, 0) + 1
    return HyperNode(
        namespace="", name=meta[1], uid=meta[2],
        tier=integer(spec, "tier", "spec.", probs),
        tier_name=istring(spec, "tierName", "spec.", probs),
        members=tuple(sorted(members.items())),
        node_count=opt_integer(status, "nodeCount", "status.", probs),
        problems=tuple(probs),
    )


# ------------------------------------------------------------------------------------------ JobFlow

# status list field -> the state label `volcano_jobflow_status_jobs` gives it (the CRD spells one "unKnow").
JOBFLOW_LISTS = (("pendingJobs", "pending"), ("runningJobs", "running"), ("completedJobs", "completed"),
                 ("failedJobs", "failed"), ("terminatedJobs", "terminated"), ("unKnowJobs", "unknown"))


@dataclass(slots=True, frozen=True)
class FlowJob:
    name: str
    state: str
    restarts: int


@dataclass(slots=True, frozen=True)
class JobFlow:
    namespace: str
    name: str
    uid: str
    flows: int  # steps in spec.flows
    phase: str  # Succeed, Terminating, Failed, Running, Pending
    jobs: tuple[tuple[str, int], ...]  # (state label, how many), from the status lists
    job_status: tuple[FlowJob, ...]  # status.jobStatusList
    problems: tuple[str, ...] = ()


def parse_jobflow(raw: object) -> JobFlow:
    """A ``flow.volcano.sh/v1alpha1`` JobFlow (every release from v1.9)."""
    probs: list[str] = []
    d = root(raw, probs)
    meta, _ = read_meta(d, probs)
    spec = obj(d, "spec", "", probs)
    status = obj(d, "status", "", probs)
    counts = tuple((label, len(arr(status, key, "status.", probs))) for key, label in JOBFLOW_LISTS)
    jobs = []
    for i, raw_job in enumerate(arr(status, "jobStatusList", "status.", probs)):
        path = f"status.jobStatusList[{i}]"
        j = item_obj(raw_job, path, probs)
        p = path + "."
        name = string(j, "name", p, probs)
        if name:
            jobs.append(FlowJob(name, istring(j, "state", p, probs), integer(j, "restartCount", p, probs)))
    return JobFlow(
        namespace=meta[0], name=meta[1], uid=meta[2],
        flows=len(arr(spec, "flows", "spec.", probs)),
        phase=intern(istring(obj(status, "state", "status.", probs), "phase", "status.state.", probs)),
        jobs=counts,
        job_status=tuple(jobs),
        problems=tuple(probs),
    )
