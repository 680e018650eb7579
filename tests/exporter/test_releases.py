"""The exporter against the simulator serving each Volcano release's shapes (v1.9 ... v1.16, and the
default simulator, which serves none of the newer kinds): values checked against the objects the API
server holds, computed here from the raw objects; fields a release lacks give no series (or 0), kinds
it lacks leave their informer idle without holding back readiness."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.exporter.harness import start_exporter
from tests.exporter.scrape import Series, parse, select, value
from tests.simtools import wait_for
from volcano_monitor.core.podview import is_volcano_pod
from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.releases import RELEASES
from volcano_monitor.simulator.runtime import SimulatorThread

ORDER = list(RELEASES)
PHASES = ("pending", "running", "inqueue", "completed", "unknown")
REASONS = ("NotEnoughResources", "NotEnoughTasks", "NotEnoughPodsOfTask", "PodFailed", "PodDeleted")


def since(release: str | None, first: str) -> bool:
    return release is not None and ORDER.index(release) >= ORDER.index(first)


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module", params=[None, *ORDER], ids=lambda r: r or "default")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[str | None, SimulatorThread, Exporter]]:
    """The default scenario played 20 scenario minutes under `release`, then held still.

    The scenario's clock moves only when a test moves it (`play`): on the wall clock, the seconds a loaded
    machine spent starting the exporter or scraping it counted as scenario time (x600), and the next tick
    jumped hours ahead, past the mix of phases the tests check."""
    release = request.param
    sim = SimulatorThread(scenario="default", speed=600, auto_tick=False, bookmark_interval=0.2,
                          volcano_release=release, clock=ManualClock(time.time())).start()
    play(sim, 20)
    exporter = start_exporter(sim, tmp_path_factory.mktemp("releases"))  # ready although kinds are missing
    yield release, sim, exporter
    exporter.stop()
    sim.stop()


class ManualClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def play(sim: SimulatorThread, minutes: int) -> None:
    """Move the scenario on by `minutes` scenario minutes, a tick each (0.1 s of its clock at 600x)."""
    clock: ManualClock = sim.driver.clock
    for _ in range(minutes):
        clock.now += 0.1
        sim.tick()


def objects(sim: SimulatorThread, rtype: R.ResourceType) -> list[dict[str, Any]]:
    return sim.call(sim.store.objects, rtype) if rtype in sim.store.buckets else []


def settled(sim: SimulatorThread, exporter: Exporter) -> dict[Series, float]:
    """A scrape taken once the exporter holds every object the API server holds, at the same version."""
    def caught_up() -> bool:
        for informer in exporter.informers:
            if informer in exporter.optional:  # eviction Events: a filtered view, not the server's list
                continue
            kind = next(t for t in R.ALL_TYPES if (t.group, t.plural) == (informer.kind.group, informer.kind.plural))
            want = {(f"{o['metadata']['namespace']}/" if kind.namespaced else "") + o["metadata"]["name"]:
                    o["metadata"]["resourceVersion"] for o in objects(sim, kind)
                    if kind is not R.PODS or is_volcano_pod(o)}
            if {key: entry.resource_version for key, entry in informer.cache.items()} != want:
                return False
        return True

    wait_for(caught_up, timeout=20, interval=0.05)
    return parse(exporter.scrape())


def test_podgroup_counts_equal_the_podgroups_in_each_phase(cluster: tuple[str | None, SimulatorThread, Exporter]
                                                           ) -> None:
    """Checked on the listed state, then again after the scenario moved on under the exporter's watch."""
    _, sim, exporter = cluster
    before: dict[str, str] = {}
    for round_ in range(2):
        s = settled(sim, exporter)
        groups = objects(sim, R.PODGROUPS)
        phases = {g["metadata"]["name"]: (g.get("status", {}).get("phase") or "Pending").lower() for g in groups}
        expected = Counter((g["spec"]["queue"], phases[g["metadata"]["name"]]) for g in groups)
        assert len(groups) >= 8 and len(set(phases.values())) >= 3
        for q in objects(sim, R.QUEUES):
            name = q["metadata"]["name"]
            for phase in PHASES:
                assert value(s, "volcano_queue_status_podgroups", queue=name, phase=phase) == expected[(name, phase)]
        assert sum(select(s, "volcano_queue_status_podgroups").values()) == len(groups)
        if round_:
            assert phases != before  # groups came, went or changed phase while watched
            break
        before = phases
        play(sim, 15)


def test_queue_priority_and_dequeue_strategy(cluster: tuple[str | None, SimulatorThread, Exporter]) -> None:
    release, sim, exporter = cluster
    s = settled(sim, exporter)
    queues = objects(sim, R.QUEUES)
    for q in queues:
        name, spec = q["metadata"]["name"], q["spec"]
        assert value(s, "volcano_queue_spec_priority", queue=name) == spec.get("priority", 0)
        assert value(s, "volcano_queue_info", queue=name, priority=str(spec.get("priority", 0)),
                     dequeue_strategy=spec.get("dequeueStrategy", "")) == 1
    prod = value(s, "volcano_queue_spec_priority", queue="prod")
    assert prod == (10 if since(release, "v1.10") or release is None else 0)
    strategies = {dict(k)["dequeue_strategy"] for k in select(s, "volcano_queue_info")}
    assert strategies == ({"traverse"} if since(release, "v1.14") or release is None else {""})


