"""The workload driver, run on a fake clock through simulated hours of the default scenario.

One module-scoped timeline records every write to the store and checks the cluster-wide invariants
after every tick; the tests below read it.
"""

from __future__ import annotations

import calendar
import functools
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from tests.simtools import SHARED, FakeClock
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.resources import EVENTS, JOBS, NAMESPACES, NODES, PODGROUPS, PODS, QUEUES, ResourceType
from volcano_monitor.simulator.scenario import SCENARIOS
from volcano_monitor.simulator.store import Store, WatchEvent

CRDS = SHARED / "volcano" / "crds"
T0 = 1_700_000_000.0
SPEED = 10.0
Obj = dict[str, Any]

_SUFFIX = {"m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def qty(value: str | int) -> float:
    """A deliberately independent quantity parser (the driver's own is not used to check it)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|k|M|G|Ki|Mi|Gi|Ti)?", str(value))
    assert match, f"unparseable quantity {value!r}"
    return float(match.group(1)) * _SUFFIX[match.group(2) or ""]


def ts(value: str) -> float:
    return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))


@dataclass
class Timeline:
    store: Store
    driver: Driver
    clock: FakeClock
    history: list[tuple[str, str, Obj]] = field(default_factory=list)
    # (namespace, job, phase) -> (previous tick, tick) around the first time the store showed the phase
    first_seen: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    checks: int = 0
    max_pods: int = 0
    max_events: int = 0
    gang_seen: int = 0
    partial_seen: int = 0

    def versions(self, kind: str, prefix: str) -> list[Obj]:
        return [obj for k, _, obj in self.history if k == kind and obj["metadata"]["name"].startswith(prefix)]

    def runs(self, prefix: str) -> dict[str, list[Obj]]:
        """Job versions grouped by uid, in creation order."""
        grouped: dict[str, list[Obj]] = {}
        for obj in self.versions("Job", prefix + "-"):
            grouped.setdefault(obj["metadata"]["uid"], []).append(obj)
        return grouped

    def final(self, kind: str, prefix: str) -> list[Obj]:
        """The last version of each object (by uid) whose name starts with prefix."""
        last: dict[str, Obj] = {}
        for obj in self.versions(kind, prefix):
            last[obj["metadata"]["uid"]] = obj
        return list(last.values())


def pod_queue(store: Store, pod: Obj) -> str | None:
    group = pod["metadata"].get("annotations", {}).get("scheduling.k8s.io/group-name")
    pg = store.get(PODGROUPS, pod["metadata"]["namespace"], group) if group else None
    # A finishing Volcano Job's PodGroup is deleted before its last pods: its pods name the queue.
    return pg["spec"]["queue"] if pg else pod["metadata"].get("labels", {}).get("volcano.sh/queue-name")


def holds_resources(pod: Obj) -> bool:
    return bool(pod["spec"].get("nodeName")) and pod["status"]["phase"] in ("Pending", "Running")


def requests(pod: Obj) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in pod["spec"]["containers"]:
        for name, value in container.get("resources", {}).get("requests", {}).items():
            total[name] = total.get(name, 0.0) + qty(value)
    return total


def check_invariants(tl: Timeline) -> None:
    store, now = tl.store, tl.clock.t
    pods = store.objects(PODS)
    tl.max_pods = max(tl.max_pods, len(pods))
    tl.max_events = max(tl.max_events, len(store.objects(EVENTS)))
    # No node is over-committed.
    used: dict[str, dict[str, float]] = {}
    for pod in pods:
        if holds_resources(pod):
            per_node = used.setdefault(pod["spec"]["nodeName"], {})
            for name, amount in requests(pod).items():
                per_node[name] = per_node.get(name, 0.0) + amount
    for node in store.objects(NODES):
        allocatable = {k: qty(v) for k, v in node["status"]["allocatable"].items()}
        for name, amount in used.get(node["metadata"]["name"], {}).items():
            if amount > allocatable.get(name, 0.0) + 1e-6:
                tl.violations.append(f"{now}: node {node['metadata']['name']} over-committed on {name}")
    # Queue status.allocated = requests of the pods holding resources in the queue and its descendants.
    queues = {q["metadata"]["name"]: q for q in store.objects(QUEUES)}

    def ancestors(name: str) -> list[str]:
        chain = []
        while name and name not in chain:
            chain.append(name)
            name = queues[name]["spec"].get("parent", "root" if name != "root" else "")
        return chain

    expected: dict[str, dict[str, float]] = {name: {} for name in queues}
    for pod in pods:
        queue_name = pod_queue(store, pod)
        if holds_resources(pod) and queue_name:
            for name in ancestors(queue_name):
                for resource, amount in {**requests(pod), "pods": 1.0}.items():
                    expected[name][resource] = expected[name].get(resource, 0.0) + amount
    for name, queue in queues.items():
        got = {k: qty(v) for k, v in queue["status"]["allocated"].items()}
        for resource in set(got) | set(expected[name]):
            if abs(got.get(resource, 0.0) - expected[name].get(resource, 0.0)) > 1e-6:
                tl.violations.append(f"{now}: queue {name} allocated {resource} {got.get(resource)} "
                                     f"!= {expected[name].get(resource)}")
        tl.checks += 1
    # The gang bigger than the cluster is never enqueued: no pods, its PodGroup Pending without
    # conditions; the partial job keeps two pods running and two pending.
    if [p for p in pods if p["metadata"]["name"].startswith("llm-70b-sft-")]:
        tl.violations.append(f"{now}: pods created for a gang that was never enqueued")
    gang = [g for g in store.objects(PODGROUPS) if g["metadata"]["name"].startswith("llm-70b-sft-")]
    if gang:
        tl.gang_seen += 1
        if any(g["status"].get("phase") not in (None, "Pending") or g["status"].get("conditions") for g in gang):
            tl.violations.append(f"{now}: the too-big gang's PodGroup left Pending")
    partial = Counter(p["status"]["phase"] for p in pods if p["metadata"]["name"].startswith("ddp-resnet-"))
    if partial:
        tl.partial_seen += 1
        if now - T0 > 60 and partial != Counter({"Running": 2, "Pending": 2}):
            tl.violations.append(f"{now}: partial gang pods {partial}")


def record_phases(tl: Timeline, previous: float) -> None:
    for job in tl.store.objects(JOBS):
        phase = job.get("status", {}).get("state", {}).get("phase")
        if phase:
            key = (job["metadata"]["namespace"], job["metadata"]["name"], phase)
            tl.first_seen.setdefault(key, (previous, tl.clock.t))


@pytest.fixture(scope="module")
def timeline() -> Timeline:
    store = Store()
    clock = FakeClock(T0)
    tl = Timeline(store, Driver(store, "default", speed=SPEED, clock=clock), clock)

    def listen(rtype: ResourceType, event: WatchEvent) -> None:
        tl.history.append((rtype.kind, event.type, event.obj))

    store.listeners.append(listen)
    tl.driver.setup()
    # Fine steps for the first two scenario hours, then coarse ones until after the idle job's 6 h.
    for step, until in ((3.0, 2 * 3600), (60.0, 7 * 3600)):
        while (clock.t - T0) * SPEED < until:
            previous = clock.t
            clock.t += step
            tl.driver.tick()
            record_phases(tl, previous)
            check_invariants(tl)
    return tl


# ---- the cluster ---------------------------------------------------------------------------------------

def test_setup_creates_the_cluster(timeline: Timeline) -> None:
    store = timeline.store
    assert {n["metadata"]["name"] for n in store.objects(NAMESPACES)} >= {"default", "team-a", "team-b",
                                                                         "ml-platform"}
    nodes = store.objects(NODES)
    gpu_nodes = [n for n in nodes if n["metadata"]["labels"].get("node-role/gpu") == "true"]
    assert len(gpu_nodes) >= 2 and len(nodes) > len(gpu_nodes)
    for node in gpu_nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"]
    for node in nodes:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
    queues = {q["metadata"]["name"]: q for q in store.objects(QUEUES)}
    assert {"root", "default", "prod", "research", "research-nlp"} <= set(queues)
    assert queues["research-nlp"]["spec"]["parent"] == "research"
    assert all(q["status"]["state"] == "Open" for q in queues.values())
    assert "capability" in queues["research-nlp"]["spec"] and "guarantee" in queues["prod"]["spec"]


def test_invariants_hold_at_every_tick(timeline: Timeline) -> None:
    assert timeline.checks > 1000
    assert timeline.violations == []
    assert timeline.gang_seen > 100 and timeline.partial_seen > 100
    assert timeline.max_pods < 200


def test_queues_allocate_gpus_and_count_no_podgroups(timeline: Timeline) -> None:
    nlp = [q for k, _, q in timeline.history if k == "Queue" and q["metadata"]["name"] == "research-nlp"]
    assert any(q["status"]["allocated"].get("nvidia.com/gpu") == "10" for q in nlp)  # at its capability
    # Volcano v1.12 writes allocated, reservation and state only: no PodGroup counts.
    assert all(set(q["status"]) == {"allocated", "reservation", "state"} for q in nlp)
    root = timeline.store.get(QUEUES, "", "root")
    assert root is not None and root["spec"]["deserved"] == {"cpu": "379500m", "memory": "2286Gi",
                                                            "nvidia.com/gpu": "24", "pods": "990"}


# ---- job lifecycles -----------------------------------------------------------------------------------

def collapse(seq: list[str]) -> list[str]:
    return [p for i, p in enumerate(seq) if i == 0 or seq[i - 1] != p]


def assert_conditions_match_clock(tl: Timeline, job: Obj, phases: list[str]) -> None:
    """Volcano appends a condition on every status write (several Pending and Running entries):
    collapsed to phase changes they are `phases`."""
    status = job["status"]
    conditions = status["conditions"]
    assert collapse([c["status"] for c in conditions]) == phases
    times = [ts(c["lastTransitionTime"]) for c in conditions]
    assert times == sorted(times)
    assert times[0] >= T0 and times[-1] <= tl.clock.t
    assert status["state"]["phase"] == phases[-1]
    assert status["state"]["lastTransitionTime"] == conditions[-1]["lastTransitionTime"]
    for cond, when in zip(conditions, times, strict=True):
        seen = tl.first_seen.get((job["metadata"]["namespace"], job["metadata"]["name"], cond["status"]))
        first = next(c for c in conditions if c["status"] == cond["status"])
        # The transition happened between the tick before and the tick it was seen.
        if seen is not None and cond is first:
            assert seen[0] - 1 < when <= seen[1], (cond, seen)


def test_etl_job_completes_through_completing(timeline: Timeline) -> None:
    runs = list(timeline.runs("etl-daily").values())
    assert len(runs) >= 3  # it loops
    job = runs[0][-1]
    assert_conditions_match_clock(timeline, job, ["Pending", "Running", "Completing", "Completed"])
    status = job["status"]
    # A finished job's last status has its counts wiped; runningDuration and version remain.
    assert not {"succeeded", "running", "terminating", "taskStatusCount"} & set(status)
    assert status["version"] >= 2 and status["runningDuration"].endswith("s")
    completing = [j["status"] for j in runs[0] if j.get("status", {}).get("state", {}).get("phase") == "Completing"]
    assert completing and "runningDuration" in completing[0] and "taskStatusCount" not in completing[0]
    times = {c["status"]: ts(c["lastTransitionTime"]) for c in reversed(status["conditions"])}
    assert 355 <= (times["Completed"] - times["Running"]) * SPEED <= 380  # the coordinator runs 360 s
    assert any(j["status"]["state"]["phase"] == "Running" and j["status"].get("running") == 4 for j in runs[0]
               if "status" in j)


def test_simple_job_completes(timeline: Timeline) -> None:
    job = next(iter(timeline.runs("batch-score").values()))[-1]
    assert_conditions_match_clock(timeline, job, ["Pending", "Running", "Completed"])
    assert "succeeded" not in job["status"] and job["status"]["version"] == 1
    versions = next(iter(timeline.runs("batch-score").values()))
    assert any(v.get("status", {}).get("succeeded") == 1 for v in versions)


def test_finished_jobs_are_resubmitted_under_new_names(timeline: Timeline) -> None:
    runs = list(timeline.runs("etl-daily").values())
    names = [r[0]["metadata"]["name"] for r in runs]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"etl-daily-[a-z0-9]{4}", n) for n in names)
    first_done = ts(runs[0][-1]["status"]["state"]["lastTransitionTime"])
    second_created = ts(runs[1][0]["metadata"]["creationTimestamp"])
    assert 590 <= (second_created - first_done) * SPEED <= 620  # a 600 s pause
    # Finished runs are garbage-collected after their TTL: the store keeps a bounded number.
    assert len([j for j in timeline.store.objects(JOBS) if j["metadata"]["name"].startswith("etl-daily-")]) <= 6


def test_failing_job_retries_then_fails(timeline: Timeline) -> None:
    versions = next(iter(timeline.runs("report-gen").values()))
    statuses = [v["status"] for v in versions if "status" in v]
    retries = [s.get("retryCount", 0) for s in statuses]
    assert retries == sorted(retries) and {0, 1, 2, 3} <= set(retries)
    phases = [s["state"]["phase"] for s in statuses]
    assert phases.count("Restarting") >= 2 and phases[-1] == "Failed"
    final = versions[-1]
    # maxRetry 3 = three runs: retryCount reaches 3 at the third failure, which fails the job.
    assert final["spec"]["maxRetry"] == 3 and final["status"]["retryCount"] == 3
    assert collapse([c["status"] for c in final["status"]["conditions"]]) == [
        "Pending", "Running", "Restarting", "Pending", "Running", "Restarting", "Pending", "Running", "Restarting",
        "Failed"]
    assert final["status"]["version"] == 4  # one per Restarting, one for the final write
    name = final["metadata"]["name"]
    failed = [p for p in timeline.versions("Pod", name) if p["status"]["phase"] == "Failed"]
    terminated = [p["status"]["containerStatuses"][0]["state"]["terminated"] for p in failed]
    assert terminated and all(t["exitCode"] == 1 and t["reason"] == "Error" for t in terminated)
    assert {p["metadata"]["annotations"]["volcano.sh/job-version"] for p in failed} == {"0", "1", "2"}
    assert len({p["metadata"]["uid"] for p in failed}) == 3  # a new pod per attempt, same name
    assert {p["metadata"]["name"] for p in failed} == {f"{name}-main-0"}


def test_oom_killed_pod(timeline: Timeline) -> None:
    pods = [p for p in timeline.versions("Pod", "embed-features-") if p["status"]["phase"] == "Failed"]
    assert pods
    container = pods[0]["status"]["containerStatuses"][0]
    assert container["state"]["terminated"]["reason"] == "OOMKilled"
    assert container["state"]["terminated"]["exitCode"] == 137
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "8Gi"
    name = pods[0]["metadata"]["labels"]["volcano.sh/job-name"]
    job = timeline.final("Job", name)[0]
    assert job["status"]["state"]["phase"] == "Failed" and "failed" not in job["status"]  # wiped at the end
    assert any(j["status"].get("failed") == 1 for j in timeline.versions("Job", name) if "status" in j)
    assert any(e["reason"] == "OOMKilling" and e["involvedObject"]["kind"] == "Node"
               for e in timeline.versions("Event", ""))


def test_kubelet_rejected_pod(timeline: Timeline) -> None:
    pods = [p for p in timeline.versions("Pod", "canary-infer-") if p["status"]["phase"] == "Failed"]
    assert pods
    status = pods[0]["status"]
    assert status["reason"] == "OutOfcpu" and status["message"].startswith("Pod was rejected:")
    assert pods[0]["spec"]["nodeName"]
    job = timeline.final("Job", pods[0]["metadata"]["labels"]["volcano.sh/job-name"])[0]
    assert job["status"]["state"]["phase"] == "Failed"


def test_gang_bigger_than_the_cluster_is_never_enqueued(timeline: Timeline) -> None:
    """32 GPUs > 24: as in the recording gang-too-big, the PodGroup stays Pending with no condition at
    all, no pod is created, and only Events say why."""
    store = timeline.store
    jobs = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith("llm-70b-sft-")]
    assert len(jobs) == 1 and jobs[0]["status"]["state"]["phase"] == "Pending"
    job = jobs[0]
    assert "pending" not in job["status"]
    pg = store.get(PODGROUPS, job["metadata"]["namespace"], f"{job['metadata']['name']}-{job['metadata']['uid']}")
    assert pg is not None and pg["status"] == {"phase": "Pending"}
    assert not [p for p in store.objects(PODS) if p["metadata"]["name"].startswith(job["metadata"]["name"])]
    messages = {(e["type"], e["message"]) for e in timeline.versions("Event", pg["metadata"]["name"])}
    assert ("Normal", "queue resource quota insufficient") in messages
    assert ("Warning", "0/0 tasks in gang unschedulable: pod group is not ready, 4 minAvailable") in messages


def test_partial_gang(timeline: Timeline) -> None:
    store = timeline.store
    (job,) = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith("ddp-resnet-")]
    assert job["status"]["state"]["phase"] == "Pending"
    assert (job["status"]["running"], job["status"]["pending"], job["spec"]["minAvailable"]) == (2, 2, 4)
    pg = store.get(PODGROUPS, job["metadata"]["namespace"], f"{job['metadata']['name']}-{job['metadata']['uid']}")
    assert pg is not None and pg["status"]["phase"] == "Unknown" and pg["status"]["running"] == 2
    assert pg["spec"]["minMember"] == 4
    pods = {p["metadata"]["name"]: p for p in store.objects(PODS)
            if p["metadata"]["name"].startswith(job["metadata"]["name"])}
    running = sorted(n for n, p in pods.items() if p["status"]["phase"] == "Running")
    assert running == [f"{job['metadata']['name']}-trainer-{i}" for i in range(2)]
    assert all(pods[n]["spec"]["nodeName"] for n in running)


def test_queue_starved_job_waits_for_capability(timeline: Timeline) -> None:
    versions = next(iter(timeline.runs("hp-search").values()))
    pgs = timeline.versions("PodGroup", versions[0]["metadata"]["name"])
    waiting = [p for p in pgs if p["status"].get("phase") == "Pending"]
    assert waiting and not any(p["status"].get("conditions") for p in waiting)  # Events only
    events = timeline.versions("Event", waiting[0]["metadata"]["name"])
    assert any(e["message"] == "queue resource quota insufficient" for e in events)
    assert any(p["status"].get("phase") == "Running" for p in pgs)  # once the idle job frees its GPUs
    running = [ts(c["lastTransitionTime"]) for c in versions[-1]["status"]["conditions"] if c["status"] == "Running"]
    assert running and (running[0] - T0) * SPEED > 6 * 3600


# ---- object shapes -------------------------------------------------------------------------------------

def test_volcano_pods_carry_volcano_labels(timeline: Timeline) -> None:
    store = timeline.store
    (job,) = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith("ddp-resnet-")]
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    pg = store.get(PODGROUPS, "ml-platform", f"{name}-{uid}")
    assert pg is not None
    owner = pg["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Job", name, uid, True)
    assert pg["spec"]["queue"] == job["spec"]["queue"] == "research"
    assert pg["spec"]["minResources"]["requests.nvidia.com/gpu"] == "10"
    assert {"count/pods", "pods", "cpu", "requests.cpu", "memory", "requests.memory"} <= set(pg["spec"]["minResources"])
    pod = store.get(PODS, "ml-platform", f"{name}-evaluator-1")
    assert pod is not None
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["volcano.sh/job-name"] == name and labels["volcano.sh/job-namespace"] == "ml-platform"
    assert labels["volcano.sh/queue-name"] == "research" and labels["volcano.sh/task-spec"] == "evaluator"
    assert labels["volcano.sh/task-index"] == "1"
    assert annotations["scheduling.k8s.io/group-name"] == f"{name}-{uid}"
    assert annotations["volcano.sh/job-version"] == "0"
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "16Gi",
                                                                     "nvidia.com/gpu": 1}


def test_pytorchjob_pods_have_only_the_group_annotation(timeline: Timeline) -> None:
    pgs = timeline.final("PodGroup", "mnist-ddp-")
    assert pgs
    pg = pgs[0]
    owner = pg["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"], owner["controller"]) == ("kubeflow.org/v1", "PyTorchJob", True)
    assert owner["name"] == pg["metadata"]["name"]
    assert pg["spec"]["queue"] == "default" and pg["spec"]["minMember"] == 3
    assert any(p["status"].get("phase") == "Completed" for p in timeline.versions("PodGroup", pg["metadata"]["name"]))
    pods = timeline.final("Pod", pg["metadata"]["name"] + "-")
    assert len(pods) == 3
    for pod in pods:
        assert pod["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": pg["metadata"]["name"]}
        assert not [k for k in pod["metadata"]["labels"] if k.startswith("volcano.sh/")]
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    assert not [j for j in timeline.versions("Job", pg["metadata"]["name"])]
    worker = [p for p in timeline.versions("Pod", pg["metadata"]["name"] + "-worker-0")
              if p["status"]["phase"] == "Running" and p["status"]["containerStatuses"][0]["restartCount"] == 1]
    assert worker and worker[-1]["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1


@functools.cache
def _validators() -> dict[str, Any]:
    validators: dict[str, Any] = {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=loader)
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        validators[crd["spec"]["names"]["kind"]] = jsonschema.Draft7Validator(schema)
    return validators


def test_objects_validate_against_the_crds(timeline: Timeline) -> None:
    validators = _validators()
    assert set(validators) >= {"Job", "PodGroup", "Queue"}
    # The validator does catch a wrong object.
    assert list(validators["PodGroup"].iter_errors({"spec": {"minMember": "four"}}))
    checked: Counter[str] = Counter()
    for kind in ("Job", "PodGroup", "Queue"):
        versions = [obj for k, _, obj in timeline.history if k == kind]
        sample = {obj["metadata"]["uid"]: obj for obj in versions}  # last version of each object
        for obj in list(sample.values()) + versions[::101]:
            errors = [f"{list(e.path)}: {e.message}" for e in validators[kind].iter_errors(obj)]
            assert errors == [], (kind, obj["metadata"]["name"], errors)
            checked[kind] += 1
    assert checked["Job"] > 20 and checked["PodGroup"] > 20 and checked["Queue"] >= 5


def test_events_are_recorded_and_bounded(timeline: Timeline) -> None:
    reasons = {e["reason"] for e in timeline.versions("Event", "")}
    assert {"Scheduled", "FailedScheduling", "Unschedulable", "OOMKilling", "ExecuteAction", "PodGroupPending",
            "OutOfcpu"} <= reasons
    assert timeline.max_events <= timeline.driver.max_events


# ---- other scenarios and edges -------------------------------------------------------------------------

def run_driver(scenario: str, seconds: float, step: float = 5.0, speed: float = 1.0,
               **params: Any) -> tuple[Store, Driver, FakeClock]:
    store = Store()
    clock = FakeClock(T0)
    driver = Driver(store, scenario, speed=speed, clock=clock, **params)
    driver.setup()
    while clock.t - T0 < seconds:
        clock.t += step
        driver.tick()
    return store, driver, clock


def test_same_clock_same_story() -> None:
    def story(store: Store) -> list[tuple[str, str, str, str]]:
        out = []

        def listen(rtype: ResourceType, event: WatchEvent) -> None:
            status = event.obj.get("status") or {}
            state = status.get("state") if isinstance(status, dict) else None
            phase = status.get("phase") or (state.get("phase") if isinstance(state, dict) else state)
            name = re.sub(r"-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "", event.obj["metadata"]["name"])
            out.append((rtype.kind, event.type, name, str(phase)))

        store.listeners.append(listen)
        return out

    stores = [Store(), Store()]
    stories = [story(s) for s in stores]
    for store in stores:
        clock = FakeClock(T0)
        driver = Driver(store, "default", speed=5, clock=clock)
        driver.setup()
        for _ in range(120):
            clock.t += 7
            driver.tick()
    assert len(stories[0]) > 200 and stories[0] == stories[1]


def test_speed_compresses_durations() -> None:
    store, _, _ = run_driver("default", 60, step=1.0, speed=60)
    jobs = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith("batch-score-")]
    conditions = {c["status"]: ts(c["lastTransitionTime"]) for c in jobs[0]["status"]["conditions"]}
    assert "Completed" in conditions  # 20 scenario minutes in 20 real seconds
    assert 18 <= conditions["Completed"] - conditions["Running"] <= 22


def test_scale_scenario_creates_bulk_objects_without_churn() -> None:
    store, driver, clock = run_driver("scale", 0, pods=250, jobs=20, queues=4)
    assert len(store.objects(PODS)) == 250 and len(store.objects(JOBS)) == 20
    assert len(store.objects(PODGROUPS)) == 20 and len(store.objects(QUEUES)) == 5
    pods = store.objects(PODS)
    assert Counter(p["status"]["phase"] for p in pods) == Counter({"Running": 225, "Pending": 25})
    rv = store.rv
    clock.t += 60
    driver.tick()
    assert store.rv == rv
    validators = _validators()
    for kind, rtype in (("Job", JOBS), ("PodGroup", PODGROUPS), ("Queue", QUEUES)):
        for obj in store.objects(rtype):
            assert not list(validators[kind].iter_errors(obj))
    queues = {q["metadata"]["name"]: q for q in store.objects(QUEUES)}
    assert qty(queues["root"]["status"]["allocated"]["cpu"]) == pytest.approx(225 * 0.1)
    per_node = Counter(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
    assert max(per_node.values()) <= 100


def test_empty_scenario_has_cluster_but_no_workload() -> None:
    store, driver, _ = run_driver("empty", 120)
    assert store.objects(NODES) and store.objects(QUEUES) and store.objects(NAMESPACES)
    assert not store.objects(JOBS) and not store.objects(PODS) and not store.objects(PODGROUPS)
    assert b"container_cpu_usage_seconds_total" in driver.prometheus_metrics()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        Driver(Store(), "nope")
    with pytest.raises(ValueError, match="speed"):
        Driver(Store(), "default", speed=0)
    with pytest.raises(ValueError, match="unknown parameters"):
        Driver(Store(), "scale", podz=3)
    with pytest.raises(ValueError, match="takes no parameters"):
        Driver(Store(), "default", pods=3)
    assert {"default", "empty", "scale"} <= set(SCENARIOS)


def test_deleting_a_job_cleans_up_and_resubmits() -> None:
    store, driver, clock = run_driver("default", 30)
    (job,) = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith("batch-score-")]
    name = job["metadata"]["name"]
    assert [p for p in store.objects(PODS) if p["metadata"]["name"].startswith(name)]
    store.delete(JOBS, "team-a", name)
    clock.t += 1
    driver.tick()
    # No finalizer: the garbage collector deletes the pods ~15 s and the PodGroup ~18 s later.
    assert [p for p in store.objects(PODS) if p["metadata"]["name"].startswith(name)]
    clock.t += 20
    driver.tick()
    assert not [p for p in store.objects(PODS) if p["metadata"]["name"].startswith(name)]
    assert not [p for p in store.objects(PODGROUPS) if p["metadata"]["name"].startswith(name)]
    for _ in range(130):  # the 600 s pause
        clock.t += 5
        driver.tick()
    again = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith("batch-score-")]
    assert len(again) == 1 and again[0]["metadata"]["name"] != name


def test_deleting_a_pod_makes_the_controller_replace_it() -> None:
    store, driver, clock = run_driver("default", 30)
    pod = store.get(PODS, "ml-platform", next(p["metadata"]["name"] for p in store.objects(PODS)
                                              if p["metadata"]["name"].startswith("ddp-resnet-")))
    assert pod is not None
    store.delete(PODS, "ml-platform", pod["metadata"]["name"])
    clock.t += 1
    driver.tick()
    again = store.get(PODS, "ml-platform", pod["metadata"]["name"])
    assert again is not None and again["metadata"]["uid"] != pod["metadata"]["uid"]
