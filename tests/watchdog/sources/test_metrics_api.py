"""MetricsApiCollector against the simulated API server (real HTTP, pagination, faults) and a tiny
server answering what no API server would (non-JSON, non-objects)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.simtools import client_for
from volcano_monitor.core.kube.config import api_client
from volcano_monitor.simulator.resources import POD_METRICS
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.watchdog.sources.metrics_api import MetricsApiCollector, go_duration
from volcano_monitor.watchdog.state.samples import UsageSample

TS = "2024-05-01T10:00:30Z"
TS_EPOCH = 1714557630.0


def pod_metrics(namespace: str, name: str, containers: list[Any], timestamp: Any = TS) -> dict[str, Any]:
    return {"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": name, "namespace": namespace}, "timestamp": timestamp, "window": "30s",
            "containers": containers}


def usage(name: str, cpu: Any, memory: Any) -> dict[str, Any]:
    return {"name": name, "usage": {"cpu": cpu, "memory": memory}}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorThread]:
    sim = SimulatorThread(auto_tick=False).start()
    objects = [
        pod_metrics("team-a", "train-0", [usage("main", "1500m", "2Gi"), usage("sidecar", "250000000n", "100Mi")]),
        pod_metrics("team-a", "train-1", [usage("main", "2", "1Gi")]),
        pod_metrics("team-b", "etl-0", [usage("main", "0", "512Ki")]),
        # malformed: bad quantity (kept: memory is fine), negative, no usage, no timestamp
        pod_metrics("team-b", "weird-0", [usage("main", "lots", "1Gi"), usage("neg", "-1", "-5Mi"),
                                          {"name": "empty"}, {"usage": {"cpu": "1"}}]),
        pod_metrics("team-b", "weird-1", [usage("main", "1", "1Gi")], timestamp="yesterday"),
        pod_metrics("team-b", "weird-2", "not-a-list"),
    ]
    for obj in objects:
        sim.call(sim.store.upsert, POD_METRICS, obj)
    yield sim
    sim.stop()


def by_key(samples: list[UsageSample]) -> dict[tuple[str, str, str], UsageSample]:
    return {(s.namespace, s.pod, s.container): s for s in samples}


def test_lists_all_namespaces_across_pages(sim: SimulatorThread, tmp_path: Path) -> None:
    collector = MetricsApiCollector(client_for(sim, tmp_path), page_size=2)
    samples = by_key(collector.collect())
    assert samples[("team-a", "train-0", "main")] == UsageSample(TS_EPOCH, "team-a", "train-0", "main", 1.5, 2 * 2**30,
                                                                 window=30.0)
    assert samples[("team-a", "train-0", "sidecar")].cpu_cores == pytest.approx(0.25)
    assert samples[("team-b", "etl-0", "main")].memory_bytes == 512 * 1024
    assert samples[("team-b", "weird-0", "main")] == UsageSample(TS_EPOCH, "team-b", "weird-0", "main", None, 2**30,
                                                                 window=30.0)
    assert set(samples) == {("team-a", "train-0", "main"), ("team-a", "train-0", "sidecar"),
                            ("team-a", "train-1", "main"), ("team-b", "etl-0", "main"), ("team-b", "weird-0", "main")}
    assert collector.errors == {"quantity": 2, "container": 2, "timestamp": 1, "item": 1}
    assert collector.skipped == 5  # neg, two bad containers, the item without timestamp, the one without list
    assert collector.last_success is not None


def test_only_the_given_namespaces(sim: SimulatorThread, tmp_path: Path) -> None:
    collector = MetricsApiCollector(client_for(sim, tmp_path), namespaces=["team-a", "nobody"])
    assert {(s.namespace, s.pod) for s in collector.collect()} == {("team-a", "train-0"), ("team-a", "train-1")}
    assert not collector.errors


def test_server_errors_are_counted_and_the_next_poll_works(sim: SimulatorThread, tmp_path: Path) -> None:
    collector = MetricsApiCollector(client_for(sim, tmp_path), namespaces=["team-a", "team-b"], clock=lambda: 42.0)
    sim.faults.error_code, sim.faults.error_count, sim.faults.error_resource = 500, 1, "pods"
    samples = collector.collect()  # team-a fails, team-b still answers
    assert {s.namespace for s in samples} == {"team-b"}
    assert collector.errors["http_500"] == 1 and collector.last_success is None
    sim.faults.forbidden = ["pods"]
    try:
        assert collector.collect() == []
    finally:
        sim.faults.forbidden = []
    assert collector.errors["http_403"] == 2
    assert len(collector.collect()) == 5
    assert collector.last_success == 42.0


def test_api_server_down(tmp_path: Path) -> None:
    sim = SimulatorThread(auto_tick=False).start()
    api = client_for(sim, tmp_path)
    sim.stop()
    collector = MetricsApiCollector(api, timeout=2)
    assert collector.collect() == []
    assert collector.errors == {"connection": 1}
    assert "Error" in collector.last_error


class _Canned(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("status", "body", "cause"), [
    (200, b"<html>not json</html>", "decode"),
    (200, b"[1, 2, 3]", "decode"),
    (200, b'{"items": {"a": 1}}', "decode"),
    (502, b"bad gateway", "http_502"),
])
def test_garbage_answers(tmp_path: Path, status: int, body: bytes, cause: str) -> None:
    handler = type("Handler", (_Canned,), {"body": body, "status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{server.server_address[1]}")
        collector = MetricsApiCollector(api_client(str(tmp_path / "kubeconfig")))
        assert collector.collect() == []
        assert collector.errors == {cause: 1}
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30.0), ("1m0.5s", 60.5), ("15.001s", 15.001), ("1h2m3s", 3723.0), ("500ms", 0.5), ("0s", 0.0),
    ("", 0.0), ("30", 0.0), ("-5s", 0.0), ("1m banana", 0.0), ("9" * 100 + "s", 0.0),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


def test_non_object_items_are_skipped(tmp_path: Path) -> None:
    good = pod_metrics("a", "p", [usage("c", "1", "1")])
    body = b'{"items": [42, null, "x", {"metadata": 1}, {"metadata": {"name": "p"}}, %s]}' % orjson.dumps(good)
    handler = type("Handler", (_Canned,), {"body": body, "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{server.server_address[1]}")
        collector = MetricsApiCollector(api_client(str(tmp_path / "kubeconfig")))
        assert collector.collect() == [UsageSample(TS_EPOCH, "a", "p", "c", 1.0, 1.0, window=30.0)]
        assert collector.errors == {"item": 5} and collector.skipped == 5
    finally:
        server.shutdown()
        server.server_close()
