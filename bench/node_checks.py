"""Node detectors benchmark: prints one JSON object on stdout, the milliseconds one "checks" pass spends on
GpuStranded and NodeHot (median of --runs), with --pods Volcano pods on --nodes nodes, a tenth of them GPU
nodes (8 GPUs, 64 cores) of which --hostage are filled by CPU-only pods, and every node measured.

    .venv/bin/python bench/node_checks.py [--pods 100000 --nodes 1000 --hostage 5 --runs 5]

`first_walk_ms` is the first pass (every pod's view made), `pass_ms` a later pass with nothing changed
(the views reused by identity, one walk shared by both detectors), as the worker sees it every 15 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

_HERE = Path(__file__).resolve().parent  # bench/watchdog.py would shadow the package: the root comes first
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from sqlalchemy import create_engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from volcano_monitor.core.model import parse_node, parse_pod  # noqa: E402
from volcano_monitor.watchdog.findings.detectors.hot import NodeHotDetector  # noqa: E402
from volcano_monitor.watchdog.findings.detectors.settings import GpuStrandedSettings, NodeHotSettings  # noqa: E402
from volcano_monitor.watchdog.findings.detectors.stranded import GpuStrandedDetector  # noqa: E402
from volcano_monitor.watchdog.state.cluster import ClusterIndex  # noqa: E402
from volcano_monitor.watchdog.state.db.engine import migrate  # noqa: E402
from volcano_monitor.watchdog.state.nodes import NodeTable, NodeUsage  # noqa: E402


def build(pods: int, nodes: int, hostage: int) -> tuple[NodeTable, ClusterIndex]:
    table, index = NodeTable(), ClusterIndex()
    gpu_nodes = max(1, nodes // 10)
    for n in range(nodes):
        allocatable = {"cpu": "64", "memory": "512Gi", **({"nvidia.com/gpu": "8"} if n < gpu_nodes else {})}
        table.on_node("ADDED", parse_node({"metadata": {"name": f"node-{n:05d}"}, "status": {
            "allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}))
    now = time.time()
    table.set_usage({f"node-{n:05d}": NodeUsage(now, 30.0, 200 * 2**30) for n in range(nodes)}, now)
    per_node = max(1, pods // nodes)
    for i in range(pods):
        n = i % nodes
        gpus = {"nvidia.com/gpu": "1"} if n < gpu_nodes and n >= hostage and i % 2 else {}
        cpu = "60" if n < hostage and i // nodes == 0 else str(round(32 / per_node, 3))
        index.on_pod("ADDED", parse_pod({
            "metadata": {"name": f"pod-{i}", "namespace": f"ns-{i % 50}", "uid": str(i),
                         "labels": {"volcano.sh/job-name": f"job-{i // 10}", "volcano.sh/queue-name": f"q-{i % 20}"}},
            "spec": {"nodeName": f"node-{n:05d}", "containers": [
                {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "1Gi", **gpus}}}]},
            "status": {"phase": "Running"}}))
    return table, index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--hostage", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    table, index = build(args.pods, args.nodes, args.hostage)
    engine = create_engine("sqlite://")
    migrate(engine)
    stranded = GpuStrandedDetector(GpuStrandedSettings(), table, index)
    hot = NodeHotDetector(NodeHotSettings(), table, index)

    def one_pass() -> tuple[float, int]:
        now = datetime.now(UTC)
        started = time.perf_counter()
        with Session(engine) as session:
            signals = stranded.check(session, now) + hot.check(now.timestamp())
        return (time.perf_counter() - started) * 1000, len(signals)

    first, signals = one_pass()
    passes = [one_pass()[0] for _ in range(args.runs)]
    print(json.dumps({"pods": args.pods, "nodes": args.nodes, "gpu_nodes_stranding": sum(
        1 for count in stranded.stranded.values() if count), "signals": signals, "first_walk_ms": round(first, 1),
        "pass_ms": round(statistics.median(passes), 1)}))


if __name__ == "__main__":
    main()
