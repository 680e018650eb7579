"""GpuStranded and NodeHot: the arithmetic on hand-made nodes and pods, the GPU-hours a new leader carries on
(SQLite and PostgreSQL), and the whole watchdog against the simulator's `node-pressure` scenario."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import client_for, wait_for
from tests.watchdog.harness import FAST_DETECTORS, alerts, fast_settings, start_watchdog
from volcano_monitor.core.model import parse_job, parse_node, parse_pod
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.actions.notify.describe import reasons
from volcano_monitor.watchdog.config import ConfigError, load
from volcano_monitor.watchdog.findings.detectors.hot import NodeHotDetector
from volcano_monitor.watchdog.findings.detectors.settings import GpuStrandedSettings, NodeHotSettings
from volcano_monitor.watchdog.findings.detectors.stranded import (
    GpuStrandedDetector,
    node_load,
    render_stranded_metrics,
    stranded_gpus,
)
from volcano_monitor.watchdog.runtime.app import Intervals, Watchdog
from volcano_monitor.watchdog.sources.node_metrics import NodeMetricsCollector, parse_node_metrics
from volcano_monitor.watchdog.state.alerts import AlertBook
from volcano_monitor.watchdog.state.cluster import ClusterIndex
from volcano_monitor.watchdog.state.db.models import Alert
from volcano_monitor.watchdog.state.nodes import NodePodCache, NodeTable, NodeUsage, pods_by_node
from volcano_monitor.watchdog.state.samples import UsageSample
from volcano_monitor.watchdog.state.signals import GPU_STRANDED, NODE_HOT

GI = 2**30


def node(name: str, cpu: float, memory_gi: float, gpus: int = 0, ready: bool = True) -> Any:
    allocatable = {"cpu": str(cpu), "memory": f"{memory_gi}Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return parse_node({"metadata": {"name": name, "uid": f"uid-{name}"},
                       "status": {"allocatable": allocatable, "capacity": allocatable,
                                  "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def pod(name: str, node_name: str, cpu: float, memory_gi: float, gpus: int = 0, queue: str = "batch",
        phase: str = "Running") -> Any:
    requests: dict[str, str] = {"cpu": str(cpu), "memory": f"{memory_gi}Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    return parse_pod({
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}",
                     "labels": {"volcano.sh/job-name": name.rsplit("-", 1)[0], "volcano.sh/queue-name": queue}},
        "spec": {"nodeName": node_name, "schedulerName": "volcano",
                 "containers": [{"name": "main", "resources": {"requests": requests}}]},
        "status": {"phase": phase}})


def cluster(nodes: list[Any], pods: list[Any]) -> tuple[NodeTable, ClusterIndex]:
    table, index = NodeTable(), ClusterIndex()
    for n in nodes:
        table.on_node("ADDED", n)
    for p in pods:
        index.on_pod("ADDED", p)
    return table, index


def stranded_on(nodes: list[Any], pods: list[Any], settings: GpuStrandedSettings | None = None) -> dict[str, int]:
    table, index = cluster(nodes, pods)
    by_node = pods_by_node(index)
    return {n.name: stranded_gpus(node_load(n, by_node.get(n.name, [])), settings or GpuStrandedSettings())
            for n in table.nodes()}


# ---- the arithmetic ------------------------------------------------------------------------------------------


def test_cpu_only_pods_filling_a_gpu_node_strand_its_free_gpus() -> None:
    found = stranded_on([node("g1", 32, 128, gpus=4)], [pod(f"etl-{i}", "g1", 10, 24) for i in range(3)])
    assert found == {"g1": 4}  # 2 cores left: not one 4-core GPU pod fits


def test_an_idle_gpu_node_strands_nothing() -> None:
    assert stranded_on([node("g2", 32, 128, gpus=4)], []) == {"g2": 0}


def test_cpu_held_by_gpu_pods_is_not_hostage_taking() -> None:
    # One GPU pod takes 30 cores: the other 3 GPUs are unusable, but no CPU-only pod is the cause.
    assert stranded_on([node("g1", 32, 128, gpus=4)], [pod("big-0", "g1", 30, 24, gpus=1)]) == {"g1": 0}


def test_partly_stranded_node_counts_only_the_gpus_the_cpu_only_pods_keep() -> None:
    # 8 GPUs, 64 cores; CPU-only pods hold 56 -> 8 cores free: 2 GPU pods fit, 6 GPUs are hostage.
    found = stranded_on([node("g1", 64, 512, gpus=8)], [pod(f"etl-{i}", "g1", 14, 8) for i in range(4)])
    assert found == {"g1": 6}
    # memory too: 8 GPUs need 128Gi; CPU-only pods hold 500 of 512Gi
    found = stranded_on([node("g1", 64, 512, gpus=8)], [pod("mem-0", "g1", 1, 500)])
    assert found == {"g1": 8}


def test_finished_pods_hold_nothing_and_the_shape_is_configurable() -> None:
    done = [pod(f"etl-{i}", "g1", 10, 24, phase="Succeeded") for i in range(3)]
    assert stranded_on([node("g1", 32, 128, gpus=4)], done) == {"g1": 0}
    small = GpuStrandedSettings.model_validate({"cpu_per_gpu": "1", "memory_per_gpu": "4Gi"})  # 2 GPU pods fit
    assert stranded_on([node("g1", 32, 128, gpus=4)], [pod(f"etl-{i}", "g1", 10, 24) for i in range(3)],
                       small) == {"g1": 2}


def test_settings_are_validated_with_the_key_named() -> None:
    with pytest.raises(ConfigError, match=r"detectors\.gpu_stranded\.memory_per_gpu.*16GB"):
        load(None, environ={}, detectors={"gpu_stranded": {"memory_per_gpu": "16GB"}})
    with pytest.raises(ConfigError, match=r"critical_gpu_hours \(1\) must not be below warning_gpu_hours \(5\)"):
        load(None, environ={}, detectors={"gpu_stranded": {"warning_gpu_hours": 5, "critical_gpu_hours": 1}})
    with pytest.raises(ConfigError, match=r"detectors\.node_hot\.threshold"):
        load(None, environ={}, detectors={"node_hot": {"threshold": 0}})
    settings = load(None, environ={"VOLCANO_WATCHDOG_DETECTORS__GPU_STRANDED__CPU_PER_GPU": "3500m"})
    assert settings.detectors.gpu_stranded.cpu_per_gpu == 3.5


def test_node_metrics_list_is_parsed_and_malformed_items_are_skipped() -> None:
    body = {"items": [
        {"metadata": {"name": "n1"}, "timestamp": "2026-01-01T00:00:00Z", "usage": {"cpu": "15500m", "memory": "10Gi"}},
        {"metadata": {"name": "n2"}, "timestamp": "2026-01-01T00:00:00Z", "usage": {"cpu": "lots"}},
        {"metadata": {}, "timestamp": "2026-01-01T00:00:00Z", "usage": {"cpu": "1"}},
        "garbage",
    ]}
    usage, skipped = parse_node_metrics(body)
    assert usage == {"n1": NodeUsage(datetime(2026, 1, 1, tzinfo=UTC).timestamp(), 15.5, 10 * GI)}
    assert skipped == 3


def test_node_hot_lists_pods_by_priority_class_and_usage() -> None:
    table, index = cluster([node("c1", 16, 64), node("c2", 16, 64)],
                           [pod("serve-0", "c1", 6, 8), pod("batch-0", "c1", 6, 8), pod("calm-0", "c2", 6, 8)])
    now = time.time()
    table.set_usage({"c1": NodeUsage(now, 15.3, 20 * GI), "c2": NodeUsage(now, 8.0, 20 * GI)}, now)
    table.add_samples([UsageSample(now, "team-a", "serve-0", "main", 7.5, 4 * GI),
                       UsageSample(now, "team-a", "batch-0", "main", 7.4, 4 * GI)])
    signals = NodeHotDetector(NodeHotSettings(), table, index).check(now)
    assert [s.subject for s in signals] == ["c1"]  # c2 uses half: not hot
    details = signals[0].details
    assert details["resources"]["cpu"]["used_ratio"] == pytest.approx(15.3 / 16, abs=1e-4)
    assert details["resources"]["cpu"]["requested"] == 12
    assert [p["pod"] for p in details["pods"]] == ["serve-0", "batch-0"]  # same class: heavier first
    # Stale NodeMetrics state nothing.
    table.set_usage({"c1": NodeUsage(now - 3600, 15.3, 20 * GI)}, now)
    assert NodeHotDetector(NodeHotSettings(), table, index).check(now) == []


def test_node_hot_can_sum_the_pods_usage_where_there_is_no_metrics_server() -> None:
    table, index = cluster([node("c1", 16, 64)], [pod("serve-0", "c1", 6, 8), pod("batch-0", "c1", 6, 8)])
    now = time.time()
    table.add_samples([UsageSample(now, "team-a", "serve-0", "main", 7.5, 4 * GI),
                       UsageSample(now, "team-a", "serve-0", "sidecar", 0.2, GI),
                       UsageSample(now, "team-a", "batch-0", "main", 7.0, 4 * GI)])
    settings = NodeHotSettings(source="pods")
    signals = NodeHotDetector(settings, table, index).check(now)
    assert [s.subject for s in signals] == ["c1"]
    assert signals[0].details["resources"]["cpu"]["used"] == pytest.approx(14.7)
    assert signals[0].details["pods"][0]["cpu_used_cores"] == pytest.approx(7.7)  # both containers
    assert NodeHotDetector(NodeHotSettings(), table, index).check(now) == []  # no NodeMetrics polled


def test_a_deleted_pods_usage_is_forgotten_at_once(engine: Engine, database_url: str) -> None:
    """The watchdog's observer tells the nodes' view when a pod is deleted: the 15-minute TTL alone kept
    every pod deleted in that time (35,000 in bench/soak.py's compressed day)."""
    watchdog = Watchdog(load(None, environ={}, database_url=database_url), engine, api=None)
    now = time.time()
    watchdog.nodes.add_samples([UsageSample(now, "team-a", "serve-0", "main", 7.5, 4 * GI),
                                UsageSample(now, "team-a", "batch-0", "main", 7.0, 4 * GI)])
    serve = pod("serve-0", "c1", 6, 8)
    watchdog.observer.observe("pods", "ADDED", (serve, ""))
    watchdog.observer.observe("pods", "DELETED", (serve, ""))
    assert watchdog.nodes.pod_usage("team-a", "serve-0") is None
    usage = watchdog.nodes.pod_usage("team-a", "batch-0")
    assert usage is not None and usage.cpu_cores == 7.0


def test_the_alert_message_names_the_pods() -> None:
    table, index = cluster([node("g1", 32, 128, gpus=4)], [pod(f"etl-{i}", "g1", 10, 24) for i in range(3)])
    signal = GpuStrandedDetector(GpuStrandedSettings(), table, index)._signal(
        node_load(table.nodes()[0], pods_by_node(index)["g1"]), 4, _episode())
    lines = reasons(GPU_STRANDED, "g1", signal.details)
    assert lines == tuple(f"team-a/etl-{i} (queue batch): 10 cores, 24Gi, no GPU" for i in range(3))


def _episode() -> Any:
    from volcano_monitor.watchdog.findings.detectors.stranded import _Episode
    return _Episode(0.0, 0.0, 0.0)


def test_pod_views_are_reused_until_the_pod_or_its_job_changes() -> None:
    _, index = cluster([node("c1", 16, 64)], [pod("etl-0", "c1", 6, 8)])
    cache = NodePodCache()
    first = cache.by_node(index, 1.0)["c1"][0]
    assert first.priority_class == "" and cache.by_node(index, 1.0)["c1"][0] is first
    assert cache.by_node(index, 2.0)["c1"][0] is first  # nothing changed: the same view
    index.on_job("ADDED", parse_job({"metadata": {"name": "etl", "namespace": "team-a", "uid": "j1"},
                                     "spec": {"queue": "batch", "priorityClassName": "low-priority"}}))
    assert cache.by_node(index, 3.0)["c1"][0].priority_class == "low-priority"  # the Job came later
    index.on_pod("MODIFIED", pod("etl-0", "c1", 6, 8, phase="Succeeded"))
    assert cache.by_node(index, 4.0) == {}


# ---- GPU-hours across checks and leaders (SQLite and PostgreSQL) -----------------------------------------


def test_gpu_hours_grow_set_the_severity_and_carry_over_to_a_new_leader(engine: Engine) -> None:
    table, index = cluster([node("g1", 32, 128, gpus=4), node("g2", 32, 128, gpus=4)],
                           [pod(f"etl-{i}", "g1", 10, 24, queue="etl") for i in range(3)])
    settings = GpuStrandedSettings(window_seconds=60, warning_gpu_hours=0.2, critical_gpu_hours=0.3)
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    book = AlertBook()

    def check(detector: GpuStrandedDetector, at: datetime) -> Alert:
        with Session(engine) as session, session.begin():
            book.apply_round(GpuStrandedDetector.KINDS, detector.check(session, at), session, at)
        with Session(engine) as session:
            rows = list(session.scalars(select(Alert).where(Alert.kind == GPU_STRANDED)))
        assert len(rows) == 1, rows  # one episode, whatever the number of checks
        return rows[0]

    first = GpuStrandedDetector(settings, table, index)
    assert check(first, t0).state == "pending"
    assert first.stranded == {"g1": 4, "g2": 0}
    row = check(first, t0 + timedelta(seconds=120))  # 4 GPUs x 120 s = 0.133 GPU-hours
    assert (row.state, row.severity, row.subject, row.queue) == ("firing", "info", "g1", "etl")
    assert row.details["stranded_gpu_hours"] == pytest.approx(4 * 120 / 3600, abs=1e-4)
    assert sorted(p["pod"] for p in row.details["pods"]) == ["etl-0", "etl-1", "etl-2"]
    assert "etl-0" in row.summary and "queues etl" in row.summary
    # The same instant again (a retried batch) adds nothing.
    assert check(first, t0 + timedelta(seconds=120)).details["stranded_gpu_hours"] == pytest.approx(4 * 120 / 3600,
                                                                                                     abs=1e-4)
    # A new leader (fresh memory, same database) continues the integral: 4 x 200 s more = 0.356 -> critical.
    second = GpuStrandedDetector(settings, table, index)
    book = AlertBook()
    with Session(engine) as session:
        book.load(session)
    row = check(second, t0 + timedelta(seconds=320))
    assert row.details["stranded_gpu_hours"] == pytest.approx(4 * 320 / 3600, abs=1e-4)
    assert row.severity == "critical"
    assert re.search(r'volcano_watchdog_node_stranded_gpus\{node="g1"\} 4\n', render_stranded_metrics(second))
    # The CPU-only pods leave: resolved, gauge 0.
    for i in range(3):
        index.on_pod("DELETED", pod(f"etl-{i}", "g1", 10, 24))
    assert check(second, t0 + timedelta(seconds=340)).state == "resolved"
    assert second.stranded == {"g1": 0, "g2": 0}


# ---- against the simulator (SQLite and PostgreSQL) -------------------------------------------------------

SPEED = 20  # scenario seconds per real second: cpu-etl holds gpu-node-01 for 200 s = 10 s real


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(scenario="node-pressure", speed=SPEED, tick_interval=0.1) as running:
        yield running


def node_settings(database_url: str) -> Any:
    return fast_settings(database_url, detectors={
        **FAST_DETECTORS, "gpu_stranded": {"window_seconds": 1},
        "node_hot": {"window_seconds": 1, "interval_seconds": 0.3}})


def kind_alerts(engine: Engine, kind: str) -> list[Alert]:
    return [a for a in alerts(engine) if a.kind == kind]


def test_node_pressure_scenario_raises_gpu_stranded_and_node_hot_on_the_right_nodes(
        sim: SimulatorThread, engine: Engine, database_url: str, tmp_path: Path) -> None:
    watchdog = start_watchdog(sim, engine, tmp_path, node_settings(database_url))
    try:
        def firing(kind: str, subject: str) -> Alert | None:
            return next((a for a in kind_alerts(engine, kind) if a.subject == subject and a.state == "firing"), None)

        wait_for(lambda: firing(GPU_STRANDED, "gpu-node-01") is not None, timeout=20, interval=0.2)
        stranded = firing(GPU_STRANDED, "gpu-node-01")
        assert stranded is not None
        assert stranded.details["stranded_gpus"] == 4 and stranded.queue == "default"
        assert stranded.details["queues"] == ["default"]
        assert len(stranded.details["pods"]) == 3
        assert all(p["pod"].startswith("cpu-etl-") and p["cpu_cores"] == 10 for p in stranded.details["pods"])
        metrics = render_stranded_metrics(watchdog.stranded)
        assert 'volcano_watchdog_node_stranded_gpus{node="gpu-node-01"} 4\n' in metrics
        assert 'volcano_watchdog_node_stranded_gpus{node="gpu-node-02"} 0\n' in metrics

        wait_for(lambda: firing(NODE_HOT, "hot-node-01") is not None, timeout=20, interval=0.2)
        hot = firing(NODE_HOT, "hot-node-01")
        assert hot is not None
        cpu = hot.details["resources"]["cpu"]
        assert cpu["used_ratio"] >= 0.9 and cpu["requested"] == 12 and cpu["allocatable"] == 16
        assert {p["priority_class"] for p in hot.details["pods"]} == {"high-priority", "low-priority"}
        seen: Alert = hot

        def pods_measured() -> bool:
            nonlocal seen
            seen = firing(NODE_HOT, "hot-node-01") or seen
            return all(p["cpu_used_cores"] for p in seen.details["pods"])

        wait_for(pods_measured, timeout=10, interval=0.2)
        hot = seen
        assert all(p["cpu_used_cores"] > p["cpu_request_cores"] for p in hot.details["pods"])  # overcommit

        # cpu-etl completes (200 scenario s): its pods leave gpu-node-01 and the alert resolves.
        wait_for(lambda: all(a.state == "resolved" for a in kind_alerts(engine, GPU_STRANDED)), timeout=30,
                 interval=0.3)
        assert 'volcano_watchdog_node_stranded_gpus{node="gpu-node-01"} 0\n' in render_stranded_metrics(
            watchdog.stranded)
        # Never for the idle GPU node, nor NodeHot for the GPU nodes.
        assert {a.subject for a in kind_alerts(engine, GPU_STRANDED)} == {"gpu-node-01"}
        assert {a.subject for a in kind_alerts(engine, NODE_HOT)} == {"hot-node-01"}
    finally:
        watchdog.stop()


class Follower:
    def is_leader(self) -> bool:
        return False


def test_a_follower_neither_polls_node_metrics_nor_writes_node_alerts(
        sim: SimulatorThread, engine: Engine, database_url: str, tmp_path: Path) -> None:
    watchdog = Watchdog(node_settings(database_url), engine, client_for(sim, tmp_path),
                        Intervals(checks=0.2, waste=0.4, flush=0.25, rollup_bucket=1),
                        informer_backoff=(0.02, 0.2), leader=Follower()).start()
    try:
        wait_for(watchdog.index_synced, timeout=10)
        wait_for(lambda: len(watchdog.nodes.nodes()) == 3, timeout=10)  # it watches, ...
        time.sleep(3)  # ... long enough for the leader's alerts above (window 1 s, checks every 0.2 s)
        assert alerts(engine) == []
        assert watchdog.nodes.usage_at is None and watchdog.stranded is not None and watchdog.stranded.stranded == {}
    finally:
        watchdog.stop()


def test_a_restarted_watchdog_continues_the_open_node_alerts(engine: Engine, database_url: str,
                                                              tmp_path: Path) -> None:
    """Until the restarted watchdog knows the nodes and pods, it must not judge them: the alerts that fired
    before the restart stay the same episodes (same row, never resolved) and the GPU-hours go on."""
    with SimulatorThread(scenario="node-pressure", speed=4, tick_interval=0.1) as slow:  # cpu-etl: 50 s real
        settings = node_settings(database_url)
        first = start_watchdog(slow, engine, tmp_path, settings)
        try:
            wait_for(lambda: {(a.kind, a.state) for a in alerts(engine)} >= {(GPU_STRANDED, "firing"),
                                                                           (NODE_HOT, "firing")},
                     timeout=25, interval=0.2)
        finally:
            first.stop()
        before = {a.kind: a for a in alerts(engine) if a.kind in (GPU_STRANDED, NODE_HOT)}
        hours_before = before[GPU_STRANDED].details["stranded_gpu_hours"]
        second = start_watchdog(slow, engine, tmp_path, settings)
        try:
            wait_for(lambda: any(a.kind == GPU_STRANDED and a.details["stranded_gpu_hours"] > hours_before
                                 for a in alerts(engine)), timeout=15, interval=0.2)
        finally:
            second.stop()
    after = [a for a in alerts(engine) if a.kind in (GPU_STRANDED, NODE_HOT)]
    assert sorted((a.id, a.kind, a.state) for a in after) == sorted((a.id, a.kind, "firing") for a in before.values())


def test_node_metrics_collector_reads_the_simulator_and_counts_failures(sim: SimulatorThread, tmp_path: Path) -> None:
    api = client_for(sim, tmp_path)
    collector = NodeMetricsCollector(api, timeout=2)
    wait_for(lambda: len(collector.collect() or {}) == 3, timeout=10, interval=0.2)
    usage = collector.collect()
    assert usage is not None and set(usage) == {"gpu-node-01", "gpu-node-02", "hot-node-01"}
    assert usage["gpu-node-02"].cpu_cores == pytest.approx(0.35)  # idle: the simulated node's own daemons
    sim.stop_http()
    try:
        assert collector.collect() is None and collector.errors["connection"] == 1
    finally:
        sim.start_http()
