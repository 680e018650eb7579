"""PrometheusCollector against a real local HTTP server speaking the Prometheus query API: the
PromQL it receives (escaping of hostile values included), merging, and every way of failing."""

from __future__ import annotations

import re
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

from volcano_monitor.watchdog.sources import hami
from volcano_monitor.watchdog.sources.prometheus import (
    EXPORTED_STYLE,
    REDETECT_ROUNDS,
    PrometheusCollector,
    card_util_query,
    namespace_matcher,
    promql_string,
    regex_literal,
    style_query,
)
from volcano_monitor.watchdog.sources.settings import PrometheusSource
from volcano_monitor.watchdog.sources.shared_gpus import ShareLookup
from volcano_monitor.watchdog.state.samples import UsageSample

NOW = 1714557600.0
Answer = Callable[[str], tuple[int, bytes]]


class FakePrometheus:
    """Answers /api/v1/query with `answer(promql)`; records every request."""

    def __init__(self) -> None:
        self.answer: Answer = lambda q: (200, vector([]))
        self.requests: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode(), keep_blank_values=True))
                form["path"] = self.path
                form["authorization"] = self.headers.get("Authorization", "")
                fake.requests.append(form)
                status, body = fake.answer(form.get("query", ""))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def queries(self) -> list[str]:
        return [r["query"] for r in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def vector(series: list[tuple[dict[str, str], str]]) -> bytes:
    return orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [NOW, value]} for labels, value in series]}})


def labels(pod: str, container: str = "main", namespace: str = "team-a") -> dict[str, str]:
    return {"namespace": namespace, "pod": pod, "container": container}


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    yield fake
    fake.close()


def collector(prom: FakePrometheus, namespaces: tuple[str, ...] = (), shares: ShareLookup | None = None,
              **settings: Any) -> PrometheusCollector:
    settings.setdefault("dcgm_labels", "namespace")  # the label styles are detected in tests of their own
    settings.setdefault("hami_metrics", "legacy")
    return PrometheusCollector(PrometheusSource(url=prom.url + "/", enabled=True, **settings), namespaces,
                               shares=shares)


def by_metric(cpu: bytes, memory: bytes, gpu: bytes, hami_util: bytes | None = None,
              members: bytes | None = None, cards: bytes | None = None) -> Answer:
    def answer(q: str) -> tuple[int, bytes]:
        if "container_cpu_usage_seconds_total" in q:
            return 200, cpu
        if "container_memory_working_set_bytes" in q:
            return 200, memory
        if "Device_utilization_desc_of_container" in q:
            return 200, hami_util or vector([])
        if "vGPU_device_memory_limit_in_bytes" in q:
            return 200, members or vector([])
        if q == card_util_query():
            return 200, cards or vector([])
        return 200, gpu

    return answer


def card(pod: str, uuid: str, container: str = "main", namespace: str = "team-a") -> dict[str, str]:
    return {**labels(pod, container, namespace), "UUID": uuid}


def vgpu(pod: str, uuid: str, container: str = "main", namespace: str = "team-a") -> dict[str, str]:
    return {"podnamespace": namespace, "podname": pod, "ctrname": container, "deviceuuid": uuid}


