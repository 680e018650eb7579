"""watchdog.findings.recommendations.policy: limits as the VPA sets them, each cap (and that it is named), the
confidence gate, policy selection, and a stored spec that is garbage. Then the spec as the running watchdog learns it:
a real pod, queue and node through the observer into the book."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from tests.exporter import objects
from volcano_monitor.core.kube.informer import ADDED
from volcano_monitor.core.model import parse_node, parse_podgroup, parse_queue
from volcano_monitor.watchdog.config import ConfigError, load
from volcano_monitor.watchdog.findings.recommendations.formulas import Estimate
from volcano_monitor.watchdog.findings.recommendations.output import render, workload_patches
from volcano_monitor.watchdog.findings.recommendations.policy import (
    NOT_ENOUGH_HISTORY,
    OK,
    ContainerSpec,
    finish,
    gpu_resources,
    history_text,
    policy_for,
    proportional_limit,
)
from volcano_monitor.watchdog.findings.recommendations.settings import ContainerPolicy, Recommendations
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate

GiB = 2**30
KEY = ("team-a", "train", "worker", "main")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
WEEK = Estimate(2.0, 1.5, 2.5, 8 * GiB, 6 * GiB, 10 * GiB, 1.0, False)  # full confidence
HOUR = Estimate(2.0, 0.5, 50.0, 8 * GiB, 2 * GiB, 200 * GiB, 1 / 24 / 7, False)  # an hour: the bound is 25x


def done(est: Estimate = WEEK, spec: ContainerSpec | None = None, settings: Recommendations | None = None,
         samples: int = 10080) -> Any:
    last = T0 + timedelta(minutes=samples - 1)
    return finish(KEY, est, settings or Recommendations(), spec, samples=samples, first=T0, last=last)


def test_limits_keep_the_containers_ratio_and_none_where_it_had_none() -> None:
    rec = done(spec=ContainerSpec("q", {"cpu": 1.0, "memory": 4 * GiB}, {"memory": 12 * GiB}))
    assert rec.status == OK and rec.message == "" and rec.capped_by == {}
    assert rec.memory_limit_bytes == 3 * rec.memory_target_bytes and rec.cpu_limit_cores is None
    assert rec.notes == ["no cpu limit: the container sets none"]
    assert rec.current_requests == {"cpu": 1.0, "memory": 4 * GiB} and rec.current_limits == {"memory": 12 * GiB}
    # a limit without a request: Kubernetes takes the limit as the request, so the limit is the request
    rec = done(spec=ContainerSpec("q", {}, {"cpu": 4.0}))
    assert rec.cpu_limit_cores == rec.cpu_target_cores == 2.0
    assert proportional_limit(2.0, 1.0, 1.5) == 3.0 and proportional_limit(2.0, 1.0, None) is None


def test_unknown_current_limits_give_no_limit_and_say_so() -> None:
    rec = done(spec=None)
    assert rec.cpu_limit_cores is None and rec.memory_limit_bytes is None and rec.current_limits is None
    assert "unknown" in rec.notes[0] and rec.status == OK


def test_below_min_confidence_no_patch_but_a_reason_and_never_the_bound_as_limit() -> None:
    spec = ContainerSpec("q", {"memory": 4 * GiB}, {"memory": 8 * GiB})
    rec = done(HOUR, spec, samples=60)
    assert rec.status == NOT_ENOUGH_HISTORY and not rec.patchable
    assert rec.message == "not enough history (60 samples over 59m)"
    assert rec.memory_limit_bytes == 2 * rec.memory_target_bytes < rec.memory_upper_bytes
    assert done(HOUR, spec, Recommendations(min_confidence=0), samples=60).status == OK
    assert history_text(3000, T0, T0 + timedelta(days=2, hours=12)) == "not enough history (3000 samples over 2.5 days)"
    assert history_text(200, T0, T0 + timedelta(minutes=199)) == "not enough history (200 samples over 3h 19m)"
    assert history_text(88, T0, T0 + timedelta(seconds=44)) == "not enough history (88 samples over 44s)"
    assert history_text(1, T0, T0) == history_text(0, None, None).replace("(0", "(1") == \
        "not enough history (1 samples over 0s)"


@pytest.mark.parametrize(("spec", "policy", "capped_by", "memory"), [
    (ContainerSpec("q"), ContainerPolicy(max_allowed={"memory": "4Gi"}), "max_allowed", 4 * GiB),
    (ContainerSpec("q"), ContainerPolicy(min_allowed={"memory": "16Gi"}), "min_allowed", 16 * GiB),
    (ContainerSpec("q", queue_capability={"memory": 5 * GiB}), None, "queue_capability", 5 * GiB),
    (ContainerSpec("q", node_allocatable={"memory": 6 * GiB}), None, "node_allocatable", 6 * GiB),
    # the lowest maximum wins, and is the one named
    (ContainerSpec("q", queue_capability={"memory": 7 * GiB}, node_allocatable={"memory": 6 * GiB}),
     ContainerPolicy(max_allowed={"memory": "6.5Gi"}), "node_allocatable", 6 * GiB),
])
def test_each_cap_holds_the_request_and_the_range_and_is_named(spec: ContainerSpec, policy: ContainerPolicy | None,
                                                               capped_by: str, memory: float) -> None:
    settings = Recommendations(container_policies=[policy] if policy else [])
    rec = done(spec=spec, settings=settings)
    assert rec.memory_target_bytes == memory and rec.capped_by == {"memory": capped_by}
    assert rec.memory_lower_bytes <= rec.memory_target_bytes <= rec.memory_upper_bytes
    if capped_by != "min_allowed":
        assert rec.memory_upper_bytes == memory  # the range stays within what can be given
    assert rec.cpu_target_cores == 2.0  # the other resource is untouched


def test_a_limit_past_the_largest_node_is_held_to_it() -> None:
    spec = ContainerSpec("q", {"cpu": 1.0}, {"cpu": 8.0}, node_allocatable={"cpu": 15.0})
    rec = done(spec=spec)
    assert rec.cpu_target_cores == 2.0 and rec.cpu_limit_cores == 15.0
    assert rec.capped_by == {"cpu_limit": "node_allocatable"}


def test_the_most_specific_policy_applies() -> None:
    anywhere = ContainerPolicy(max_allowed={"cpu": 1})
    team = ContainerPolicy(namespace="team-*", max_allowed={"cpu": 2})
    main = ContainerPolicy(namespace="team-a", container="main", max_allowed={"cpu": 3})
    other = ContainerPolicy(queue="gpu", container="main", max_allowed={"cpu": 4})
    policies = [anywhere, team, main, other]
    assert policy_for(policies, "team-a", "q", "train", "main") is main
    assert policy_for(policies, "team-b", "q", "train", "main") is team
    assert policy_for(policies, "prod", "q", "train", "side") is anywhere
    assert policy_for(policies, "prod", "gpu", "train", "main") is other
    assert policy_for([team], "prod", "q", "train", "main") is None
    with pytest.raises(ValueError, match="below min_allowed"):
        ContainerPolicy(min_allowed={"cpu": 2}, max_allowed={"cpu": 1})


@pytest.mark.parametrize("data", ["x", [], {"queue": 3}, {"requests": {"cpu": "2"}}, {"limits": {"cpu": -1}},
                                  {"requests": {"cpu": float("nan")}}, {"requests": []}, {"limits": {"cpu": True}}])
def test_a_malformed_stored_spec_is_none(data: Any) -> None:
    assert ContainerSpec.from_json(data) is None


def test_the_running_watchdog_learns_requests_limits_queue_and_caps(tmp_path: Path) -> None:
    """A pod, its PodGroup, its Queue and a Node as the informers deliver them: the book has the
    container's spec with the queue's capability and the node's allocatable."""
    settings = load(None, environ={}, database_url=f"sqlite:///{tmp_path / 'w.db'}")
    watchdog = Watchdog(settings, make_engine(settings.database_url), None)
    queue = objects.full_queue()
    queue["metadata"]["name"] = "nlp"
    queue["spec"]["capability"] = {"cpu": "64", "memory": "256Gi"}
    node = objects.full_node()
    node["status"]["allocatable"] = {"cpu": "32", "memory": "128Gi"}
    watchdog.nodes.on_node(ADDED, parse_node(node))
    pod = {"metadata": {"name": "bert-worker-0", "namespace": "nlp", "uid": "p1",
                        "annotations": {"scheduling.k8s.io/group-name": "bert"}},
           "spec": {"schedulerName": "volcano", "containers": [
               {"name": "c", "resources": {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
                                           "limits": {"memory": "8Gi", "nvidia.com/gpu": 1}}},
               {"name": "side", "resources": {}}]},
           "status": {"phase": "Running"}}
    observer = watchdog.observer
    observer.observe("queues", ADDED, parse_queue(queue))
    observer.observe("podgroups", ADDED, parse_podgroup(objects.kubeflow_podgroup()))
    observer.observe("pods", ADDED, watchdog.pod_view(pod))
    spec = watchdog.histograms.spec(("nlp", "bert", "", "c"))
    assert spec == ContainerSpec("nlp", {"cpu": 2.0, "memory": 4 * GiB}, {"memory": 8 * GiB},
                                 {"cpu": 64.0, "memory": 256 * GiB}, {"cpu": 32.0, "memory": 128 * GiB},
                                 {"nvidia.com/gpu": 1.0})
    assert watchdog.histograms.spec(("nlp", "bert", "", "side")) == ContainerSpec(
        "nlp", {}, {}, {"cpu": 64.0, "memory": 256 * GiB}, {"cpu": 32.0, "memory": 128 * GiB})
    # the same pod again changes nothing to write; usage then makes the key dirty with its spec
    observer.observe("pods", "MODIFIED", watchdog.pod_view(pod))
    assert watchdog.histograms.dirty_count() == 0
    watchdog.histograms.add_usage("nlp", "bert", "", "c", T0.timestamp(), 1.0, GiB)
    rec = watchdog.histograms.recommendation("nlp", "bert", "", "c", T0)
    assert rec is not None and rec.memory_limit_bytes == 2 * rec.memory_target_bytes and rec.queue == "nlp"
    assert "GPUs not recommended, kept as requested (nvidia.com/gpu=1): cpu and memory only" in rec.notes
    # retention drops the spec of a container never measured; the pod's next phase notes it again
    migrate(watchdog.engine)
    with Session(watchdog.engine) as session, session.begin():
        watchdog.histograms.forget_idle(session, T0 + timedelta(days=30))
    assert not watchdog.histograms.has_spec(("nlp", "bert", "", "side"))
    assert watchdog.histograms.has_spec(("nlp", "bert", "", "c"))  # measured, not flushed yet: kept
    pod["status"]["phase"] = "Succeeded"
    observer.observe("pods", "MODIFIED", watchdog.pod_view(pod))
    assert watchdog.histograms.has_spec(("nlp", "bert", "", "side"))
    watchdog.engine.dispose()


