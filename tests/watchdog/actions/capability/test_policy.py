"""Policy targets (pure) and the capability settings' validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.watchdog.actions.capability.conftest import node
from volcano_monitor.core.model import parse_node, parse_pod
from volcano_monitor.watchdog.actions.capability.policy import demand_target, pending_requests, percentile, share_target
from volcano_monitor.watchdog.actions.capability.settings import CapabilitySettings, DemandPolicy, SharePolicy
from volcano_monitor.watchdog.config import ConfigError, load

GI = 2**30


def nodes() -> list:
    return [parse_node(n) for n in (
        node("gpu-a", {"pool": "gpu", "zone": "a"}, cpu="64", memory="512Gi", gpus=8),
        node("gpu-b", {"pool": "gpu", "zone": "b"}, cpu="64", memory="512Gi", gpus=8),
        node("gpu-cordoned", {"pool": "gpu"}, gpus=8, unschedulable=True),
        node("gpu-notready", {"pool": "gpu"}, gpus=8, ready=False),
        node("cpu-a", {"pool": "cpu"}, cpu="32", memory="128Gi"),
    )]


def test_share_counts_ready_schedulable_matching_nodes_only() -> None:
    target = share_target(SharePolicy(fraction=0.5, node_selector={"pool": "gpu"}), nodes())
    # gpu-a + gpu-b only: 16 GPUs, 128 cores, 1 TiB; half of each
    assert target.amounts == {"nvidia.com/gpu": 8.0, "cpu": 64.0, "memory": 512 * GI}
    assert target.inputs["nodes"] == ["gpu-a", "gpu-b"]
    assert "2 Ready schedulable node(s) matching pool=gpu" in target.why["nvidia.com/gpu"]


def test_share_selector_needs_every_label_and_empty_selector_takes_all() -> None:
    zone_a = share_target(SharePolicy(fraction=1, node_selector={"pool": "gpu", "zone": "a"},
                                      resources=["nvidia.com/gpu"]), nodes())
    assert zone_a.amounts == {"nvidia.com/gpu": 8.0}
    everything = share_target(SharePolicy(fraction=0.25, resources=["cpu"]), nodes())
    assert everything.amounts == {"cpu": (64 + 64 + 32) * 0.25}


def test_share_of_a_resource_no_node_has_is_zero() -> None:
    target = share_target(SharePolicy(fraction=0.5, node_selector={"pool": "cpu"}), nodes())
    assert target.amounts["nvidia.com/gpu"] == 0.0


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert percentile(values, 0.95) == 19.0  # rank ceil(0.95 * 20) = 19
    assert percentile(values, 1.0) == 20.0
    assert percentile([5.0], 0.95) == 5.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_demand_is_percentile_plus_headroom_plus_pending_within_min_max() -> None:
    buckets = [{"cpu": float(c), "memory": 10.0 * GI, "gpu": 1.0} for c in range(1, 21)]
    policy = DemandPolicy(percentile=0.95, headroom=0.5, min={"memory": "32Gi"}, max={"nvidia.com/gpu": "2"})
    target = demand_target(policy, buckets, {"cpu": 3.0, "nvidia.com/gpu": 4.0})
    assert target.amounts["cpu"] == 19 * 1.5 + 3  # p95 19 cores x 1.5 + 3 pending
    assert target.amounts["memory"] == 32 * GI  # 15Gi raised to the minimum
    assert target.amounts["nvidia.com/gpu"] == 2.0  # 1.5 + 4 pending, lowered to the maximum
    assert "raised to min 32Gi" in target.why["memory"] and "lowered to max 2" in target.why["nvidia.com/gpu"]


def test_demand_without_history_is_unknown_not_zero() -> None:
    target = demand_target(DemandPolicy(min={"cpu": "4"}), [], {"cpu": 8.0})
    assert target.amounts == {"cpu": None, "memory": None, "nvidia.com/gpu": None}
    assert "no usage history in the last 7d" in target.why["cpu"]


def test_pending_demand_counts_unbound_pending_pods_of_the_queue() -> None:
    def pod(name: str, queue: str = "", group: str = "", phase: str = "Pending", node_name: str = "") -> object:
        annotations = {"scheduling.k8s.io/group-name": group} if group else {}
        labels = {"volcano.sh/queue-name": queue} if queue else {}
        spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}]}
        if node_name:
            spec["nodeName"] = node_name
        return parse_pod({"metadata": {"name": name, "namespace": "ns", "labels": labels,
                                       "annotations": annotations}, "spec": spec, "status": {"phase": phase}})

    pods = [pod("a", queue="q"), pod("b", group="pg"), pod("bound", queue="q", node_name="n1"),
            pod("running", queue="q", phase="Running"), pod("other", queue="other")]
    assert pending_requests(pods, "q", {("ns", "pg"): "q"}) == {"cpu": 4.0, "nvidia.com/gpu": 2.0}


def test_quantities_in_settings_are_parsed_and_bad_ones_name_their_key() -> None:
    policy = DemandPolicy(min={"cpu": "250m", "memory": "1.5Gi"}, max={"cpu": 8, "memory": "64Gi"})
    assert policy.min == {"cpu": 0.25, "memory": 1.5 * GI} and policy.max["cpu"] == 8.0
    with pytest.raises(ConfigError) as caught:
        load(None, environ={}, capability={"policies": {"team-a": {"demand": {"min": {"memory": "64GB"}}}}})
    assert str(caught.value).startswith("capability.policies.team-a.demand.min.memory: ")
    assert "invalid quantity '64GB'" in str(caught.value)


@pytest.mark.parametrize(("policy", "message"), [
    ({}, "exactly one of share or demand"),
    ({"share": {"fraction": 0.5}, "demand": {}}, "exactly one of share or demand"),
    ({"share": {"fraction": 1.5}}, "less than or equal to 1"),
    ({"demand": {"min": {"cpu": "8"}, "max": {"cpu": "4"}}}, "min.cpu is above max.cpu"),
    ({"demand": {"resources": ["ephemeral-storage"]}}, "no usage is recorded for ephemeral-storage"),
    ({"demand": {"min": {"cpu": "-1"}}}, "must not be negative"),
])
def test_invalid_policies_are_refused(policy: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        CapabilitySettings(policies={"q": policy})


def test_defaults_are_safe() -> None:
    settings = CapabilitySettings()
    assert (settings.enabled, settings.mode, settings.reconcile_interval_seconds, settings.max_step_fraction,
            settings.cooldown_seconds, settings.tolerance_fraction) == (False, "dry-run", 60, 0.25, 900, 0.05)
    assert SharePolicy(fraction=0.5).resources == ["cpu", "memory", "nvidia.com/gpu"]
