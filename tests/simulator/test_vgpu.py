"""The `vgpu-hami` and `vgpu-volcano` scenarios through the simulator's real HTTP API server: the device plugins'
node resources and annotations, pods sharing a card with the plugins' allocation annotations, the HyperNode tree
and its fragmented pool (checked against the hand-computed values of simulator.vgpu_scenarios, recomputed here
from what the API serves), the hard-topology gang that waits until a HyperNode frees up, and the /metrics
endpoint (HAMi's and Volcano's vGPU monitors, DCGM per shared card)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.simtools import FakeClock
from volcano_monitor.simulator import vgpu_scenarios as vs
from volcano_monitor.simulator.cli import main as sim_main
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.releases import release_store
from volcano_monitor.simulator.resources import HYPERNODES
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.simulator.topology import Group, allowed_groups, hard_tier, resolve

Obj = dict[str, Any]
T0 = 1_800_000_000.0
PLUGINS = {"vgpu-hami": "hami", "vgpu-volcano": "volcano-vgpu"}
ALLOCATED = {"hami": "hami.io/vgpu-devices-allocated", "volcano-vgpu": "volcano.sh/vgpu-ids-new"}
REGISTER = {"hami": "hami.io/node-nvidia-register", "volcano-vgpu": "volcano.sh/node-vgpu-register"}


# ---- reading what the API serves (independently of simulator.vgpu) ---------------------------------------

def get(sim: SimulatorThread, path: str) -> Any:
    with urllib.request.urlopen(sim.url + path, timeout=10) as response:
        return json.loads(response.read())


def items(sim: SimulatorThread, path: str) -> list[Obj]:
    return list(get(sim, path)["items"])


def register_cards(plugin: str, text: str) -> list[tuple[str, int, int]]:
    """(uuid, split, memory MiB) per card of a node's register annotation, in the plugin's own format."""
    if text.startswith("["):
        return [(c["id"], c["count"], c["devmem"]) for c in json.loads(text)]
    cards = [entry.split(",") for entry in text.split(":") if entry]
    if plugin == "hami":  # uuid,count,devmem,devcore,type,numa,health,index,mode
        assert all(len(c) == 9 and c[3] == "100" and c[8] == "hami-core" for c in cards)
    else:  # uuid,count,devmem,type,health,mode
        assert all(len(c) == 6 and c[4] == "true" and c[5] == "hami-core" for c in cards)
    return [(c[0], int(c[1]), int(c[2])) for c in cards]


def allocated(annotation: str) -> list[tuple[str, int, int]]:
    """(card uuid, memory MiB, cores) per vGPU of a pod's allocation annotation."""
    out = []
    for container in annotation.split(";"):
        for entry in container.split(":"):
            if entry:
                uuid, kind, memory, cores = entry.split(",")
                assert kind == "NVIDIA"
                out.append((uuid, int(memory), int(cores)))
    return out


def job_of(pod: Obj) -> str:
    return str(pod["metadata"]["labels"]["volcano.sh/job-name"]).rsplit("-", 1)[0]


def card_shares(plugin: str, pods: list[Obj]) -> dict[str, float]:
    """Physical share per card uuid: max(memory share, cores share) of every vGPU placed on it."""
    shares: dict[str, float] = defaultdict(float)
    for pod in pods:
        raw = pod["metadata"].get("annotations", {}).get(ALLOCATED[plugin])
        if pod["status"]["phase"] in ("Running", "Pending") and raw:
            for uuid, memory, cores in allocated(raw):
                shares[uuid] += max(memory / vs.CARD_MIB, cores / 100)
    return shares


def free_per_node(plugin: str, nodes: list[Obj], pods: list[Obj]) -> dict[str, float]:
    shares = card_shares(plugin, pods)
    out = {}
    for node in nodes:
        cards = register_cards(plugin, node["metadata"]["annotations"][REGISTER[plugin]])
        out[node["metadata"]["name"]] = sum(1 - min(1.0, shares.get(uuid, 0.0)) for uuid, _, _ in cards)
    return out