def test_container_policies_from_the_config_file(tmp_path: Path) -> None:
    """The docs' example as a user writes it, and a bad quantity named by its key (exit code 2 in the CLI)."""
    path = tmp_path / "watchdog.yaml"
    path.write_text("recommendations:\n  min_confidence: 0.5\n  container_policies:\n"
                    "    - max_allowed: {cpu: 32, memory: 256Gi}\n"
                    "    - {namespace: ml, container: trainer, min_allowed: {memory: 8Gi},"
                    " max_allowed: {cpu: 64, memory: 480Gi}}\n")
    settings = load(path, environ={}).recommendations
    assert settings.min_confidence == 0.5
    chosen = policy_for(settings.container_policies, "ml", "q", "bert", "trainer")
    assert chosen is not None and chosen.max_allowed == {"cpu": 64.0, "memory": 480 * GiB}
    assert chosen.min_allowed == {"memory": 8 * GiB}
    path.write_text("recommendations:\n  container_policies:\n    - max_allowed: {memory: lots}\n")
    with pytest.raises(ConfigError, match=r"recommendations\.container_policies\.0\.max_allowed\.memory"):
        load(path, environ={})
    path.write_text("recommendations:\n  container_policies:\n    - max_allowed: {gpu: 1}\n")
    with pytest.raises(ConfigError, match="max_allowed"):
        load(path, environ={})


