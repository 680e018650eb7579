"""End to end with a real Prometheus: the simulated cluster, the exporter serving /metrics over HTTP, and a
Prometheus process scraping both every second. The joins of DESIGN §4 (cAdvisor usage x `volcano_pod_info`
on (namespace, pod)) must work in PromQL and agree with the same sums computed here from our own scrapes.

Prometheus is a test dependency (`.ci/run` installs it): when it is missing the test fails, it never skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.simtools import client_for, wait_for
from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.server import make_server, serve_in_background
from volcano_monitor.simulator.runtime import SimulatorThread

BUDGET = 40.0  # seconds for the whole test once Prometheus is found
MEMORY_TOLERANCE = 0.03
CPU_TOLERANCE = 0.10
CPU_WINDOW = 10.0  # the range of the rate() below, in seconds
EXPORTER_JOB, SIM_JOB = "volcano-exporter", "simulator"

MEMORY_JOIN = ("sum by (queue) (container_memory_working_set_bytes"
               " * on(namespace, pod) group_left(queue) volcano_pod_info)")
CPU_JOIN = ("sum by (queue) (rate(container_cpu_usage_seconds_total[10s])"
            " * on(namespace, pod) group_left(queue) volcano_pod_info)")

Labels = dict[str, str]
Sample = tuple[str, Labels, float]
PodKey = tuple[str, str]  # namespace, pod
ContainerKey = tuple[str, str, str]  # namespace, pod, container


# ---- Prometheus text format (enough for the exporter's and the simulator's output) -------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_text(text: str) -> list[Sample]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"unparsable sample line: {line!r}"
        name, raw_labels, value = match.groups()
        labels = {}
        for label in _LABEL.finditer(raw_labels or ""):
            labels[label.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], label.group(2))
        samples.append((name, labels, float(value)))
    return samples


@dataclass
class Snapshot:
    """The simulator's and the exporter's /metrics fetched back to back, at `t` (Unix time)."""

    t: float
    pod_queue: dict[PodKey, str]
    running_queues: set[str]
    memory: dict[ContainerKey, float]
    cpu: dict[ContainerKey, float]
    memory_by_queue: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        sums: dict[str, float] = defaultdict(float)
        for (ns, pod, _), value in self.memory.items():
            if (ns, pod) in self.pod_queue:  # the inner join PromQL does
                sums[self.pod_queue[ns, pod]] += value
        self.memory_by_queue = dict(sums)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def snapshot(sim_url: str, exporter_url: str) -> Snapshot:
    before = time.time()
    sim_text = fetch(sim_url)
    exporter_text = fetch(exporter_url)
    t = (before + time.time()) / 2
    pod_queue: dict[PodKey, str] = {}
    running: set[str] = set()
    for name, labels, _ in parse_text(exporter_text):
        if name == "volcano_pod_info":
            pod_queue[labels["namespace"], labels["pod"]] = labels["queue"]
        elif name == "volcano_pod_status_phase" and labels["phase"] == "Running":
            running.add(labels["queue"])
    memory: dict[ContainerKey, float] = {}
    cpu: dict[ContainerKey, float] = {}
    for name, labels, value in parse_text(sim_text):
        key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
        if name == "container_memory_working_set_bytes":
            memory[key] = value
        elif name == "container_cpu_usage_seconds_total":
            cpu[key] = value
    return Snapshot(t, pod_queue, running, memory, cpu)


# ---- comparisons -----------------------------------------------------------------------------------------

def close(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance * max(abs(a), abs(b))


def memory_problems(prom: dict[str, float], before: Snapshot, after: Snapshot) -> list[str]:
    """Prometheus' sample was scraped between `before` and `after`: its per-queue sums lie between theirs."""
    problems = []
    always = set(before.memory_by_queue) & set(after.memory_by_queue)
    ever = set(before.memory_by_queue) | set(after.memory_by_queue)
    if not always <= set(prom) <= ever:
        problems.append(f"memory join queues {sorted(prom)}; our scrapes had {sorted(before.memory_by_queue)} "
                        f"then {sorted(after.memory_by_queue)}")
    running_always = before.running_queues & after.running_queues
    running_ever = before.running_queues | after.running_queues
    if not running_always <= set(prom) <= running_ever:
        problems.append(f"memory join queues {sorted(prom)}; queues of Running pods {sorted(before.running_queues)} "
                        f"then {sorted(after.running_queues)}")
    for queue, value in sorted(prom.items()):
        ours = [s.memory_by_queue[queue] for s in (before, after) if queue in s.memory_by_queue]
        if not ours:
            continue
        low, high = min(ours) * (1 - MEMORY_TOLERANCE), max(ours) * (1 + MEMORY_TOLERANCE)
        if not low <= value <= high:
            problems.append(f"memory of queue {queue!r}: Prometheus {value:.4g}, our scrapes {ours}")
    return problems


