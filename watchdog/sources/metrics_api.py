"""Usage from the Kubernetes metrics API: LIST `metrics.k8s.io/v1beta1` PodMetrics, as metrics-server
(or the simulator) serves them.

Why raw JSON: the official client's model deserialization costs ~10x the JSON parsing, and a
PodMetrics list of a large cluster is as big as its pod list. The official client still does the
authentication and TLS (`param_serialize` + `call_api`, like the informer).

Why `collect()` never raises: it runs in the watchdog's poll loop, and a metrics-server that is
down, forbidden or answering garbage must not stop the loop. Each failure is counted in `errors`
(by cause) and logged once per streak; a malformed item or quantity is skipped and counted, the
rest of the list is still used.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import urllib3
from kubernetes import client

from volcano_monitor.core.fields import parse_timestamp
from volcano_monitor.core.kube.informer import gc_paused
from volcano_monitor.core.kube.resources import POD_METRICS
from volcano_monitor.core.quantity import QuantityError, parse_quantity
from volcano_monitor.watchdog.state.samples import UsageSample

log = logging.getLogger(__name__)

PAGE_SIZE = 500


class _RequestFailed(Exception):
    """One LIST request went wrong; `cause` is the `errors` key to count."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(h|ms|m|s|us|µs|ns)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration(text: str) -> float:
    """Seconds of a Go duration as metrics-server writes `window` ("30s", "1m0.5s"); 0 if unreadable."""
    if not text or len(text) > 64:
        return 0.0
    parts = _DURATION_PART.findall(text)
    if "".join(number + unit for number, unit in parts) != text:
        return 0.0
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)


def _quantity(usage: Mapping[str, Any], key: str) -> tuple[float | None, bool]:
    """(value, ok): a missing key is (None, True), an unparseable or negative one (None, False)."""
    raw = usage.get(key)
    if raw is None:
        return None, True
    try:
        value = parse_quantity(raw)
    except QuantityError:
        return None, False
    return (value, True) if value >= 0 else (None, False)


class MetricsApiCollector:
    def __init__(self, api: client.ApiClient, namespaces: Sequence[str] = (), timeout: float = 10,
                 *, page_size: int = PAGE_SIZE, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.namespaces = tuple(namespaces)
        self.timeout = timeout
        self.page_size = page_size
        self.clock = clock
        # Health, read by the watchdog's self-metrics (plain attributes, written by the polling thread).
        self.errors: Counter[str] = Counter()  # request failures and malformed data, by cause
        self.skipped = 0  # items or containers dropped because they were malformed
        self.last_success: float | None = None  # clock() of the last poll where every request worked
        self.last_error = ""
        self._failing = 0  # consecutive failed polls, to log a streak once

    def collect(self) -> list[UsageSample]:
        """One poll: every PodMetrics of the watched namespaces (or all) as samples."""
        samples: list[UsageSample] = []
        failed = False
        for namespace in self.namespaces or (None,):
            try:
                samples.extend(self._list(namespace))
            except _RequestFailed as exc:
                failed = True
                self.errors[exc.cause] += 1
                self.last_error = str(exc)
        if failed:
            self._failing += 1
            if self._failing in (1, 10) or self._failing % 100 == 0:
                log.warning("metrics API poll failed (%d in a row): %s", self._failing, self.last_error)
        else:
            if self._failing:
                log.info("metrics API polls work again after %d failures", self._failing)
            self._failing = 0
            self.last_success = self.clock()
        return samples

    # ---- HTTP -----------------------------------------------------------------------------------

    def _get(self, namespace: str | None, token: str) -> dict[str, Any]:
        query = [("limit", str(self.page_size))]
        if token:
            query.append(("continue", token))
        try:
            method, url, headers, _, _ = self.api.param_serialize(
                "GET", POD_METRICS.path(namespace), query_params=query,
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
            )
            rest = self.api.call_api(method, url, header_params=headers,
                                     _request_timeout=(self.timeout, self.timeout))
            response: urllib3.BaseHTTPResponse = rest.response
            body = response.data
            response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError, client.ApiException, ValueError) as exc:
            raise _RequestFailed("connection", f"{type(exc).__name__}: {exc}") from exc
        if response.status >= 300:
            text = body[:200].decode("utf-8", "replace") if isinstance(body, bytes) else ""
            raise _RequestFailed(f"http_{response.status}", f"HTTP {response.status} from {url}: {text}")
        try:
            with gc_paused():
                decoded = orjson.loads(body)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise _RequestFailed("decode", f"undecodable PodMetrics list from {url}: {exc}") from exc
        if not isinstance(decoded, dict) or not isinstance(decoded.get("items", []), list | None):
            raise _RequestFailed("decode", f"PodMetrics list from {url} is not a list object")
        return decoded

    def _list(self, namespace: str | None) -> list[UsageSample]:
        samples: list[UsageSample] = []
        token = ""
        while True:
            body = self._get(namespace, token)
            for item in body.get("items") or ():
                self._parse_item(item, samples)
            metadata = body.get("metadata")
            following = metadata.get("continue") if isinstance(metadata, dict) else None
            if not following or not isinstance(following, str):
                return samples
            token = following

    # ---- parsing --------------------------------------------------------------------------------

    def _skip(self, cause: str) -> None:
        self.errors[cause] += 1
        self.skipped += 1

    def _parse_item(self, item: object, out: list[UsageSample]) -> None:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(meta, dict):
            self._skip("item")
            return
        namespace, pod = meta.get("namespace"), meta.get("name")
        containers = item.get("containers")
        if not (isinstance(namespace, str) and namespace and isinstance(pod, str) and pod
                and isinstance(containers, list)):
            self._skip("item")
            return
        raw_ts = item.get("timestamp")
        ts = parse_timestamp(raw_ts) if isinstance(raw_ts, str) else None
        if ts is None:
            self._skip("timestamp")
            return
        raw_window = item.get("window")
        window = go_duration(raw_window) if isinstance(raw_window, str) else 0.0
        for container in containers:
            name = container.get("name") if isinstance(container, dict) else None
            usage = container.get("usage") if isinstance(container, dict) else None
            if not isinstance(name, str) or not name or not isinstance(usage, dict):
                self._skip("container")
                continue
            cpu, cpu_ok = _quantity(usage, "cpu")
            memory, memory_ok = _quantity(usage, "memory")
            if not (cpu_ok and memory_ok):
                self.errors["quantity"] += 1
            if cpu is None and memory is None:
                self.skipped += 1
                continue
            out.append(UsageSample(ts, namespace, pod, name, cpu, memory, window=window))
