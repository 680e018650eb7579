"""`--volcano-release`: each release's kinds are served (others answer 404, discovery included) and
objects carry only the fields its CRD schemas list, as a real API server prunes them."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.simtools import SHARED, FakeClock, client_for
from volcano_monitor.simulator.cli import build_parser
from volcano_monitor.simulator.driver import Driver
from volcano_monitor.simulator.releases import RELEASES, crd_path, load_release, prune, release_name, release_store
from volcano_monitor.simulator.resources import CRONJOBS, HYPERNODES, JOBFLOWS, JOBS, PODGROUPS, QUEUES, ResourceType
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.simulator.store import Store

BY_RELEASE = SHARED / "volcano" / "crds-by-release"
NEWER = (JOBFLOWS, HYPERNODES, CRONJOBS)
ORDER = list(RELEASES)  # oldest first ("v1.9" < "v1.10" as releases, not as strings)


def since(release: str, first: str) -> bool:
    return ORDER.index(release) >= ORDER.index(first)


def shipped(release: str) -> set[str]:
    """The kinds whose CRD the release's directory holds (../crds: the newest, plus v1.15.1's others)."""
    tag = RELEASES[release]
    names = {p.name for p in (BY_RELEASE / tag).glob("*.yaml")} if tag else (
        {p.name for p in (SHARED / "volcano" / "crds").glob("*.yaml")}
        | {p.name for p in (BY_RELEASE / "v1.15.1").glob("*.yaml")})
    return {n.split("_")[1].removesuffix(".yaml") for n in names}


@pytest.mark.parametrize("release", list(RELEASES))
def test_a_release_serves_the_kinds_it_ships(release: str) -> None:
    loaded = load_release(release)
    volcano = {rt.plural for rt in loaded.types if rt.group.endswith("volcano.sh")}
    assert volcano == shipped(release) & {"jobs", "podgroups", "queues", "jobflows", "hypernodes", "cronjobs",
                                                 "commands"}
    assert ("hypernodes" in volcano) == since(release, "v1.12")
    assert ("cronjobs" in volcano) == since(release, "v1.13")
    assert "jobflows" in volcano
    assert "commands" in volcano  # every release's job controller consumes bus Commands
    assert set(loaded.pruners) == {rt for rt in loaded.types if rt.group.endswith("volcano.sh")}


def test_release_names() -> None:
    assert [release_name(t) for t in ("v1.12", "1.12", "v1.12.4", " v1.9 ")] == ["v1.12"] * 3 + ["v1.9"]
    for bad in ("v1.8", "2.0", "latest"):
        with pytest.raises(ValueError):
            release_name(bad)
    assert build_parser().parse_args(["--volcano-release", "1.13.3"]).volcano_release == "v1.13"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--volcano-release", "v0.1"])
    assert build_parser().parse_args([]).volcano_release is None
    assert crd_path("v1.11", CRONJOBS) is None and crd_path("v1.16", CRONJOBS) == BY_RELEASE / "v1.15.1" / \
        "batch.volcano.sh_cronjobs.yaml"


def test_prune_follows_the_schema() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}}}},
        "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"y": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    value = {"a": {"b": 1, "c": 2}, "list": [{"x": "1", "z": 2}], "map": {"k": {"y": "1", "w": 3}},
             "free": {"anything": {"goes": 1}}, "gone": True}
    assert prune(value, schema) == {"a": {"b": 1}, "list": [{"x": "1"}], "map": {"k": {"y": "1"}},
                                    "free": {"anything": {"goes": 1}}}


def played(release: str | None, minutes: int = 40) -> Store:
    store = release_store(release)
    clock = FakeClock(1_800_000_000.0)
    driver = Driver(store, "default", clock=clock)
    driver.setup()
    for _ in range(minutes):
        clock.t += 60
        driver.tick()
    return store


def spec_of(store: Store, rtype: ResourceType, name_part: str) -> dict[str, Any]:
    return next(o["spec"] for o in store.objects(rtype) if name_part in o["metadata"]["name"])


@pytest.mark.parametrize("release", list(RELEASES))
def test_objects_carry_the_fields_of_their_release(release: str) -> None:
    store = played(release)
    queues = {q["metadata"]["name"]: q["spec"] for q in store.objects(QUEUES)}
    assert ("priority" in queues["prod"]) == since(release, "v1.10")
    assert ("dequeueStrategy" in queues["prod"]) == since(release, "v1.14")
    assert all("parent" in spec for name, spec in queues.items() if name != "root")  # in every release
    llama = spec_of(store, PODGROUPS, "llama-pretrain")
    topology, subgroups = since(release, "v1.12"), since(release, "v1.14")
    assert llama.get("networkTopology") == ({"mode": "hard", "highestTierAllowed": 2} if topology else None)
    assert ("subGroupPolicy" in llama) == subgroups
    assert ("networkTopology" in spec_of(store, JOBS, "llama-pretrain")) == topology
    assert (HYPERNODES in store.buckets) == topology
    assert (CRONJOBS in store.buckets) == since(release, "v1.13")
    if HYPERNODES in store.buckets:
        spine = store.get(HYPERNODES, "", "spine")
        assert spine is not None and spine["status"]["nodeCount"] == 9
        assert ("tierName" in spine["spec"]) == subgroups
    if CRONJOBS in store.buckets:
        cron = store.get(CRONJOBS, "team-a", "nightly-report")
        assert cron is not None and cron["status"]["lastScheduleTime"]
        runs = [j for j in store.objects(JOBS) if j["metadata"]["name"].startswith("nightly-report-")]
        assert len(runs) >= 2 and all(j["metadata"]["ownerReferences"][0]["kind"] == "CronJob" for j in runs)
        assert [a["name"] for a in cron["status"].get("active", [])] == [
            j["metadata"]["name"] for j in runs if j["status"]["state"]["phase"] not in ("Completed", "Failed")]
    assert store.get(JOBFLOWS, "ml-platform", "train-pipeline") is not None


def test_without_a_release_nothing_is_pruned_and_no_newer_kind_is_served() -> None:
    store = played(None, minutes=5)
    assert not set(NEWER) & set(store.buckets)
    assert {"priority", "dequeueStrategy"} <= set(spec_of(store, QUEUES, "prod"))
    assert "subGroupPolicy" in spec_of(store, PODGROUPS, "llama-pretrain")


@pytest.fixture(scope="module")
def v111() -> Iterator[SimulatorThread]:
    sim = SimulatorThread(scenario="empty", volcano_release="v1.11").start()
    yield sim
    sim.stop()


def test_a_kind_the_release_lacks_answers_404_everywhere(v111: SimulatorThread, tmp_path: Path) -> None:
    api = client_for(v111, tmp_path)
    custom = client.CustomObjectsApi(api)
    with pytest.raises(client.ApiException) as missing:
        custom.list_cluster_custom_object("topology.volcano.sh", "v1alpha1", "hypernodes")
    assert missing.value.status == 404
    with pytest.raises(client.ApiException) as missing:
        custom.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "cronjobs")
    assert missing.value.status == 404
    assert custom.list_namespaced_custom_object("flow.volcano.sh", "v1alpha1", "default", "jobflows")["items"] == []
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert "flow.volcano.sh" in groups and "topology.volcano.sh" not in groups
    with urllib.request.urlopen(f"{v111.url}/apis/batch.volcano.sh/v1alpha1", timeout=10) as response:
        batch = json.load(response)
    assert {r["name"] for r in batch["resources"]} == {"jobs", "jobs/status"}


def test_the_schemas_come_from_the_crd_files() -> None:
    """A field added to the schema file of a release would be kept: the pruning reads the CRDs."""
    crd = yaml.safe_load((BY_RELEASE / "v1.9.1" / "scheduling.volcano.sh_queues.yaml").read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert "priority" not in props and "parent" in props  # v1.9 queues do have spec.parent