def test_a_vgpu_container_gets_cpu_and_memory_only_and_says_its_share_is_kept() -> None:
    """HAMi's vGPU (limits only, as its docs write them) and Volcano's: the GPU resources are named in a note,
    stored with the spec, and never part of the patch, which merged into the Job keeps them as they are."""
    hami = gpu_resources((("cpu", 2.0),), (("memory", 8 * GiB), ("nvidia.com/gpu", 1.0), ("nvidia.com/gpucores", 25.0),
                                            ("nvidia.com/gpumem-percentage", 25.0)))
    assert hami == {"nvidia.com/gpu": 1.0, "nvidia.com/gpucores": 25.0, "nvidia.com/gpumem-percentage": 25.0}
    vgpu = gpu_resources((("volcano.sh/vgpu-number", 2.0), ("volcano.sh/vgpu-memory", 8192.0)), ())
    for gpus in (hami, vgpu):
        spec = ContainerSpec("q", {"cpu": 2.0, "memory": 4 * GiB}, {"memory": 8 * GiB}, gpu_requests=gpus)
        assert ContainerSpec.from_json(spec.to_json()) == spec
        rec = done(spec=spec)
        note = [n for n in rec.notes if n.startswith("GPUs not recommended")]
        assert len(note) == 1 and "a vGPU share of a card" in note[0]
        assert all(name in note[0] for name in gpus)
        doc = workload_patches([rec])[0]
        container = doc["patch"]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
        assert {name for part in container["resources"].values() for name in part} == {"cpu", "memory"}
        assert doc["gpu_kept"] == {"worker/main": gpus}
        assert "GPU kept" in render([rec], "table") and "GPU kept" in render([rec], "csv")
    whole = done(spec=ContainerSpec("q", {"cpu": 2.0}, {}, gpu_requests={"nvidia.com/gpu": 8.0}))
    assert "GPUs not recommended, kept as requested (nvidia.com/gpu=8): cpu and memory only" in whole.notes
    cpu_only = done(spec=ContainerSpec("q", {"cpu": 2.0}))
    assert not [n for n in cpu_only.notes if "GPU" in n] and "gpu_kept" not in workload_patches([cpu_only])[0]
    # a spec stored before GPU requests were kept reads as none
    assert ContainerSpec.from_json({"queue": "q", "requests": {"cpu": 1.0}}) == ContainerSpec("q", {"cpu": 1.0})