def per_hypernode(hypernodes: list[Obj], free: dict[str, float]) -> tuple[dict[str, float], dict[int, float]]:
    """Free GPUs per HyperNode (exact-name members, recursively) and per tier the most in one HyperNode."""
    by_name = {h["metadata"]["name"]: h for h in hypernodes}

    def leaves(name: str) -> set[str]:
        out: set[str] = set()
        for m in by_name[name]["spec"]["members"]:
            target = m["selector"]["exactMatch"]["name"]
            out |= leaves(target) if m["type"] == "HyperNode" else {target}
        return out

    free_hn = {name: sum(free[n] for n in leaves(name)) for name in by_name}
    tiers: dict[int, float] = {}
    for name, obj in by_name.items():
        tier = obj["spec"]["tier"]
        tiers[tier] = max(tiers.get(tier, 0.0), free_hn[name])
    return free_hn, tiers


def metrics(sim: SimulatorThread) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(sim.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), sample.value))
    return out


# ---- the scenario, played ---------------------------------------------------------------------------------

def start(scenario: str, **kwargs: Any) -> tuple[SimulatorThread, FakeClock]:
    clock = FakeClock(T0)
    sim = SimulatorThread(scenario=scenario, auto_tick=False, clock=clock, **kwargs).start()
    return sim, clock


def advance(sim: SimulatorThread, clock: FakeClock, seconds: float, step: float = 5.0) -> None:
    end = clock.t + seconds
    while clock.t < end:
        clock.t = min(end, clock.t + step)
        sim.tick()


@pytest.fixture(scope="module", params=sorted(PLUGINS))
def played(request: pytest.FixtureRequest) -> Iterator[tuple[SimulatorThread, str]]:
    """Two scenario minutes in: everything placed, the gang submitted and waiting."""
    sim, clock = start(request.param)
    try:
        advance(sim, clock, 120)
        yield sim, PLUGINS[request.param]
    finally:
        sim.stop()


Played = tuple[SimulatorThread, str]


def test_nodes_carry_the_device_plugin_resources_annotations_and_gfd_labels(played: Played) -> None:
    sim, plugin = played
    nodes = items(sim, "/api/v1/nodes")
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(vs.NODE_RACKS)
    for node in nodes:
        labels, alloc = node["metadata"]["labels"], node["status"]["allocatable"]
        assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("8", str(vs.CARD_MIB))
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        if plugin == "hami":
            assert alloc["nvidia.com/gpu"] == "80" and not any(k.startswith("volcano.sh/") for k in alloc)
            assert node["metadata"]["annotations"]["hami.io/node-handshake"].startswith("Reported ")
        else:
            assert (alloc["volcano.sh/vgpu-number"], alloc["volcano.sh/vgpu-memory"],
                    alloc["volcano.sh/vgpu-cores"]) == ("80", str(8 * vs.CARD_MIB), "800")
            assert "nvidia.com/gpu" not in alloc
            assert node["metadata"]["annotations"]["volcano.sh/node-vgpu-handshake"].startswith("Reported ")
        raw = node["metadata"]["annotations"][REGISTER[plugin]]
        # vgpu-hami's gpu-22 registers in HAMi's old text format, every other node of it in JSON
        assert raw.startswith("[") == (plugin == "hami" and node["metadata"]["name"] != "gpu-22")
        cards = register_cards(plugin, raw)
        assert [(split, memory) for _, split, memory in cards] == [(10, vs.CARD_MIB)] * 8
        assert len({uuid for uuid, _, _ in cards}) == 8