def test_subtree_rollups(cluster: tuple[str | None, SimulatorThread, Exporter]) -> None:
    _, sim, exporter = cluster
    s = settled(sim, exporter)
    queues = {q["metadata"]["name"]: q for q in objects(sim, R.QUEUES)}
    # Volcano (and the simulator) roll the children's allocation into the parent's status: no double count.
    for name, q in queues.items():
        for resource, amount in q["status"]["allocated"].items():
            label = resource.replace(".", "_").replace("/", "_")
            assert value(s, "volcano_queue_subtree_allocated", queue=name, resource=label) == \
                pytest.approx(parse_quantity(amount)), (name, resource)
    # Pod requests: research = research + research-nlp; root = every queue.
    for phase in ("pending", "running"):
        own = {dict(k)["queue"]: v for k, v in select(s, "volcano_queue_pod_requests", phase=phase,
                                                      resource="cpu").items()}
        assert own, phase
        subtree = {dict(k)["queue"]: v for k, v in select(s, "volcano_queue_subtree_pod_requests", phase=phase,
                                                          resource="cpu").items()}
        assert subtree["root"] == pytest.approx(sum(own.values()))
        if "research-nlp" in own or "research" in own:
            assert subtree["research"] == pytest.approx(own.get("research", 0) + own.get("research-nlp", 0))


def test_podgroup_fields_of_the_release(cluster: tuple[str | None, SimulatorThread, Exporter]) -> None:
    release, sim, exporter = cluster
    s = settled(sim, exporter)
    groups = objects(sim, R.PODGROUPS)
    llama = next(g for g in groups if g["metadata"]["name"].startswith("llama-pretrain"))
    key = {"namespace": llama["metadata"]["namespace"], "podgroup": llama["metadata"]["name"]}
    tier = select(s, "volcano_podgroup_spec_network_topology_highest_tier_allowed", **key)
    size = select(s, "volcano_podgroup_spec_subgroup_size", **key, subgroup="worker")
    topology = since(release, "v1.12") or release is None
    assert list(tier.values()) == ([2] if topology else [])
    assert list(size.values()) == ([2] if since(release, "v1.14") or release is None else [])
    assert bool(select(s, "volcano_podgroup_spec_network_topology_info", **key, mode="hard")) == topology
    reasons = 0
    for g in groups:
        want = Counter((c["type"], c.get("reason") if c.get("reason") in REASONS else "Other")
                       for c in g.get("status", {}).get("conditions", [])
                       if c["status"] == "True" and c["type"] != "Scheduled")
        got = Counter((dict(k)["type"], dict(k)["reason"]) for k in select(
            s, "volcano_podgroup_status_condition_reason", namespace=g["metadata"]["namespace"],
            podgroup=g["metadata"]["name"], queue=g["spec"]["queue"]))
        assert got == want, g["metadata"]["name"]
        reasons += sum(want.values())
    assert reasons >= 1  # llm-70b-sft: Unschedulable/NotEnoughResources


def test_newer_kinds_where_served(cluster: tuple[str | None, SimulatorThread, Exporter]) -> None:
    release, sim, exporter = cluster
    s = settled(sim, exporter)
    served = {"hypernodes.topology.volcano.sh": since(release, "v1.12"),
              "cronjobs.batch.volcano.sh": since(release, "v1.13"),
              "jobflows.flow.volcano.sh": release is not None}
    for resource, yes in served.items():
        assert value(s, "volcano_exporter_resource_served", resource=resource) == int(yes), resource
        assert value(s, "volcano_exporter_informer_state", resource=resource,
                     state="watching" if yes else "not_found") == 1
    assert value(s, "volcano_exporter_resource_served", resource="jobs.batch.volcano.sh") == 1
    hypernodes = objects(sim, R.HYPERNODES)
    assert len(select(s, "volcano_hypernode_info")) == len(hypernodes) == (3 if served[
        "hypernodes.topology.volcano.sh"] else 0)
    for h in hypernodes:
        name = h["metadata"]["name"]
        assert value(s, "volcano_hypernode_status_nodes", hypernode=name) == h["status"]["nodeCount"]
        assert value(s, "volcano_hypernode_spec_tier", hypernode=name) == h["spec"]["tier"]
        assert value(s, "volcano_hypernode_info", hypernode=name, tier_name=h["spec"].get("tierName", "")) == 1
        members = Counter(m["type"] for m in h["spec"]["members"])
        for kind, count in members.items():
            assert value(s, "volcano_hypernode_spec_members", hypernode=name, type=kind) == count
    crons = objects(sim, R.CRONJOBS)
    assert len(crons) == (1 if served["cronjobs.batch.volcano.sh"] else 0)
    for cron in crons:
        key = {"namespace": cron["metadata"]["namespace"], "cronjob": cron["metadata"]["name"]}
        status = cron["status"]
        assert value(s, "volcano_cronjob_status_active", **key) == len(status.get("active", []))
        assert value(s, "volcano_cronjob_status_last_schedule_time_seconds", **key) == ts(status["lastScheduleTime"])
        assert value(s, "volcano_cronjob_info", **key, schedule=cron["spec"]["schedule"]) == 1
        runs = [j for j in objects(sim, R.JOBS) if j["metadata"]["name"].startswith(key["cronjob"] + "-")]
        assert runs and all(select(s, "volcano_job_info", job_name=j["metadata"]["name"]) for j in runs)
    flows = objects(sim, R.JOBFLOWS)
    assert len(flows) == (1 if served["jobflows.flow.volcano.sh"] else 0)
    for flow in flows:
        key = {"namespace": flow["metadata"]["namespace"], "jobflow": flow["metadata"]["name"]}
        assert value(s, "volcano_jobflow_status_phase", **key, phase=flow["status"]["state"]["phase"]) == 1
        assert value(s, "volcano_jobflow_spec_flows", **key) == len(flow["spec"]["flows"])
        for job in flow["status"]["jobStatusList"]:
            assert value(s, "volcano_jobflow_job_restarts", **key, job_name=job["name"]) == job["restartCount"]