def test_queries_and_merge(prom: FakePrometheus) -> None:
    prom.answer = by_metric(
        cpu=vector([(labels("p0"), "1.5"), (labels("p1"), "0.25"), (labels("p2"), "NaN"),
                    ({"namespace": "team-a", "pod": "p3"}, "1")]),
        memory=vector([(labels("p0"), "1073741824"), (labels("p1"), "2048"), (labels("p4", "side"), "1e3")]),
        gpu=vector([(card("p0", "GPU-a"), "35"), (card("p0", "GPU-b"), "40")]),
    )
    c = collector(prom, rate_window="2m", bearer_token="s3cret")
    samples = c.collect(NOW)
    assert samples == [
        UsageSample(NOW, "team-a", "p0", "main", 1.5, 2.0**30, 37.5, 2, 120.0),
        UsageSample(NOW, "team-a", "p1", "main", 0.25, 2048.0, None, 0, 120.0),
        UsageSample(NOW, "team-a", "p4", "side", None, 1000.0, None, 0, 120.0),
    ]
    assert prom.queries == [
        'sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total'
        '{container!="", container!="POD"}[2m]))',
        'max by (namespace, pod, container) (container_memory_working_set_bytes{container!="", container!="POD"})',
        'max by (namespace, pod, container, UUID) (DCGM_FI_DEV_GPU_UTIL{pod!=""})',
        'max by (podnamespace, podname, ctrname, deviceuuid) (Device_utilization_desc_of_container{podname!=""})',
        'max by (podnamespace, podname, ctrname, deviceuuid) (vGPU_device_memory_limit_in_bytes{podname!=""})',
    ]
    assert {r["path"] for r in prom.requests} == {"/api/v1/query"}
    assert {r["time"] for r in prom.requests} == {f"{NOW:.3f}"}
    assert {r["authorization"] for r in prom.requests} == {"Bearer s3cret"}
    assert c.skipped == 2 and c.errors == {"series": 2}
    assert c.last_success is not None


def test_gpu_queries_off(prom: FakePrometheus) -> None:
    c = collector(prom, gpu=False, hami=False)
    assert c.collect(NOW) == []
    assert len(prom.queries) == 2 and not any("DCGM" in q or "Device_" in q for q in prom.queries)


def test_shared_cards_from_hami_and_dcgm(prom: FakePrometheus) -> None:
    """DCGM's card GPU-q at 80 % is shared by q0..q3 (a quarter each): each is credited 0.2 GPUs, 80 % of its
    share. h0 and h1 share GPU-h at half a card each; HAMi says h0 kept 30 % of the card busy, h1 nothing:
    HAMi replaces DCGM's split (which would give both 35 %). w holds GPU-w whole: the plain reading."""
    shares = {"q0": 0.25, "q1": 0.25, "q2": 0.25, "q3": 0.25, "h0": 0.5, "h1": 0.5, "w": 1.0}
    prom.answer = by_metric(
        cpu=vector([]), memory=vector([]),
        gpu=vector([*((card(f"q{i}", "GPU-q"), "80") for i in range(4)),
                    (card("h0", "GPU-h"), "35"), (card("h1", "GPU-h"), "35"), (card("w", "GPU-w"), "60")]),
        hami_util=vector([(vgpu("h0", "GPU-h"), "30"), (vgpu("h1", "GPU-h"), "0")]))
    c = collector(prom, shares=lambda namespace, pod: shares.get(pod))
    got = {s.pod: (s.gpu_util_percent, s.gpus) for s in c.collect(NOW)}
    assert got == {**{f"q{i}": (pytest.approx(80.0), 0.25) for i in range(4)},
                   "h0": (pytest.approx(60.0), 0.5), "h1": (0.0, 0.5), "w": (60.0, 1.0)}
    used = sum((u or 0) / 100 * g for u, g in got.values())
    assert used == pytest.approx(0.8 + 0.3 + 0.6)  # the physical GPUs the cards kept busy, none counted twice
    assert not c.errors


def test_without_shares_every_card_reads_whole(prom: FakePrometheus) -> None:
    """No pod known (the caches have not synced): a card DCGM names two pods on is still split (each is
    taken for a whole card's holder, so half each); HAMi's reading stays the percentage of the card."""
    prom.answer = by_metric(cpu=vector([]), memory=vector([]),
                            gpu=vector([(card("a", "GPU-1"), "50"), (card("b", "GPU-1"), "50")]),
                            hami_util=vector([(vgpu("h", "GPU-2"), "20"), (vgpu("h", "GPU-3"), "40")]))
    got = {s.pod: (s.gpu_util_percent, s.gpus) for s in collector(prom).collect(NOW)}
    assert got == {"a": (25.0, 1.0), "b": (25.0, 1.0), "h": (30.0, 2.0)}


