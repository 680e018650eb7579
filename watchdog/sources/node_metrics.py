"""Node usage from the Kubernetes metrics API: LIST `metrics.k8s.io/v1beta1` NodeMetrics (what
`kubectl top nodes` shows), for NodeHot.

Why the node endpoint rather than the pods' summed usage: a node runs hot from everything on it —
pods the watchdog does not watch (non-Volcano ones), system daemons, the kubelet — and NodeMetrics
measures the whole node. The pods' usage (`NodeTable.add_samples`) still says which pods to look at.

Like the pod collector, `collect()` never raises: a failure is counted in `errors` and the round
yields nothing (NodeHot then has no current value and states nothing new).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kubernetes import client

from volcano_monitor.core.fields import parse_timestamp
from volcano_monitor.core.kube.rest import ApiUnavailable, request_json
from volcano_monitor.core.quantity import QuantityError, parse_quantity
from volcano_monitor.watchdog.state.nodes import NodeUsage

__all__ = ["NODE_METRICS_PATH", "NodeMetricsCollector", "parse_node_metrics"]

log = logging.getLogger(__name__)

NODE_METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"


def parse_node_metrics(body: Any) -> tuple[dict[str, NodeUsage], int]:
    """(usage by node name, items skipped as malformed) from a NodeMetricsList."""
    items = body.get("items") if isinstance(body, dict) else None
    out: dict[str, NodeUsage] = {}
    skipped = 0
    for item in items if isinstance(items, list) else ():
        meta = item.get("metadata") if isinstance(item, dict) else None
        usage = item.get("usage") if isinstance(item, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        raw_ts = item.get("timestamp") if isinstance(item, dict) else None
        ts = parse_timestamp(raw_ts) if isinstance(raw_ts, str) else None
        if not (isinstance(name, str) and name and isinstance(usage, dict) and ts is not None):
            skipped += 1
            continue
        try:
            cpu, memory = parse_quantity(usage.get("cpu", 0)), parse_quantity(usage.get("memory", 0))
        except QuantityError:
            skipped += 1
            continue
        if cpu < 0 or memory < 0:
            skipped += 1
            continue
        out[name] = NodeUsage(ts, cpu, memory)
    return out, skipped


class NodeMetricsCollector:
    def __init__(self, api: client.ApiClient, timeout: float = 10.0) -> None:
        self.api = api
        self.timeout = timeout
        self.errors: Counter[str] = Counter()
        self.skipped = 0
        self.last_error = ""
        self._failing = 0

    def collect(self) -> dict[str, NodeUsage] | None:
        """One poll; None when it failed (the caller keeps nothing stale either way)."""
        try:
            status, body = request_json(self.api, "GET", NODE_METRICS_PATH, timeout=self.timeout)
        except ApiUnavailable as exc:
            return self._failed("connection", str(exc))
        if status >= 300:
            return self._failed(f"http_{status}", f"HTTP {status} from {NODE_METRICS_PATH}")
        if not isinstance(body, dict):
            return self._failed("decode", f"no NodeMetrics list from {NODE_METRICS_PATH}")
        usage, skipped = parse_node_metrics(body)
        self.skipped += skipped
        if self._failing:
            log.info("NodeMetrics polls work again after %d failures", self._failing)
        self._failing = 0
        return usage

    def _failed(self, cause: str, message: str) -> dict[str, NodeUsage] | None:
        self.errors[cause] += 1
        self.last_error = message
        self._failing += 1
        if self._failing in (1, 10) or self._failing % 100 == 0:
            log.warning("NodeMetrics poll failed (%d in a row): %s", self._failing, message)
        return None