def test_four_pods_share_one_card_beside_an_idle_card_and_whole_gpu_jobs(played: Played) -> None:
    sim, plugin = played
    pods = items(sim, "/api/v1/namespaces/default/pods")
    nodes = {n["metadata"]["name"]: n for n in items(sim, "/api/v1/nodes")}
    cards = {name: [u for u, _, _ in register_cards(plugin, n["metadata"]["annotations"][REGISTER[plugin]])]
             for name, n in nodes.items()}
    by_job: dict[str, list[Obj]] = defaultdict(list)
    for pod in pods:
        by_job[job_of(pod)].append(pod)
    shared = by_job[vs.SHARED_JOB]
    assert len(shared) == 4 and all(p["status"]["phase"] == "Running" for p in shared)
    devices = [allocated(p["metadata"]["annotations"][ALLOCATED[plugin]]) for p in shared]
    assert all(d == [(cards[vs.SHARED_NODE][vs.SHARED_CARD_INDEX], vs.QUARTER_MIB, 25)] for d in devices)
    for pod in shared:
        resources = pod["spec"]["containers"][0]["resources"]
        wanted = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 25, "nvidia.com/gpumem": vs.QUARTER_MIB} \
            if plugin == "hami" else {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-cores": 25,
                                      "volcano.sh/vgpu-memory": vs.QUARTER_MIB}
        for part in ("limits", "requests"):  # extended limits are copied to requests by the API server
            assert {k: int(v) for k, v in resources[part].items() if "gpu" in k} == wanted
        annotations = pod["metadata"]["annotations"]
        prefix = "hami.io" if plugin == "hami" else "volcano.sh"
        assert annotations[f"{prefix}/vgpu-node"] == vs.SHARED_NODE == pod["spec"]["nodeName"]
        assert annotations[f"{prefix}/bind-phase"] == "success"
    (idle,) = by_job[vs.IDLE_JOB]
    assert allocated(idle["metadata"]["annotations"][ALLOCATED[plugin]]) == \
        [(cards[vs.IDLE_NODE][vs.IDLE_CARD_INDEX], vs.CARD_MIB, 0)]
    (whole,) = by_job["train-whole"]
    assert [u for u, m, _ in allocated(whole["metadata"]["annotations"][ALLOCATED[plugin]]) if m == vs.CARD_MIB] == \
        cards["gpu-11"][2:6]
    # physical GPUs requested per job, from the annotations: four pods at 25 % make 1.0
    per_job = {job: sum(max(m / vs.CARD_MIB, c / 100) for p in ps
                        for _, m, c in allocated(p["metadata"]["annotations"].get(ALLOCATED[plugin], "")))
               for job, ps in by_job.items()}
    expected = {job: gpus for job, gpus in vs.PHYSICAL_GPUS.items() if job != vs.GANG}
    assert {j: g for j, g in per_job.items() if j != vs.GANG} == pytest.approx(expected)
    assert sum(expected.values()) == vs.GPU_HOURS_PER_HOUR
    vgpus = sum(len(allocated(p["metadata"]["annotations"].get(ALLOCATED[plugin], ""))) for p in pods)
    assert vgpus == sum(n for j, n in vs.VGPUS.items() if j != vs.GANG) == 24


def test_core_gpushare_counts_the_scenario_in_physical_gpus(played: Played) -> None:
    """The monitor's own counting (core.gpushare) on the served pods agrees with the hand-computed values."""
    from volcano_monitor.core.gpushare import pod_share

    sim, _ = played
    per_job: dict[str, float] = defaultdict(float)
    for pod in items(sim, "/api/v1/namespaces/default/pods"):
        per_job[job_of(pod)] += pod_share(pod["spec"], pod["metadata"].get("annotations"), vs.CARD_MIB).gpus
    assert dict(per_job) == pytest.approx(dict(vs.PHYSICAL_GPUS))


def test_the_pool_is_fragmented_as_computed_by_hand(played: Played) -> None:
    sim, plugin = played
    hypernodes = items(sim, "/apis/topology.volcano.sh/v1alpha1/hypernodes")
    assert {h["metadata"]["name"]: h["spec"]["tier"] for h in hypernodes} == {"rack-1": 1, "rack-2": 1, "spine": 2}
    free = free_per_node(plugin, items(sim, "/api/v1/nodes"), items(sim, "/api/v1/namespaces/default/pods"))
    assert free == pytest.approx(dict(vs.FREE_GPUS))
    free_hn, largest = per_hypernode(hypernodes, free)
    assert free_hn == pytest.approx(dict(vs.HYPERNODE_FREE_GPUS))
    assert largest == pytest.approx(dict(vs.LARGEST_GANG))


