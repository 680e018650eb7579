"""The kubelet OOM-kills a container whose working set reaches its memory limit, and lets the same
program run to its end once the limit covers what it needs; Jobs created through the API (as the
watchdog's OOM auto scale-up creates them) are adopted and played with the program's usage."""

from __future__ import annotations

import copy
from typing import Any

from tests.simtools import FakeClock
from volcano_monitor.simulator.adopt import USAGE_ANNOTATION
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.resources import JOBS, PODS
from volcano_monitor.simulator.store import Store

T0 = 1_700_000_000.0
GI = 2**30
Obj = dict[str, Any]


def _play(driver: Driver, clock: FakeClock, seconds: float, step: float = 1.0) -> None:
    end = clock.t + seconds
    while clock.t < end:
        clock.t += step
        driver.tick()


def _job(store: Store, prefix: str) -> Obj:
    found = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, [j["metadata"]["name"] for j in store.objects(JOBS)]
    return found[0]


def _phase(store: Store, name: str) -> str:
    job = store.get(JOBS, "default", name)
    assert job is not None
    return str(((job.get("status") or {}).get("state") or {}).get("phase", ""))


def _terminated(store: Store, job: str) -> dict[str, Any]:
    pod = store.get(PODS, "default", f"{job}-main-0")
    assert pod is not None
    return dict(pod["status"]["containerStatuses"][0]["state"].get("terminated") or {})


def _copy_with_limit(job: Obj, name: str, memory: str) -> Obj:
    """What a client that raises the memory would create: same spec and annotations, a new name."""
    new = {"apiVersion": job["apiVersion"], "kind": "Job", "spec": copy.deepcopy(job["spec"]),
           "metadata": {"name": name, "namespace": "default",
                        "annotations": dict(job["metadata"].get("annotations") or {})}}
    container = new["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["memory"] = memory
    container["resources"]["limits"]["memory"] = memory
    return new


def test_usage_over_the_limit_is_oom_killed_and_enough_memory_completes() -> None:
    store, clock = Store(), FakeClock(T0)
    driver = Driver(store, "oom-scale-up", speed=1.0, clock=clock)
    driver.setup()
    _play(driver, clock, 30)
    grows = _job(store, "grows-")
    name = grows["metadata"]["name"]
    assert USAGE_ANNOTATION in grows["metadata"]["annotations"]
    assert grows["metadata"]["annotations"]["volcano-monitor/oom-scale-up"] == "true"
    assert _phase(store, name) == "Failed"
    term = _terminated(store, name)
    assert (term["reason"], term["exitCode"]) == ("OOMKilled", 137)
    ran = _play_copy(store, driver, clock, grows, f"{name}-small", "1536Mi", 40)
    assert ran == ("Failed", "OOMKilled")
    ran = _play_copy(store, driver, clock, grows, f"{name}-big", "2304Mi", 60)
    assert ran == ("Completed", "Completed")


def _play_copy(store: Store, driver: Driver, clock: FakeClock, job: Obj, name: str, memory: str,
               seconds: float) -> tuple[str, str]:
    store.create(JOBS, _copy_with_limit(job, name, memory))
    peak = 0.0
    end = clock.t + seconds
    while clock.t < end:
        clock.t += 1.0
        driver.tick()
        pod = driver.pods.get(("default", f"{name}-main-0"))
        if pod is not None and pod.usage is not None:
            used = pod.usage.memory_bytes(clock.t)
            assert used <= (pod.usage.memory_limit or 0) + 1, "the working set went past the limit"
            peak = max(peak, used)
    assert peak > 1.2 * GI  # it ran, and grew past what the original was allowed
    return _phase(store, name), str(_terminated(store, name).get("reason"))
