"""`--compat-kube-state-metrics-fork`: the families of Volcano's forked kube-state-metrics, so that the
dashboards Volcano's chart installs show data (docs/compat.md).

The end-to-end test runs what a cluster runs: the simulated Volcano cluster, the exporter with the flag,
and a real Prometheus that scrapes it with the documented relabeling (`job="kube-state-metrics"` on the
fork's names) next to a stand-in for the plain kube-state-metrics family the namespace dashboard joins
with. Every upstream expression naming a fork family must return data.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.exporter import objects
from tests.exporter.test_prometheus import Prometheus, fetch, parse_text, poll, prometheus_binary
from tests.simtools import SHARED, client_for, wait_for
from volcano_monitor.core.model import parse_podgroup
from volcano_monitor.exporter.app import Exporter, pod_transform
from volcano_monitor.exporter.cardinality import Options
from volcano_monitor.exporter.cli import parse_args
from volcano_monitor.exporter.families import compat
from volcano_monitor.exporter.server import make_server, serve_in_background
from volcano_monitor.exporter.store import ExporterStore
from volcano_monitor.simulator.runtime import SimulatorThread

UPSTREAM = SHARED / "volcano" / "upstream" / "grafana-dashboards.helm.yaml"
FORK_METRIC = re.compile(r"\bkube_pod_volcano_[a-z_]+")
COMPAT = Options(compat_ksm_fork=True)
RELABEL = """\
    metric_relabel_configs:
      - source_labels: [__name__]
        regex: kube_pod_volcano_.*
        target_label: job
        replacement: kube-state-metrics
"""
# The dashboards' variables: a queue and a namespace of the default scenario with GPU jobs that run,
# wait and fail (embed-features is OOM-killed after 5 s at 60x: a container that ran and stopped).
VARIABLES = {"$queue": "research", "$namespace": "ml-platform"}
BUDGET = 90.0


def upstream_dashboards() -> dict[str, dict[str, Any]]:
    """The five dashboards of Volcano's chart: one JSON document per ConfigMap key, inside a Helm template."""
    text = UPSTREAM.read_text()
    found = re.findall(r"^  ([\w-]+\.json): \|-\n    (.*)$", text, re.MULTILINE)
    return {name: json.loads(body) for name, body in found}


