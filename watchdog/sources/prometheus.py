"""Usage from Prometheus: cAdvisor CPU and working-set memory, DCGM GPU utilisation per card and HAMi's per
container vGPU utilisation, as instant queries, merged into one `UsageSample` per container.

Why GPU usage is read per card and converted (watchdog.sources.shared_gpus): on shared cards (HAMi, Volcano's
vGPU) a pod holds a fraction of a card. HAMi's series say what each container used; DCGM's only what the card
did, which is split across the pods sharing it in proportion to their physical shares (`shares`, the pod's
physical GPUs from the informer caches). Either way a sample's `gpu_util_percent` of its `gpus` is the physical
GPUs the container kept busy. A pod with HAMi series takes them over DCGM's.

Why each query is its own small class (in the manner of krr): the PromQL and the way its result is
read stay together, and a test can check one without the others.

Why escaping matters: namespace names come from configuration and label values from the cluster;
either put into PromQL unescaped could break the query or change what it selects. `promql_string`
makes any text a PromQL string literal, `regex_literal` makes it match itself inside `=~`.

Why the DCGM label style: the DCGM exporter labels each GPU with the pod that holds it as
`namespace/pod/container`. Scraped with honorLabels those names stay; scraped without, the target's own
`namespace/pod/container` (the exporter's pod) win and the GPU's become `exported_namespace/exported_pod/
exported_container`. `dcgm_labels: auto` asks Prometheus which style its series have (`style_query`)
and queries that one; until a DCGM series exists the `namespace` style is assumed.

Why `collect()` never raises: Prometheus down, answering 500, garbage or `status: error` is counted
in `errors` and logged once per streak, and the round gives what the other queries returned (nothing
when Prometheus cannot be reached at all), so the poll loop carries on.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from volcano_monitor.watchdog.sources import hami
from volcano_monitor.watchdog.sources.label_style import busiest_style
from volcano_monitor.watchdog.sources.settings import PrometheusSource
from volcano_monitor.watchdog.sources.shared_gpus import GpuUse, ShareLookup, from_dcgm, from_hami
from volcano_monitor.watchdog.state.samples import UsageSample

log = logging.getLogger(__name__)

_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_REGEX_SPECIALS = frozenset("\\.+*?()|[]{}^$")
_WINDOW_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
CONTAINER_MATCHERS = 'container!="", container!="POD"'

Key = tuple[str, str, str]  # namespace, pod, container
NAMESPACE_STYLE, EXPORTED_STYLE = "namespace", "exported"
DCGM_LABELS = {NAMESPACE_STYLE: ("namespace", "pod", "container"),
               EXPORTED_STYLE: ("exported_namespace", "exported_pod", "exported_container")}
REDETECT_ROUNDS = 60  # `auto`: rounds between two looks at the style (an exporter may be redeployed)


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal (backslash, quote and newlines escaped)."""
    return '"' + "".join(_STRING_ESCAPES.get(ch, ch) for ch in value) + '"'


def regex_literal(value: str) -> str:
    """An RE2 pattern matching exactly `value` (its metacharacters backslash-escaped)."""
    return "".join("\\" + ch if ch in _REGEX_SPECIALS else ch for ch in value)


def namespace_matcher(namespaces: Sequence[str], label: str = "namespace") -> str:
    """`namespace=~"a|b"` for the given namespaces ("" for all)."""
    if not namespaces:
        return ""
    return f"{label}=~" + promql_string("|".join(regex_literal(ns) for ns in sorted(set(namespaces))))


def _selector(*matchers: str) -> str:
    return "{" + ", ".join(m for m in matchers if m) + "}"