def unquote(literal: str) -> str:
    """The value of a PromQL double-quoted string literal (the escapes promql_string writes)."""
    assert literal[0] == literal[-1] == '"'
    return re.sub(r'\\(.)', lambda m: {"n": "\n", "r": "\r", "t": "\t"}.get(m[1], m[1]), literal[1:-1])


HOSTILE = ['a"b', "c\\d", "e\nf", "g.h|i", 'x"}) or vector(1) # ', "ünï.*"]


def test_hostile_namespaces_are_escaped(prom: FakePrometheus) -> None:
    collector(prom, tuple(HOSTILE)).collect(NOW)
    assert len(prom.queries) == 5
    for query in prom.queries:
        match = re.search(r'namespace=~("(?:[^"\\]|\\.)*")', query)
        assert match is not None, query
        assert query.count("namespace=~") == 1 and "\n" not in query
        pattern = unquote(match[1])
        for value in HOSTILE:
            assert re.fullmatch(pattern, value), (pattern, value)
        for near_miss in ("gxh|i", "g", "ab", "ünïxyz", "e"):
            assert not re.fullmatch(pattern, near_miss), (pattern, near_miss)


def test_escaping_helpers() -> None:
    assert promql_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert unquote(promql_string("".join(HOSTILE))) == "".join(HOSTILE)
    assert regex_literal("a.b|c(d)") == "a\\.b\\|c\\(d\\)"
    assert namespace_matcher(["b", "a", "b"]) == 'namespace=~"a|b"'
    assert namespace_matcher([]) == ""


def test_prometheus_down_is_one_error_and_no_samples() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    c = PrometheusCollector(PrometheusSource(url=f"http://127.0.0.1:{port}", enabled=True, timeout_seconds=2))
    assert c.collect(NOW) == []
    assert c.errors == {"connection": 1}  # the round stops at the first unreachable query
    assert "127.0.0.1" in c.last_error and c.last_success is None


@pytest.mark.parametrize("url", ["http://[not a host", "http://127.0.0.1:99999", "ftp://127.0.0.1/"])
def test_unusable_url_is_a_connection_error(url: str) -> None:
    c = PrometheusCollector(PrometheusSource(url=url, enabled=True, timeout_seconds=1))
    assert c.collect(NOW) == []
    assert c.errors == {"connection": 1}


@pytest.mark.parametrize(("status", "body", "cause"), [
    (500, b"internal error", "http_500"),
    (503, orjson.dumps({"status": "error", "errorType": "unavailable", "error": "overloaded"}), "http_503"),
    (200, b"{not json", "decode"),
    (200, b'"just a string"', "decode"),
    (400, orjson.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}), "query"),
    (200, orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}), "decode"),
    (200, orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": [1, [], None]}}), "series"),
])
def test_bad_answers_are_counted(prom: FakePrometheus, status: int, body: bytes, cause: str) -> None:
    prom.answer = lambda q: (status, body)
    c = collector(prom)
    assert c.collect(NOW) == []
    assert c.errors == {cause: 5 if cause != "series" else 15}
    assert len(prom.queries) == 5  # an answered request does not stop the round
    prom.answer = lambda q: (200, vector([] if "Device_" in q or "vGPU_" in q else [(labels("p"), "1")]))
    assert len(c.collect(NOW)) == 1  # and the next round works
    assert c.errors[cause] == (5 if cause != "series" else 15)


def test_one_failing_query_keeps_the_others(prom: FakePrometheus) -> None:
    ok = vector([(labels("p"), "2")])
    prom.answer = lambda q: ((422, orjson.dumps({"status": "error", "error": "x"})) if "DCGM" in q
                             else (200, vector([]) if "Device_" in q or "vGPU_" in q else ok))
    c = collector(prom)
    assert c.collect(NOW) == [UsageSample(NOW, "team-a", "p", "main", 2.0, 2.0, None, 0, 300.0)]
    assert c.errors == {"query": 1} and c.last_success is None