def expressions(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def fork_expressions() -> list[tuple[str, str]]:
    return sorted({(name, expr) for name, board in upstream_dashboards().items() for expr in expressions(board)
                   if FORK_METRIC.search(expr)})


def scrape(store: ExporterStore) -> list[tuple[str, dict[str, str], float]]:
    out: list[bytes] = []
    store.write(out)
    return parse_text(b"".join(out).decode())


def compat_pod(status: dict[str, Any] | None = None) -> dict[str, Any]:
    raw = objects.volcano_pod()
    raw["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "9"}}}]
    raw["spec"]["containers"].append({"name": "sidecar", "resources": {
        "requests": {"cpu": "100m", "memory": "64Mi", "pods": "1", "amd.com/gpu": "2"},
        "limits": {"hugepages-2Mi": "4Mi"}}})
    raw["status"]["containerStatuses"] = status or [
        {"name": "main", "state": {"running": {"startedAt": objects.T1}}},
        {"name": "sidecar", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    return raw


def compat_store(raw: dict[str, Any]) -> ExporterStore:
    store = ExporterStore(options=COMPAT)
    store.on_pod("ADDED", pod_transform(COMPAT, compat=store.compat)(raw))
    return store


# ---- the upstream dashboards ---------------------------------------------------------------------------

def test_upstream_dashboards_use_only_served_fork_families() -> None:
    boards = upstream_dashboards()
    assert len(boards) == 5, sorted(boards)
    used = {m for _, expr in fork_expressions() for m in FORK_METRIC.findall(expr)}
    assert used == {"kube_pod_volcano_container_resource_requests", "kube_pod_volcano_container_status_running"}
    assert used <= {f.name for f in compat.FAMILIES}
    assert len(fork_expressions()) == 13  # 26 queries, 13 different ones
    # Every label the queries select or group by on a fork family is one the family has.
    labels = {f.name: set(f.labels) | {"job"} for f in compat.FAMILIES}
    for _, expr in fork_expressions():
        for name, selector in re.findall(r"(kube_pod_volcano_[a-z_]+)\{([^}]*)\}", expr):
            selected = set(re.findall(r"([a-z_]+)\s*(?:=|!=|=~)", selector))
            assert selected <= labels[name], (expr, selected - labels[name])


# ---- what is rendered ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("cpu", ("cpu", "core")), ("memory", ("memory", "byte")), ("ephemeral-storage", ("ephemeral_storage", "byte")),
    ("hugepages-2Mi", ("hugepages_2Mi", "byte")),
    ("attachable-volumes-aws-ebs", ("attachable_volumes_aws_ebs", "byte")),
    ("nvidia.com/gpu", ("nvidia_com_gpu", "integer")), ("pods", None), ("kubernetes.io/batch", None),
])
def test_fork_resource_names_and_units(name: str, expected: tuple[str, str] | None) -> None:
    assert compat.fork_resource(name) == expected


def test_series_per_container_with_the_forks_labels() -> None:
    samples = scrape(compat_store(compat_pod()))
    requests = {(s[1]["container"], s[1]["resource"], s[1]["unit"]): s[2] for s in samples
                if s[0] == compat.REQUESTS.name}
    assert requests == {
        ("main", "cpu", "core"): 4, ("main", "memory", "byte"): 16 * 1024**3, ("main", "nvidia_com_gpu", "integer"): 1,
        ("main", "gpu", "integer"): 1,  # what Volcano's dashboards ask for
        ("sidecar", "cpu", "core"): 0.1, ("sidecar", "memory", "byte"): 64 * 1024**2,
        ("sidecar", "amd_com_gpu", "integer"): 2, ("sidecar", "gpu", "integer"): 2,
    }  # no init container, no `pods`
    limits = {(s[1]["container"], s[1]["resource"]): s[2] for s in samples if s[0] == compat.LIMITS.name}
    assert limits[("sidecar", "hugepages_2Mi")] == 4 * 1024**2 and limits[("main", "cpu")] == 8
    first = next(s[1] for s in samples if s[0] == compat.REQUESTS.name)
    assert first == {"namespace": "ml", "pod": "train-worker-1", "container": "main", "node": "gpu-node-7",
                     "volcano_namespace": "ml", "volcano_job": "train", "queue": "research", "resource": "cpu",
                     "unit": "core"}
    running = {s[1]["container"]: s[2] for s in samples if s[0] == compat.RUNNING.name}
    assert running == {"main": 1, "sidecar": 0}
    assert {k for s in samples if s[0] == compat.RUNNING.name for k in s[1]} == set(compat.RUNNING.labels)


def test_a_status_change_alone_rerenders_running() -> None:
    """Only containerStatuses change (no phase, node or request change): the running series must follow."""
    store = compat_store(compat_pod())
    done = compat_pod([{"name": "main", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                       {"name": "sidecar", "state": {"running": {}}}])
    store.on_pod("MODIFIED", pod_transform(COMPAT, compat=True)(done))
    running = {s[1]["container"]: s[2] for s in scrape(store) if s[0] == compat.RUNNING.name}
    assert running == {"main": 0, "sidecar": 1}


def test_pods_of_kubeflow_jobs_get_their_podgroups_queue_and_owner() -> None:
    store = ExporterStore(options=COMPAT)
    group = parse_podgroup(objects.kubeflow_podgroup())
    store.on_podgroup_owner("ADDED", group)
    raw = compat_pod()
    raw["metadata"]["namespace"] = group.namespace
    raw["metadata"]["labels"] = {}
    raw["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": group.name}
    store.on_pod("ADDED", pod_transform(COMPAT, compat=True)(raw))
    labels = next(s[1] for s in scrape(store) if s[0] == compat.REQUESTS.name)
    assert (labels["queue"], labels["volcano_job"]) == (group.queue, group.owner_name)
    assert group.queue and group.owner_name


@pytest.mark.parametrize("mangle", [
    lambda raw: raw["spec"].update(containers="main"),
    lambda raw: raw["spec"]["containers"].append(7),
    lambda raw: raw["spec"]["containers"][0].update(resources=["cpu"]),
    lambda raw: raw["spec"]["containers"][0]["resources"].update(requests={"cpu": "lots"}),
    lambda raw: raw["status"].update(containerStatuses={"main": 1}),
    lambda raw: raw["status"]["containerStatuses"].append("x"),
    lambda raw: raw["status"]["containerStatuses"][0].update(name=3, state="running"),
])
def test_malformed_containers_are_counted_not_fatal(mangle: Any) -> None:
    raw = compat_pod()
    mangle(raw)
    store = compat_store(raw)
    assert store.parse_problems["pods"] >= 1
    assert any(s[0] == "volcano_pod_info" for s in scrape(store))  # the pod is still exported


def test_no_fork_family_without_the_flag_even_if_allowed() -> None:
    store = ExporterStore(options=Options(compat_ksm_fork=False))
    store.on_pod("ADDED", pod_transform(store.options, compat=store.compat)(compat_pod()))
    assert not [s for s in scrape(store) if s[0].startswith("kube_")]


def test_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_args([]).options.compat_ksm_fork is False
    assert parse_args(["--compat-kube-state-metrics-fork"]).options.compat_ksm_fork is True
    assert parse_args(["--compat-kube-state-metrics-fork=false"]).options.compat_ksm_fork is False
    monkeypatch.setenv("VOLCANO_EXPORTER_COMPAT_KUBE_STATE_METRICS_FORK", "true")
    assert parse_args([]).options.compat_ksm_fork is True


# ---- end to end: Volcano's dashboards' queries against a real Prometheus ----------------------------------

class PlainKubeStateMetrics:
    """The one plain kube-state-metrics family the namespace dashboard joins with
    (`kube_pod_container_status_running`), from the simulated cluster's pods, as kube-state-metrics serves it."""

    def __init__(self, sim_url: str) -> None:
        sim = sim_url

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pods = json.loads(fetch(f"{sim}/api/v1/pods"))["items"]
                lines = ["# TYPE kube_pod_container_status_running gauge"]
                for pod in pods:
                    meta = pod["metadata"]
                    for cs in pod.get("status", {}).get("containerStatuses", []):
                        up = 1 if "running" in cs.get("state", {}) else 0
                        lines.append(f'kube_pod_container_status_running{{namespace="{meta["namespace"]}",'
                                     f'pod="{meta["name"]}",container="{cs["name"]}"}} {up}')
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow(90)
def test_volcano_dashboards_queries_return_data(tmp_path: Path) -> None:
    binary = prometheus_binary()  # a failure, not a skip, when missing
    queries = fork_expressions()
    with SimulatorThread(scenario="default", speed=60, tick_interval=0.2) as sim:
        exporter = Exporter(client_for(sim, tmp_path / "on"), options=COMPAT).start()
        plain = Exporter(client_for(sim, tmp_path / "off")).start()
        server = make_server(exporter, "127.0.0.1", 0)
        serve_in_background(server)
        ksm = PlainKubeStateMetrics(sim.url)
        prom = Prometheus(binary, tmp_path, {"volcano-exporter": f"127.0.0.1:{server.server_address[1]}",
                                             "kube-state-metrics": ksm.target},
                          job_config={"volcano-exporter": RELABEL})
        try:
            wait_for(lambda: exporter.ready() and plain.ready(), timeout=10)
            prom.wait_ready(timeout=10)
            deadline = time.monotonic() + BUDGET
            pending = dict.fromkeys(queries, "not queried yet")

            def all_have_data() -> str | None:
                for key in list(pending):
                    expr = key[1]
                    for name, value in VARIABLES.items():
                        expr = expr.replace(name, value)
                    result = prom.query(expr)
                    if result:
                        print(f"{key[0]}: {len(result)} series, e.g. {result[0]['value'][1]}: {expr!r}")
                        del pending[key]
                    else:
                        pending[key] = "no data"
                return None if not pending else f"{len(pending)} without data: {sorted(pending)}"

            poll("every upstream query with a fork family returns data", deadline, all_have_data, interval=1.0)
            # Relabeled as documented: the fork's families carry job="kube-state-metrics", nothing else does.
            jobs = {r["metric"]["job"] for r in prom.query('count by (job) ({__name__=~"kube_pod_volcano_.*"})')}
            assert jobs == {"kube-state-metrics"}
            assert prom.query('volcano_pod_info{job="volcano-exporter"}')
            # The same cluster without the flag: none of the fork's names.
            assert "kube_pod_volcano" not in plain.scrape().decode()
            assert "kube_pod_volcano_container_status_running" in exporter.scrape().decode()
        except BaseException:
            print(f"---- prometheus log ({prom.log_path}) ----\n{prom.log()}")
            raise
        finally:
            prom.stop()
            ksm.stop()
            server.shutdown()
            server.server_close()
            exporter.stop()
            plain.stop()