class QueryError(Exception):
    """A query that Prometheus did not answer usefully; `cause` is the `errors` key to count."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True, slots=True)
class Query:
    """One instant query whose result is a vector by namespace, pod and container."""

    name: str
    promql: str
    labels: tuple[str, str, str] = DCGM_LABELS[NAMESPACE_STYLE]  # where namespace, pod and container are

    def read(self, data: Any) -> tuple[dict[Key, float], int]:
        """(value per container, count of malformed or non-finite series skipped)."""
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise QueryError("decode", f"{self.name}: expected a vector result")
        values: dict[Key, float] = {}
        skipped = 0
        for series in data["result"]:
            try:
                labels, (_, raw) = series["metric"], series["value"]
                key = (labels[self.labels[0]], labels[self.labels[1]], labels[self.labels[2]])
                value = float(raw)
            except (KeyError, TypeError, ValueError):
                skipped += 1
                continue
            if not all(isinstance(part, str) and part for part in key) or not math.isfinite(value) or value < 0:
                skipped += 1
                continue
            values[key] = value
        return values, skipped


def cpu_query(rate_window: str, namespaces: Sequence[str] = ()) -> Query:
    selector = _selector(CONTAINER_MATCHERS, namespace_matcher(namespaces))
    return Query("cpu", "sum by (namespace, pod, container) "
                        f"(rate(container_cpu_usage_seconds_total{selector}[{rate_window}]))")


def memory_query(namespaces: Sequence[str] = ()) -> Query:
    # max: a container can have more than one cgroup series (e.g. after a restart); they do not add up.
    selector = _selector(CONTAINER_MATCHERS, namespace_matcher(namespaces))
    return Query("memory", f"max by (namespace, pod, container) (container_memory_working_set_bytes{selector})")


def _dcgm_selector(style: str, namespaces: Sequence[str]) -> tuple[str, tuple[str, str, str]]:
    """The DCGM selector of GPUs some pod holds, in `style`, and its namespace/pod/container labels."""
    names = DCGM_LABELS[style]
    # In the exported style the target's own `pod` label is set too: only exported_pod names the GPU's pod.
    return _selector(f'{names[1]}!=""', namespace_matcher(namespaces, names[0])), names


def gpu_card_query(namespaces: Sequence[str] = (), style: str = NAMESPACE_STYLE) -> str:
    """Per container and card (`UUID`): DCGM's utilisation of the card. `max` per card: one card scraped by two
    jobs must not count twice; the card is kept so that pods sharing it can be told (shared_gpus.from_dcgm)."""
    selector, names = _dcgm_selector(style, namespaces)
    return f"max by ({', '.join(names)}, UUID) (DCGM_FI_DEV_GPU_UTIL{selector})"


def card_util_query() -> str:
    """Per card (`UUID`): DCGM's utilisation, pod labels or not. On shared cards DCGM's pod mapping usually names
    no pod (the vGPU device IDs are not the card's); the vGPU monitor's members say who is on the card."""
    return 'max by (UUID) (DCGM_FI_DEV_GPU_UTIL{UUID!=""})'


def style_query() -> str:
    """How many DCGM series (of GPUs a pod holds) each label style has, as `{style="namespace"|"exported"}`."""
    return ('count by (style) (label_replace(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}, "style", "exported", "", "") '
            'or label_replace(DCGM_FI_DEV_GPU_UTIL{exported_pod="", pod!=""}, "style", "namespace", "", ""))')


def read_style(data: Any) -> str | None:
    """The style with more series in `style_query`'s answer; None when there is no DCGM series at all."""
    return busiest_style(data, DCGM_LABELS)


def read_cards(data: Any, labels: Sequence[str]) -> tuple[dict[tuple[str, ...], float], int]:
    """A vector keyed by the values of `labels` (namespace, pod, container, then the card's uuid): (value per
    key, count of series skipped because a name label is missing or empty, or the value is not a finite number
    >= 0). The card label may be empty (kept as ""): such a series still belongs to its container."""
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise ValueError("expected a vector result")
    values: dict[tuple[str, ...], float] = {}
    skipped = 0
    for series in data["result"]:
        try:
            metric, (_, raw) = series["metric"], series["value"]
            key = tuple(metric.get(name, "") if i >= 3 else metric[name] for i, name in enumerate(labels))
            value = float(raw)
        except (KeyError, TypeError, ValueError, AttributeError):
            skipped += 1
            continue
        if not all(isinstance(part, str) for part in key) or not all(key[:3]) \
                or not math.isfinite(value) or value < 0:
            skipped += 1
            continue
        values[key] = value
    return values, skipped


class PrometheusCollector:
    def __init__(self, settings: PrometheusSource, namespaces: Sequence[str] = (),
                 client: httpx.Client | None = None, *, clock: Callable[[], float] = time.time,
                 shares: ShareLookup | None = None) -> None:
        self.settings = settings
        self.namespaces = tuple(namespaces)
        self.url = settings.url.rstrip("/") + "/api/v1/query"
        headers = {"Accept": "application/json"}
        if settings.bearer_token is not None:
            headers["Authorization"] = f"Bearer {settings.bearer_token.get_secret_value()}"
        self.headers = headers
        self.client = client if client is not None else httpx.Client(timeout=settings.timeout_seconds)
        self.clock = clock
        self.queries = [cpu_query(settings.rate_window, namespaces), memory_query(namespaces)]
        # The DCGM label style: configured, or (auto) detected; None while auto has seen no DCGM series.
        self.dcgm_style: str | None = None if settings.dcgm_labels == "auto" else settings.dcgm_labels
        # HAMi's naming style, the same way; and each pod's physical GPUs (None: every card counts as whole).
        self.hami_style: str | None = None if settings.hami_metrics == "auto" else settings.hami_metrics
        self._rounds_since: Counter[str] = Counter()  # collection rounds since each style was last asked
        self.shares = shares
        # Health, read by the watchdog's self-metrics.
        self.errors: Counter[str] = Counter()
        self.skipped = 0  # series dropped because they were malformed
        self.last_success: float | None = None
        self.last_error = ""
        self._failing = 0

    def close(self) -> None:
        self.client.close()

    def query(self, promql: str, at: float) -> Any:
        """One instant query; the `data` of a successful answer, else QueryError."""
        try:
            response = self.client.post(self.url, data={"query": promql, "time": f"{at:.3f}"},
                                        headers=self.headers, timeout=self.settings.timeout_seconds)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise QueryError("connection", f"cannot reach Prometheus at {self.url}: {exc!r}") from exc
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            cause = "decode" if response.status_code < 300 else f"http_{response.status_code}"
            raise QueryError(cause, f"HTTP {response.status_code} from Prometheus, not a JSON object")
        if body.get("status") != "success":
            cause = "query" if response.status_code < 500 else f"http_{response.status_code}"
            raise QueryError(cause, f"Prometheus answered {response.status_code} {body.get('errorType', '')}: "
                                    f"{str(body.get('error', ''))[:300]}")
        return body.get("data")

    def gpu_card_query(self) -> str:
        return gpu_card_query(self.namespaces, self.dcgm_style or NAMESPACE_STYLE)

    def hami_util_query(self) -> str:
        style = self.hami_style or hami.LEGACY
        return hami.util_query(style, namespace_matcher(self.namespaces, hami.STYLES[style].labels[0]))

    def hami_members_query(self) -> str:
        style = self.hami_style or hami.LEGACY
        return hami.members_query(style, namespace_matcher(self.namespaces, hami.STYLES[style].labels[0]))

    def _detect_style(self, now: float, failures: list[str]) -> bool:
        """`auto`: which label style the DCGM series have (`dcgm_style`)."""
        return self._detect("dcgm_style", self.settings.dcgm_labels, style_query(), DCGM_LABELS,
                            lambda found: f"DCGM series are labelled in the {found} style "
                                          f"({', '.join(DCGM_LABELS[found])})", now, failures)

    def _detect_hami_style(self, now: float, failures: list[str]) -> bool:
        """`auto`: which of HAMi's naming styles Prometheus holds (`hami_style`)."""
        return self._detect("hami_style", self.settings.hami_metrics, hami.style_query(), hami.STYLES,
                            lambda found: f"HAMi's vGPU series use the {found} names ({hami.STYLES[found].util})",
                            now, failures)

    def _detect(self, attribute: str, mode: str, promql: str, known: Collection[str],
                describe: Callable[[str], str], now: float, failures: list[str]) -> bool:
        """Set `attribute` to the style Prometheus holds, asked while unknown and every REDETECT_ROUNDS (a
        configured style, not `auto`, is never asked). False when Prometheus cannot be reached (the round's
        other queries would only time out too)."""
        if mode != "auto":
            return True
        self._rounds_since[attribute] += 1
        current: str | None = getattr(self, attribute)
        if current is not None and self._rounds_since[attribute] < REDETECT_ROUNDS:
            return True
        try:
            found = busiest_style(self.query(promql, now), known)
        except QueryError as exc:
            self.errors[exc.cause] += 1
            failures.append(f"{attribute}: {exc}")
            return exc.cause != "connection"
        self._rounds_since[attribute] = 0
        if found is not None and found != current:
            log.info("%s", describe(found))
        setattr(self, attribute, found or current)
        return True

    def _devices(self, name: str, promql: str, labels: Sequence[str], now: float,
                 failures: list[str]) -> tuple[dict[tuple[str, ...], float], bool]:
        """One per-card query: its values ({} when it failed: counted, and noted in `failures`) and whether
        Prometheus could be reached."""
        try:
            data = self.query(promql, now)
            try:
                values, skipped = read_cards(data, labels)
            except ValueError as exc:
                raise QueryError("decode", f"{name}: {exc}") from exc
        except QueryError as exc:
            self.errors[exc.cause] += 1
            failures.append(f"{name}: {exc}")
            return {}, exc.cause != "connection"
        self.skipped += skipped
        if skipped:
            self.errors["series"] += skipped
        return values, True

    def collect(self, now: float) -> list[UsageSample]:
        """One round of instant queries at `now`, merged per container."""
        results: dict[str, dict[Key, float]] = {}
        failures: list[str] = []
        reachable = True
        for q in self.queries:
            try:
                values, skipped = q.read(self.query(q.promql, now))
            except QueryError as exc:
                self.errors[exc.cause] += 1
                failures.append(f"{q.name}: {exc}")
                if exc.cause == "connection":
                    reachable = False
                    break  # unreachable: the other queries would only wait for their timeouts too
                continue
            self.skipped += skipped
            if skipped:
                self.errors["series"] += skipped
            results[q.name] = values
        cards: dict[tuple[str, ...], float] = {}  # DCGM: per (container, card) its card's utilisation
        if reachable and self.settings.gpu:
            reachable = self._detect_style(now, failures)
        if reachable and self.settings.gpu:
            names = DCGM_LABELS[self.dcgm_style or NAMESPACE_STYLE]
            cards, reachable = self._devices("gpu_util", self.gpu_card_query(), (*names, "UUID"), now, failures)
        vgpus: dict[tuple[str, ...], float] = {}  # HAMi: per (container, card) its utilisation in % of the card
        if reachable and self.settings.hami:
            reachable = self._detect_hami_style(now, failures)
        # `auto` with no vGPU monitor series in any style (no HAMi, no Volcano vGPU): nothing to ask for
        if reachable and self.settings.hami and (self.hami_style is not None or self.settings.hami_metrics != "auto"):
            hami_names = hami.STYLES[self.hami_style or hami.LEGACY]
            labels = (*hami_names.labels, hami_names.device)
            vgpus, reachable = self._devices("hami_util", self.hami_util_query(), labels, now, failures)
            members: dict[tuple[str, ...], float] = {}
            if reachable and self.settings.gpu:
                members, reachable = self._devices("hami_members", self.hami_members_query(), labels, now, failures)
            if reachable and {key for key in members if key[3]} - set(cards):
                # containers on cards DCGM names no pod on: the card's utilisation, for the split
                per_card, reachable = self._devices("gpu_card_util", card_util_query(), ("UUID",), now, failures)
                for key in members:
                    if (key[3],) in per_card:
                        cards.setdefault(key, per_card[(key[3],)])
        gpu = from_dcgm(cards, self.shares)
        if vgpus:
            # HAMi knows which container used its vGPU: it replaces DCGM's reading of all the pod's containers.
            hami_use = from_hami(vgpus, self.shares)
            pods = {key[:2] for key in hami_use}
            gpu = {key: use for key, use in gpu.items() if key[:2] not in pods} | hami_use
        self._report(failures)
        return self._merge(results, gpu, now)

    def _report(self, failures: list[str]) -> None:
        if failures:
            self.last_error = failures[0]
            self._failing += 1
            if self._failing in (1, 10) or self._failing % 100 == 0:
                log.warning("Prometheus query round failed (%d in a row): %s", self._failing, "; ".join(failures))
            return
        if self._failing:
            log.info("Prometheus queries work again after %d failed rounds", self._failing)
        self._failing = 0
        self.last_success = self.clock()

    def _merge(self, results: dict[str, dict[Key, float]], gpu: dict[Key, GpuUse], now: float) -> list[UsageSample]:
        window = _WINDOW_UNITS[self.settings.rate_window[-1]] * float(self.settings.rate_window[:-1])
        cpu = results.get("cpu", {})
        memory = results.get("memory", {})
        keys = set(cpu) | set(memory) | set(gpu)
        samples = []
        for key in sorted(keys):
            use = gpu.get(key)
            samples.append(UsageSample(now, key[0], key[1], key[2], cpu.get(key), memory.get(key),
                                       use.util_percent if use is not None else None,
                                       use.gpus if use is not None else 0, window))
        return samples