def cpu_problems(prom: dict[str, float], history: list[Snapshot], at: float) -> tuple[list[str], int]:
    """Compare rate() per queue with the slope of the counters in our own scrapes over the same window.

    Only queues whose containers stayed the same over the window (none started, stopped or restarted)
    are compared by value: for the others rate()'s extrapolation at the series' ends is not a slope.
    Returns the problems and how many queues were compared by value.
    """
    window = [s for s in history if at - CPU_WINDOW + 0.5 <= s.t <= at + 0.5]
    first, last = window[0], window[-1]
    if last.t - first.t < CPU_WINDOW - 3:
        return [f"our scrapes span {last.t - first.t:.1f}s of the {CPU_WINDOW}s window so far"], 0
    problems = []
    ours_queues = {last.pod_queue[ns, pod] for ns, pod, _ in last.cpu if (ns, pod) in last.pod_queue}
    if not ours_queues <= set(prom):
        problems.append(f"cpu join queues {sorted(prom)}, missing queues with running containers "
                        f"{sorted(ours_queues - set(prom))}")
    by_queue: dict[str, set[ContainerKey]] = defaultdict(set)
    for s in window:
        for key in s.cpu:
            queue = last.pod_queue.get(key[:2])
            if queue is not None:
                by_queue[queue].add(key)
    compared = 0
    for queue, keys in sorted(by_queue.items()):
        stable = all(  # present throughout, no counter reset
            all(key in s.cpu for s in window) and all(a.cpu[key] <= b.cpu[key] for a, b in pairwise(window))
            for key in keys)
        if not stable or queue not in prom:
            continue
        expected = sum(last.cpu[key] - first.cpu[key] for key in keys) / (last.t - first.t)
        compared += 1
        if not close(prom[queue], expected, CPU_TOLERANCE):
            problems.append(f"cpu rate of queue {queue!r}: Prometheus {prom[queue]:.4g} cores, "
                            f"our scrapes {expected:.4g} cores")
    for queue, value in prom.items():
        if not value > 0:
            problems.append(f"cpu rate of queue {queue!r} is {value}")
    if not compared:
        problems.append("no queue kept the same containers over the window")
    return problems, compared


# ---- the Prometheus process ------------------------------------------------------------------------------

def prometheus_binary() -> str:
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK)
                                           else None)
    if found is None:
        pytest.fail("this test needs a Prometheus server binary and none was found (not on PATH, not "
                    "/usr/bin/prometheus): install Debian's prometheus (make test does when run as root)",
                    pytrace=False)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Prometheus:
    def __init__(self, binary: str, workdir: Path, targets: dict[str, str],
                 job_config: dict[str, str] | None = None) -> None:
        """`job_config`: more YAML for a scrape job (e.g. metric_relabel_configs), indented by 4 spaces."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        jobs = "".join(f"  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
                       + (job_config or {}).get(job, "")
                       for job, target in targets.items())
        self.config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                               f"scrape_configs:\n{jobs}")
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
             "--log.level=info"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited with code {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready on {self.url} within {timeout}s")
            time.sleep(0.1)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                reply = json.load(response)
        except urllib.error.HTTPError as e:  # 400/422 carry the PromQL error in the body
            raise AssertionError(f"query {expr!r} failed: {e.code} {e.read().decode(errors='replace')}") from e
        assert reply["status"] == "success", f"query {expr!r}: {reply}"
        assert reply["data"]["resultType"] == "vector", f"query {expr!r}: {reply['data']['resultType']}"
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def by_queue(self, expr: str, at: float | None = None) -> dict[str, float]:
        return {r["metric"].get("queue", ""): float(r["value"][1]) for r in self.query(expr, at)}

    def self_metrics(self) -> dict[str, float]:
        return {name: value for name, labels, value in parse_text(fetch(f"{self.url}/metrics")) if not labels}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


def poll(what: str, deadline: float, check: Callable[[], str | None], interval: float = 0.25) -> None:
    """Call `check` until it returns None (no problem) or the deadline passes; fail with its last problem."""
    while True:
        problem = check()
        if problem is None:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {problem}")
        time.sleep(interval)


# ---- the test --------------------------------------------------------------------------------------------

@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[SimulatorThread, str]]:
    """The simulated cluster (default scenario at 60x) and the exporter's HTTP server watching it."""
    with SimulatorThread(scenario="default", speed=60, tick_interval=0.2) as sim:
        exporter = Exporter(client_for(sim, tmp_path)).start()
        server = make_server(exporter, "127.0.0.1", 0)
        serve_in_background(server)
        try:
            wait_for(exporter.ready, timeout=10)
            yield sim, f"127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            exporter.stop()