def test_the_hard_topology_gang_waits_although_the_cluster_has_room(played: Played) -> None:
    sim, _ = played
    gang = [p for p in items(sim, "/api/v1/namespaces/default/pods") if job_of(p) == vs.GANG]
    assert len(gang) == 8 and all(p["status"]["phase"] == "Pending" and "nodeName" not in p["spec"] for p in gang)
    (cond,) = gang[0]["status"]["conditions"]
    assert cond["type"] == "PodScheduled" and cond["status"] == "False" and "network topology" in cond["message"]
    (pg,) = [g for g in items(sim, "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups")
             if g["metadata"]["name"].startswith(vs.GANG)]
    assert pg["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert pg["status"]["phase"] == "Inqueue"
    assert sum(vs.FREE_GPUS.values()) >= 8 > max(v for k, v in vs.HYPERNODE_FREE_GPUS.items() if k != "spine")


def test_the_metrics_endpoint_serves_the_vgpu_monitor_and_dcgm_per_card(played: Played) -> None:
    sim, plugin = played
    m = metrics(sim)
    pods = {p["metadata"]["name"]: p for p in items(sim, "/api/v1/namespaces/default/pods")}
    used = {(s["podname"], s["vdeviceid"]): v for s, v in m["vGPU_device_memory_usage_in_bytes"]}
    limit = {(s["podname"], s["vdeviceid"]): v for s, v in m["vGPU_device_memory_limit_in_bytes"]}
    assert set(used) == set(limit) and all(s["zone"] == "vGPU" for s, _ in m["vGPU_device_memory_limit_in_bytes"])
    running = {n for n, p in pods.items() if p["status"]["phase"] == "Running"}
    assert {pod for pod, _ in used} == running
    shared = {n for n in running if job_of(pods[n]) == vs.SHARED_JOB}
    hot = {n for n in shared if pods[n]["metadata"]["labels"]["volcano.sh/task-spec"] == vs.HOT_MEMORY_POD_TASK}
    assert len(hot) == 1
    for name in shared:
        assert limit[(name, "0")] == vs.QUARTER_MIB * 2**20
        assert (used[(name, "0")] / limit[(name, "0")] > 0.95) == (name in hot)
    nodes = {n["metadata"]["name"]: n for n in items(sim, "/api/v1/nodes")}
    card0 = register_cards(plugin, nodes[vs.SHARED_NODE]["metadata"]["annotations"][REGISTER[plugin]])[0][0]
    dcgm = {s["UUID"]: (s, v) for s, v in m["DCGM_FI_DEV_GPU_UTIL"]}
    assert len(dcgm) == 32 and all("pod" not in s and "namespace" not in s for s, _ in dcgm.values())
    labels, card_util = dcgm[card0]
    assert labels["Hostname"] == vs.SHARED_NODE and 60 <= card_util <= 80
    host = {s["deviceuuid"]: v for s, v in m["HostCoreUtilization"]}
    assert host == {uuid: v for uuid, (_, v) in dcgm.items()}
    if plugin == "hami":
        per_container = {s["podname"]: v for s, v in m["Device_utilization_desc_of_container"]}
        assert all(per_container[n] <= 25 for n in shared)
        assert sum(per_container[n] for n in shared) == pytest.approx(card_util, abs=0.3)
        assert {s["pod"] for s, _ in m["hami_vgpu_memory_used_bytes"]} == running
        assert all("nodeid" in s for s, _ in m["HostCoreUtilization"])
    else:  # Volcano's vgpu-monitor: no per-container utilisation, no HAMi names, no node label on host series
        assert not m["Device_utilization_desc_of_container"] and not m["hami_vgpu_memory_used_bytes"]
        assert all("nodeid" not in s for s, _ in m["HostCoreUtilization"])
    idle_card = register_cards(plugin, nodes[vs.IDLE_NODE]["metadata"]["annotations"][REGISTER[plugin]])[1][0]
    assert dcgm[idle_card][1] <= 2.0


# ---- a HyperNode frees up -----------------------------------------------------------------------------------

def gang_nodes(sim: SimulatorThread) -> list[str | None]:
    return [p["spec"].get("nodeName") for p in items(sim, "/api/v1/namespaces/default/pods") if job_of(p) == vs.GANG
            and p["status"]["phase"] == "Running"]


@pytest.mark.parametrize("scenario", sorted(PLUGINS))
def test_the_gang_starts_inside_one_rack_once_the_blocker_ends(scenario: str) -> None:
    sim, clock = start(scenario, volcano_release="v1.13")
    try:
        advance(sim, clock, vs.BLOCKER_RUNTIME - 60, step=60)  # the blocker still runs: the gang never starts
        assert gang_nodes(sim) == []
        advance(sim, clock, 120, step=2)
        placed = gang_nodes(sim)
        assert len(placed) == 8
        assert {vs.NODE_RACKS[n] for n in placed if n} == {"rack-2"}
        plugin = PLUGINS[scenario]
        pods = items(sim, "/api/v1/namespaces/default/pods")
        free = free_per_node(plugin, items(sim, "/api/v1/nodes"), pods)
        assert free == pytest.approx(dict(vs.FREE_GPUS_AFTER))
        free_hn, largest = per_hypernode(items(sim, "/apis/topology.volcano.sh/v1alpha1/hypernodes"), free)
        assert free_hn == pytest.approx(dict(vs.HYPERNODE_FREE_GPUS_AFTER))
        assert largest == pytest.approx(dict(vs.LARGEST_GANG_AFTER))
        running = [p for p in pods if p["status"]["phase"] == "Running"]
        physical = sum(max(m / vs.CARD_MIB, c / 100) for p in running
                       for _, m, c in allocated(p["metadata"]["annotations"][ALLOCATED[plugin]]))
        assert physical == pytest.approx(vs.GPU_HOURS_PER_HOUR_AFTER)
    finally:
        sim.stop()


def test_deleting_the_blocker_frees_a_hypernode_for_the_gang() -> None:
    sim, clock = start("vgpu-hami")
    try:
        advance(sim, clock, 120)
        assert gang_nodes(sim) == []
        jobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"
        (blocker,) = [j["metadata"]["name"] for j in items(sim, jobs) if j["metadata"]["name"].startswith(vs.BLOCKER)]
        request = urllib.request.Request(f"{sim.url}{jobs}/{blocker}", method="DELETE")
        urllib.request.urlopen(request, timeout=10).close()
        advance(sim, clock, 60, step=1)  # the garbage collector removes its pod, then the gang fits rack-2
        assert len(gang_nodes(sim)) == 8 and {vs.NODE_RACKS[n] for n in gang_nodes(sim) if n} == {"rack-2"}
    finally:
        sim.stop()


# ---- releases --------------------------------------------------------------------------------------------

def test_the_scenarios_need_v1_12_and_default_to_it() -> None:
    for release in ("v1.9", "v1.11"):
        with pytest.raises(ValueError, match=r"needs Volcano v1\.12 or later"):
            Driver(release_store(release), "vgpu-volcano")
    with pytest.raises(SystemExit, match=r"v1\.12 or later"):
        sim_main(["--scenario", "vgpu-hami", "--volcano-release", "v1.11", "--listen", "127.0.0.1:0"])
    sim = SimulatorThread(scenario="vgpu-hami", auto_tick=False, clock=FakeClock(T0))
    assert HYPERNODES in sim.store.buckets  # no release asked: v1.12 is served
    for release in ("v1.12", "v1.16"):
        Driver(release_store(release), "vgpu-hami")


# ---- the scheduler's reading of the tree ------------------------------------------------------------------

def hypernode(name: str, tier: int, *members: tuple[str, dict[str, Any]]) -> Obj:
    return {"metadata": {"name": name}, "spec": {"tier": tier, "members": [
        {"type": kind, "selector": selector} for kind, selector in members]}}


def test_the_tree_resolves_exact_and_regex_members_and_survives_bad_ones() -> None:
    nodes = ["a-1", "a-2", "b-1", "c-9"]
    tree = resolve([
        hypernode("ra", 1, ("Node", {"regexMatch": {"pattern": "^a-"}})),
        hypernode("rb", 1, ("Node", {"exactMatch": {"name": "b-1"}}), ("Node", {"exactMatch": {"name": "gone"}})),
        hypernode("bad", 1, ("Node", {"regexMatch": {"pattern": "("}})),
        hypernode("top", 2, *(("HyperNode", {"exactMatch": {"name": n}}) for n in ("ra", "rb", "top", "none"))),
        {"metadata": {"name": "no-tier"}, "spec": {}},
    ], nodes)
    assert tree == [Group("bad", 1, frozenset()), Group("ra", 1, frozenset({"a-1", "a-2"})),
                    Group("rb", 1, frozenset({"b-1"})), Group("top", 2, frozenset({"a-1", "a-2", "b-1"}))]
    assert [g.name for g in allowed_groups(tree, 1, {"a-2"})] == ["ra"]
    assert [g.name for g in allowed_groups(tree, 2, {"a-1", "b-1"})] == ["top"]
    assert hard_tier({"mode": "soft", "highestTierAllowed": 2}) is None
    assert hard_tier({"mode": "hard"}) == 1 and hard_tier({"mode": "hard", "highestTierAllowed": 2}) == 2


# ---- Jobs created through the API --------------------------------------------------------------------------

def create_job(sim: SimulatorThread, name: str, replicas: int, limits: dict[str, Any],
               topology: dict[str, Any] | None = None) -> None:
    spec: Obj = {"queue": "gpu", "minAvailable": replicas, "tasks": [{"name": "w", "replicas": replicas, "template": {
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits}}]}}}]}
    if topology:
        spec["networkTopology"] = topology
    body = json.dumps({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                       "metadata": {"name": name, "namespace": "default"}, "spec": spec}).encode()
    request = urllib.request.Request(f"{sim.url}/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs", data=body,
                                     method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def job_pods(sim: SimulatorThread, name: str) -> list[Obj]:
    return [p for p in items(sim, "/api/v1/namespaces/default/pods")
            if p["metadata"]["labels"].get("volcano.sh/job-name") == name]


def test_api_jobs_get_vgpus_and_their_hard_topology_is_kept() -> None:
    """A plain nvidia.com/gpu Job on HAMi nodes gets whole cards as HAMi vGPUs; a hard-topology Job created
    through the API goes inside one allowed HyperNode (5 GPUs: only rack-2, with 7 free, takes it)."""
    sim, clock = start("vgpu-hami")
    try:
        advance(sim, clock, 120)
        create_job(sim, "api-gang", 5, {"nvidia.com/gpu": 1}, {"mode": "hard", "highestTierAllowed": 1})
        advance(sim, clock, 30, step=1)
        pods = job_pods(sim, "api-gang")
        assert len(pods) == 5 and all(p["status"]["phase"] == "Running" for p in pods)
        assert {vs.NODE_RACKS[p["spec"]["nodeName"]] for p in pods} == {"rack-2"}
        devices = [allocated(p["metadata"]["annotations"][ALLOCATED["hami"]]) for p in pods]
        assert all(len(d) == 1 and d[0][1:] == (vs.CARD_MIB, 0) for d in devices)
        assert len({d[0][0] for d in devices}) == 5  # five different cards
    finally:
        sim.stop()
    sim, clock = start("vgpu-volcano")
    try:
        advance(sim, clock, 120)
        create_job(sim, "api-halves", 2, {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 40960,
                                          "volcano.sh/vgpu-cores": 50})
        advance(sim, clock, 30, step=1)
        pods = job_pods(sim, "api-halves")
        assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
        (first,), (second,) = (allocated(p["metadata"]["annotations"][ALLOCATED["volcano-vgpu"]]) for p in pods)
        assert first == second and first[1:] == (40960, 50)  # binpack: two halves on one card
    finally:
        sim.stop()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_prometheus_parses_the_metrics_and_no_series_repeats(played: Played) -> None:
    """The real parser (promtool) reads the whole /metrics; its only complaints may be the lint of the vendors'
    own camelCase names (DCGM's labels, HAMi's legacy metric names, as the exporters write them). No series
    appears twice."""
    sim, _ = played
    with urllib.request.urlopen(sim.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode in (0, 3), complaints
    vendors = ("DCGM_FI_DEV_GPU_UTIL ", "HostCoreUtilization ", "HostGPUMemoryUsage ", "vGPU_device_memory_",
               "Device_utilization_desc_of_container ")
    assert all("camelCase" in line and line.startswith(vendors) for line in complaints), complaints
    series = [line.split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert len(series) == len(set(series)) and any(s.startswith("hami_") for s in series) == (sim.driver.nodes[
        "gpu-11"].spec.device_plugin == "hami")