def test_auto_dcgm_style_is_asked_until_known_then_every_redetect_rounds(prom: FakePrometheus) -> None:
    exported = {"exported_namespace": "team-a", "exported_pod": "p0", "exported_container": "main",
                "namespace": "gpu-operator", "pod": "dcgm-exporter-x", "container": "exporter"}
    styles: list[tuple[dict[str, str], str]] = []

    def answer(q: str) -> tuple[int, bytes]:
        if q == style_query():
            return 200, vector(styles)
        if "DCGM_FI_DEV_GPU_UTIL" in q and styles:  # the DCGM series exist from when the styles say so
            return 200, vector([({**exported, "UUID": "GPU-1"}, "40"), ({**exported, "UUID": "GPU-2"}, "40")])
        return 200, vector([])

    prom.answer = answer
    c = collector(prom, dcgm_labels="auto")
    assert c.collect(NOW) == [] and c.dcgm_style is None  # no DCGM series yet: the namespace style meanwhile
    styles[:] = [({"style": "exported"}, "3"), ({"style": "namespace"}, "1")]
    samples = c.collect(NOW)
    assert c.dcgm_style == EXPORTED_STYLE
    assert [(s.namespace, s.pod, s.container, s.gpu_util_percent, s.gpus) for s in samples] == [
        ("team-a", "p0", "main", 40.0, 2)]
    assert prom.queries[-3] == ('max by (exported_namespace, exported_pod, exported_container, UUID) '
                                '(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""})')
    asked = prom.queries.count(style_query())
    for _ in range(REDETECT_ROUNDS - 1):
        c.collect(NOW)
    assert prom.queries.count(style_query()) == asked  # known: not asked again for a while
    c.collect(NOW)
    assert prom.queries.count(style_query()) == asked + 1
    assert not c.errors


def test_auto_dcgm_style_with_prometheus_down_stops_the_round() -> None:
    c = PrometheusCollector(PrometheusSource(url="http://127.0.0.1:1", enabled=True, timeout_seconds=0.5))
    assert c.collect(NOW) == []
    assert c.errors == {"connection": 1} and c.dcgm_style is None


def test_auto_hami_style_reads_the_names_prometheus_has(prom: FakePrometheus) -> None:
    """HAMi >= 2.8 names (hami_container_device_utilization_ratio) scraped without honorLabels: the
    container's labels are exported_*, the monitor's own pod is `pod`. Detected, then read in that style."""
    current = {"exported_namespace": "team-a", "exported_pod": "h0", "exported_container": "main",
               "namespace": "hami-system", "pod": "hami-device-plugin-x", "device_uuid": "GPU-1", "zone": "vGPU"}
    styles: list[tuple[dict[str, str], str]] = []

    def answer(q: str) -> tuple[int, bytes]:
        if q == hami.style_query():
            return 200, vector(styles)
        if "hami_container_device_utilization_ratio" in q:
            return 200, vector([(current, "12.5")])
        return 200, vector([])

    prom.answer = answer
    c = collector(prom, hami_metrics="auto", gpu=False)
    assert c.collect(NOW) == [] and c.hami_style is None
    assert prom.queries[-1] == hami.style_query()  # no vGPU monitor series in any style: nothing more
    styles[:] = [({"style": "exported"}, "4"), ({"style": "legacy"}, "1")]
    samples = c.collect(NOW)
    assert c.hami_style == hami.EXPORTED
    assert prom.queries[-1] == ('max by (exported_namespace, exported_pod, exported_container, device_uuid) '
                                '(hami_container_device_utilization_ratio{exported_pod!=""})')
    assert [(s.pod, s.container, s.gpu_util_percent, s.gpus) for s in samples] == [("h0", "main", 12.5, 1.0)]
    assert not c.errors