def test_prometheus_scrapes_and_joins_exporter_with_usage(tmp_path: Path,
                                                         stack: tuple[SimulatorThread, str]) -> None:
    binary = prometheus_binary()  # a failure, not a skip, when missing
    deadline = time.monotonic() + BUDGET
    sim, exporter_target = stack
    sim_target = sim.url.removeprefix("http://")
    sim_metrics, exporter_metrics = f"{sim.url}/metrics", f"http://{exporter_target}/metrics"
    prom = Prometheus(binary, tmp_path, {EXPORTER_JOB: exporter_target, SIM_JOB: sim_target})
    try:
        prom.wait_ready(timeout=10)

        def targets_up() -> str | None:
            up = {r["metric"]["job"]: r["value"][1] for r in prom.query("up")}
            return None if up == {EXPORTER_JOB: "1", SIM_JOB: "1"} else f"up = {up}"

        poll("both targets up", deadline, targets_up)
        scraped_since = time.time()  # Prometheus has samples of both targets from here on

        def pod_info() -> str | None:
            series = prom.query('volcano_pod_info{queue!=""}')
            return None if series else "no volcano_pod_info series with a queue yet"

        poll("volcano_pod_info scraped", deadline, pod_info)

        def pending_reasons() -> str | None:  # the default scenario has gangs stuck on the cluster and queues
            series = prom.query('volcano_job_pending_reason{reason=~"cluster_.*|queue_.*"}')
            return None if series else "no volcano_job_pending_reason series naming a queue or the cluster yet"

        poll("volcano_job_pending_reason scraped", deadline, pending_reasons)
        assert not prom.query("count by (namespace, job_name) (volcano_job_pending_reason) > 1"), \
            "a job with more than one pending reason"
        info = prom.query("volcano_pod_info")
        assert all(r["value"][1] == "1" for r in info), info
        assert all(r["metric"]["job"] == EXPORTER_JOB for r in info), info

        # Our own scrapes every ~1.6 s; Prometheus' answer at `at` comes from a scrape between the last two.
        history = [snapshot(sim_metrics, exporter_metrics)]
        memory_problem: list[str] | None = None
        cpu_problem: list[str] | None = None
        cpu_compared = 0
        while memory_problem != [] or cpu_problem != []:
            if time.monotonic() > deadline:
                raise AssertionError(f"joins did not agree within {BUDGET}s:\n  memory: {memory_problem}\n  "
                                     f"cpu: {cpu_problem}")
            time.sleep(1.3)
            history.append(snapshot(sim_metrics, exporter_metrics))
            time.sleep(0.3)  # let Prometheus ingest the scrape it started just before `at`
            before, after = history[-2:]
            at = after.t - 0.05
            if memory_problem != []:
                memory = prom.by_queue(MEMORY_JOIN, at)
                memory_problem = memory_problems(memory, before, after)
                print(f"t={at:.2f} memory join {memory}: {memory_problem or 'ok'}")
                if not memory_problem:
                    assert memory and all(v > 0 for v in memory.values()), memory
                    assert "" not in memory, f"pods without a queue in the join: {memory}"
            if cpu_problem != [] and at > scraped_since + CPU_WINDOW + 0.5:  # rate() sees a full window
                cpu = prom.by_queue(CPU_JOIN, at)
                cpu_problem, cpu_compared = cpu_problems(cpu, history, at)
                print(f"t={at:.2f} cpu join {cpu}: {cpu_problem or 'ok'}")
        assert cpu_compared >= 1

        # The exporter's output never made Prometheus drop samples (duplicate series, bad timestamps).
        counters = prom.self_metrics()
        for name in ("prometheus_target_scrapes_sample_duplicate_timestamp_total",
                     "prometheus_target_scrapes_sample_out_of_order_total",
                     "prometheus_target_scrapes_sample_out_of_bounds_total"):
            assert counters.get(name) == 0, f"{name} = {counters.get(name)}"
    except BaseException:
        print(f"---- prometheus log ({prom.log_path}) ----\n{prom.log()}")
        raise
    finally:
        prom.stop()
