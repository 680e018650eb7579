from __future__ import annotations

from pathlib import Path

from tests.exporter.harness import start_exporter
from tests.exporter.scrape import parse, select
from tests.simtools import wait_for
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.sharding import fnv1a_64, shard_of
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.runtime import SimulatorThread


def test_fnv1a_64_matches_the_reference_vectors() -> None:
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_shards_partition_the_objects(scenario_sim: SimulatorThread, tmp_path: Path,
                                      exporters: list[Exporter]) -> None:
    shards = [start_exporter(scenario_sim, tmp_path / str(i), shard=i, total_shards=3) for i in range(3)]
    exporters.extend(shards)
    scrapes = [parse(e.scrape()) for e in shards]
    pods = scenario_sim.call(scenario_sim.store.objects, R.PODS)
    for family, kind in (("volcano_pod_info", R.PODS), ("volcano_job_info", R.JOBS),
                         ("volcano_podgroup_info", R.PODGROUPS)):
        per_shard = [set(select(s, family)) for s in scrapes]
        everything = scenario_sim.call(scenario_sim.store.objects, kind)
        assert sum(map(len, per_shard)) == len(set().union(*per_shard)) == len(everything), family
    for pod in pods:  # each pod is on the shard its UID hashes to
        assert select(scrapes[shard_of(pod["metadata"]["uid"], 3)], "volcano_pod_info",
                      pod=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
    assert select(scrapes[0], "volcano_queue_info")
    assert not select(scrapes[1], "volcano_queue_info") and not select(scrapes[2], "volcano_queue_info")
    # Kubeflow pods on shards that do not own their PodGroup are still attributed to its queue.
    kubeflow = [p for p in pods if "volcano.sh/job-name" not in (p["metadata"].get("labels") or {})]
    assert kubeflow
    for pod in kubeflow:
        s = scrapes[shard_of(pod["metadata"]["uid"], 3)]
        info = select(s, "volcano_pod_info", pod=pod["metadata"]["name"])
        assert dict(next(iter(info)))["queue"] != ""


def test_namespaces_limit_namespaced_kinds(scenario_sim: SimulatorThread, tmp_path: Path,
                                           exporters: list[Exporter]) -> None:
    exporter = start_exporter(scenario_sim, tmp_path, namespaces=["team-a", "team-b"])
    exporters.append(exporter)
    s = parse(exporter.scrape())
    namespaces = {dict(k)["namespace"] for k in select(s, "volcano_pod_info")}
    assert namespaces and namespaces <= {"team-a", "team-b"}
    assert {dict(k)["namespace"] for k in select(s, "volcano_job_info")} <= {"team-a", "team-b"}
    assert select(s, "volcano_queue_info")  # cluster-scoped kinds are not limited


def test_each_shard_observes_the_waits_of_its_own_jobs(tmp_path: Path, exporters: list[Exporter]) -> None:
    """The wait histograms of the shards add up to the unsharded exporter's, each job observed once."""
    # Ticked only once every exporter has started: none may miss a job that turned Running before it did.
    with SimulatorThread(scenario="queue-wait", speed=20, auto_tick=False) as sim:
        whole = start_exporter(sim, tmp_path / "whole")
        shards = [start_exporter(sim, tmp_path / str(i), shard=i, total_shards=2) for i in range(2)]
        exporters.extend([whole, *shards])

        def waits(exporter: Exporter) -> float:
            return sum(select(parse(exporter.scrape()), "volcano_queue_job_wait_duration_seconds_count",
                              queue="fifo").values())

        def all_observed() -> bool:
            sim.tick()
            return waits(whole) == 30

        wait_for(all_observed, timeout=60, interval=0.1)
        wait_for(lambda: sum(map(waits, shards)) == 30, timeout=5, interval=0.2)
        assert all(0 < waits(s) < 30 for s in shards)  # split between them, not all on one
