"""The simulated preempt action (simulator.preempt): victims chosen like Volcano's, evicted like its Evictor."""

from __future__ import annotations

import time
from typing import Any

from tests.simtools import wait_for
from volcano_monitor.simulator.preempt import plan_preemption
from volcano_monitor.simulator.resources import EVENTS, PODS
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.simulator.specs import NodeSpec, TaskSpec, Workload
from volcano_monitor.simulator.state import NodeSim, PodSim, RunSim, make_node


def node(name: str = "n0", cpu: int = 4) -> NodeSim:
    return make_node(NodeSpec(name, cpu, 16, system_reserved=False, gpu_taint=False))


def running(n: NodeSim, name: str, priority_class: str, bound_at: float, cpu: float = 1.0) -> PodSim:
    workload = Workload(name, "default", "shared", (TaskSpec("w"),), "test", priority_class=priority_class)
    pod = PodSim(RunSim(workload, name, created=0.0), workload.tasks[0], 0, name, created=0.0,
                 requests={"cpu": cpu}, node=n.name, holding=True, bound_at=bound_at)
    n.used["cpu"] = n.used.get("cpu", 0.0) + cpu
    n.used["pods"] = n.used.get("pods", 0.0) + 1
    return pod


def pending(name: str, cpu: float = 1.0) -> PodSim:
    workload = Workload(name, "default", "shared", (TaskSpec("w"),), "test", priority_class="high-priority")
    return PodSim(RunSim(workload, name, created=0.0), workload.tasks[0], 0, name, created=0.0,
                  requests={"cpu": cpu})


def test_lowest_priority_and_newest_go_first_and_only_as_many_as_needed() -> None:
    n = node()
    old_low = running(n, "old-low", "low-priority", 1.0)
    new_low = running(n, "new-low", "low-priority", 5.0)
    zero = running(n, "zero", "", 2.0)
    high = running(n, "high", "high-priority", 3.0)
    victims = plan_preemption([pending("p")], [n], set(), [old_low, new_low, zero, high], [], floor=1000)
    assert victims == [zero]  # priority 0 before 100
    victims = plan_preemption([pending("p"), pending("q")], [n], set(), [old_low, new_low, zero, high], [],
                              floor=1000)
    assert victims == [zero, new_low]
    assert plan_preemption([pending("p")], [n], set(), [high], [], floor=1000) is None  # equal priority stays


def test_no_plan_for_part_of_a_gang_and_no_second_eviction_while_victims_terminate() -> None:
    n = node(cpu=2)
    low = running(n, "low", "low-priority", 1.0)
    other = running(n, "other", "low-priority", 1.0)
    gang = [pending("a"), pending("b"), pending("c")]  # 3 cpu on a 2-cpu node: evicting helps no one
    assert plan_preemption(gang, [n], set(), [low, other], [], floor=1000) is None
    low.deleting_at = 2.0  # already being evicted: its cpu is room to come
    assert plan_preemption([pending("a")], [n], set(), [other], [low], floor=1000) == []
    assert plan_preemption([pending("a")], [n], {"n0"}, [low, other], [], floor=1000) is None  # cordoned


def pods_now(sim: SimulatorThread) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = sim.call(lambda: sim.store.objects(PODS))
    return result


def test_preemption_scenario_evicts_like_volcano_and_the_job_controller_replaces_the_pods() -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []
    with SimulatorThread(scenario="preemption", speed=10, tick_interval=0.1) as sim:
        sim.call(lambda: sim.store.listeners.append(
            lambda rtype, event: seen.append((rtype.plural, event.type, event.obj))))
        wait_for(lambda: any(e[0] == "events" and e[2].get("reason") == "Evict" for e in seen), timeout=10)
        time.sleep(0.8)  # the victims' grace period, the replacements
        events = sim.call(lambda: sim.store.objects(EVENTS))
        pods = pods_now(sim)
    evict = [e for e in events if e["reason"] == "Evict"]
    on_pods = sorted(e["involvedObject"]["name"] for e in evict if e["involvedObject"]["kind"] == "Pod")
    assert len(on_pods) == 2 and all(n.startswith("batch-") for n in on_pods)
    assert {e["message"] for e in evict if e["involvedObject"]["kind"] == "Pod"} == {
        "Pod is evicted, because of preempt"}
    assert {(e["type"], e["message"]) for e in evict if e["involvedObject"]["kind"] == "PodGroup"} == {
        ("Normal", "preempt")}
    for name in on_pods:  # the condition is written before the deletion, then the pod goes
        history = [(kind, obj) for plural, kind, obj in seen if plural == "pods" and obj["metadata"]["name"] == name]
        conditioned = [i for i, (_, obj) in enumerate(history)
                       if any(c["type"] == "DisruptionTarget" for c in obj["status"].get("conditions", []))]
        deleting = [i for i, (_, obj) in enumerate(history) if obj["metadata"].get("deletionTimestamp")]
        assert conditioned and deleting and conditioned[0] < deleting[0], history
        condition = next(c for c in history[conditioned[0]][1]["status"]["conditions"]
                         if c["type"] == "DisruptionTarget")
        assert condition["status"] == "True" and condition["message"] == "Pod is evicted, because of preempt"
        assert any(kind == "DELETED" for kind, _ in history)
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert all(by_name[n]["metadata"]["uid"] not in {e["involvedObject"]["uid"] for e in evict} for n in on_pods)
    assert {p["spec"]["priority"] for p in pods if p["metadata"]["name"].startswith("urgent-")} == {1000}
    assert sum(1 for p in pods if p["metadata"]["name"].startswith("urgent-") and p["spec"].get("nodeName")) == 2
