"""The objects of the kinds later Volcano releases added, written only where the store serves the
kind (simulator.releases): HyperNodes describing the nodes' network topology (v1.12+), a CronJob
submitting a workload on a schedule (v1.13+) and a JobFlow (v1.9+, with its chart).

Each is a small stand-in for its Volcano controller: the HyperNode tree is the scenario's own
(`Scenario.hypernodes`) or one tier-1 HyperNode per zone under one tier-2 HyperNode; the CronJob's
status follows the runs the driver submits for it (`Workload.cron`: `active`, `lastScheduleTime`,
`lastSuccessfulTime`); the JobFlow is a three-step pipeline caught mid-run (its status is written once).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from volcano_monitor.simulator import objects as o
from volcano_monitor.simulator.resources import CRONJOBS, HYPERNODES, JOBFLOWS
from volcano_monitor.simulator.scenario import CRON_WORKLOADS
from volcano_monitor.simulator.specs import HyperNodeSpec
from volcano_monitor.simulator.state import JOB_API, RunSim, rfc3339

if TYPE_CHECKING:
    from volcano_monitor.simulator.controllers import Controllers

Obj = dict[str, Any]
TOPOLOGY_API = "topology.volcano.sh/v1alpha1"
FLOW_API = "flow.volcano.sh/v1alpha1"
SPINE = "spine"
JOBFLOW = ("ml-platform", "train-pipeline")


def hypernode_object(name: str, tier: int, tier_name: str, members: list[Obj], nodes: int, created: float) -> Obj:
    return {
        "apiVersion": TOPOLOGY_API, "kind": "HyperNode",
        "metadata": {"name": name, "creationTimestamp": rfc3339(created)},
        "spec": {"tier": tier, "tierName": tier_name, "members": members},
        "status": {"nodeCount": nodes},
    }


def hypernodes(nodes: dict[str, str], created: float) -> list[Obj]:
    """`nodes`: node name -> zone. One tier-1 HyperNode per zone (its nodes by exact name), one tier-2
    above them all, as the network-topology discovery of a two-level fabric would write them."""
    zones: dict[str, list[str]] = defaultdict(list)
    for node, zone in sorted(nodes.items()):
        zones[zone].append(node)
    out = [hypernode_object(f"rack-{zone}", 1, "rack", [{"type": "Node", "selector": {"exactMatch": {"name": n}}}
                                                         for n in members], len(members), created)
           for zone, members in sorted(zones.items())]
    racks = [{"type": "HyperNode", "selector": {"exactMatch": {"name": f"rack-{zone}"}}} for zone in sorted(zones)]
    out.append(hypernode_object(SPINE, 2, "spine", racks, len(nodes), created))
    return out


def hypernode_from_spec(spec: HyperNodeSpec, created: float) -> Obj:
    """A scenario's own HyperNode (specs.HyperNodeSpec): members by exact name; nodeCount its Node members."""
    members = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in spec.nodes]
    members += [{"type": "HyperNode", "selector": {"exactMatch": {"name": h}}} for h in spec.hypernodes]
    return hypernode_object(spec.name, spec.tier, spec.tier_name, members, len(spec.nodes), created)


def cronjob_object(run: RunSim, schedule: str, created: float) -> Obj:
    w = run.workload
    return {
        "apiVersion": JOB_API, "kind": "CronJob",
        "metadata": {"name": w.cron, "namespace": w.namespace, "creationTimestamp": rfc3339(created)},
        "spec": {"schedule": schedule, "concurrencyPolicy": "Forbid", "successfulJobsHistoryLimit": 3,
                 "failedJobsHistoryLimit": 1, "timeZone": "Etc/UTC",
                 "jobTemplate": {"spec": o.job_object(run)["spec"]}},
        "status": {},
    }


def jobflow_object(created: float) -> Obj:
    namespace, name = JOBFLOW
    start, step = rfc3339(created), rfc3339(created + 60)
    return {
        "apiVersion": FLOW_API, "kind": "JobFlow",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": start},
        "spec": {"jobRetainPolicy": "retain",
                 "flows": [{"name": "prep"}, {"name": "train", "dependsOn": {"targets": ["prep"]}},
                           {"name": "eval", "dependsOn": {"targets": ["train"]}}]},
        "status": {
            "state": {"phase": "Running"},
            "completedJobs": ["prep"], "runningJobs": ["train"], "pendingJobs": ["eval"],
            "jobStatusList": [
                {"name": "prep", "state": "Completed", "restartCount": 0, "startTimestamp": start,
                 "endTimestamp": step},
                {"name": "train", "state": "Running", "restartCount": 1, "startTimestamp": step},
            ],
        },
    }


def setup(driver: Controllers) -> None:
    """Write the objects of the served kinds and start the CronJob's schedule."""
    store, now = driver.store, driver.now
    if HYPERNODES in store.buckets:
        tree = driver.scenario.hypernodes
        objs = hypernodes({n.spec.name: n.spec.zone for n in driver.nodes.values()}, now) if tree is None else \
            [hypernode_from_spec(spec, now) for spec in tree]
        for obj in objs:
            store.upsert(HYPERNODES, obj)
    if not driver.scenario.extra_kinds:
        return
    if JOBFLOWS in store.buckets:
        store.upsert(JOBFLOWS, jobflow_object(now))
    if CRONJOBS in store.buckets:
        for workload in CRON_WORKLOADS:
            template = RunSim(workload, "template", created=now)
            store.upsert(CRONJOBS, cronjob_object(template, "*/10 * * * *", now))
            driver._after(workload.start_after, functools.partial(driver._submit, workload))


def refresh(driver: Controllers) -> None:
    """The CronJob controller's status: the runs not finished yet, the last schedule and success."""
    if CRONJOBS not in driver.store.buckets:
        return
    for workload in CRON_WORKLOADS:
        current = driver.store.get(CRONJOBS, workload.namespace, workload.cron or "")
        if current is None:
            continue
        runs = [r for r in driver.runs.values() if r.workload is workload and r.uid]
        status: Obj = dict(current.get("status") or {})
        active = [{"kind": "Job", "apiVersion": JOB_API, "namespace": r.namespace, "name": r.name, "uid": r.uid}
                  for r in sorted(runs, key=lambda r: r.created) if r.finished_at is None and not r.orphaned]
        if active:
            status["active"] = active
        else:
            status.pop("active", None)
        if runs:
            status["lastScheduleTime"] = rfc3339(max(r.created for r in runs))
        done = [r.finished_at for r in runs if r.finished_at is not None and r.phase == "Completed"]
        if done:
            status["lastSuccessfulTime"] = rfc3339(max(done))
        if status != current.get("status"):
            driver.store.upsert(CRONJOBS, {**current, "status": status})
