"""The watchdog's HTTP API under generated input: schemathesis reads the OpenAPI schema the watchdog serves
and sends requests it generates from it, valid and invalid, to every operation of a real `volcano-watchdog`
process (its own command, SQLite) watching the simulated cluster.

- With the write token where an operation asks for it: no 5xx; status code, content type, headers and
  body as the schema declares them for that operation; invalid input refused with a 4xx.
- Every write again without a token and with a wrong one, on generated input and on rows that exist (a
  silence, a firing alert, a dead letter): refused with 401, and the rows only the API writes (silences,
  resolve requests, dead letters, Alertmanager's alerts in the outbox) unchanged.

The schema is what users read at /docs: where it and the server disagree, the fix is in the API. Each
operation's Hypothesis run is derandomized and keeps no example database, so every run sends the same
requests; how many, per operation, is asserted and printed at the end of the run (the CI log shows it).
"""

from __future__ import annotations

import functools
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from tests.watchdog.harness import FAST_DETECTORS
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.simulator.stack import Stack

TOKEN = "schema-t0ken-4242"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SPEED = 60
# Per operation and generation mode: ~22 operations, so a few hundred requests in well under a minute.
POSITIVE_EXAMPLES = 12
NEGATIVE_EXAMPLES = 10
UNAUTHORIZED_EXAMPLES = 8  # per write operation, each sent without a token and with a wrong one
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@dataclass
class Served:
    url: str
    database: Path
    silence_id: int  # rows that exist, for the writes without a token
    alert_id: int
    dead_letter_id: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`volcano-watchdog` as a user starts it, on SQLite, with the write token, a receiver nobody listens on
    (one attempt: its messages become dead letters to retry) and capability planning in dry-run (so its
    route is served), once the ledger, the alert book and the outbox hold rows to show."""
    tmp = tmp_path_factory.mktemp("schema")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    database = tmp / "watchdog.db"
    stack = Stack(tmp / "logs")
    with SimulatorThread(scenario="default", speed=SPEED, tick_interval=0.1) as sim:
        kubeconfig = tmp / "kubeconfig"
        write_kubeconfig(kubeconfig, sim.url)
        config = stack.write_yaml("watchdog.yaml", {
            "api_token": TOKEN,
            "detectors": FAST_DETECTORS,
            "sources": {"metrics_api": {"interval_seconds": 0.5}, "rollup_seconds": 1},
            "notifications": {
                "receivers": [{"name": "nobody", "webhook": {"url": f"http://127.0.0.1:{free_port()}/hook"}}],
                "route": {"receiver": "nobody", "group_wait": 0},
                "delivery": {"poll_interval_seconds": 0.2, "max_attempts": 1, "timeout_seconds": 2}},
            "capability": {"enabled": True, "mode": "dry-run", "reconcile_interval_seconds": 2,
                           "policies": {"default": {"share": {"fraction": 0.5}}}}})
        try:
            stack.start_python("watchdog", "volcano_monitor.watchdog.runtime.cli", "--kubeconfig", str(kubeconfig),
                               "--database-url", f"sqlite:///{database}", "--listen", f"127.0.0.1:{port}",
                               "--config", str(config), ready_url=f"{url}/readyz")
            with httpx.Client(base_url=url, timeout=5) as http:
                wait_for(lambda: http.get("/api/v1/jobs").json()["total"] > 0
                         and http.get("/api/v1/alerts", params={"state": "firing"}).json()["total"] > 0
                         and bool(http.get("/api/v1/notifications", params={"state": "dead"}, headers=AUTH).json()),
                         timeout=60, interval=0.5)
                silence = http.post("/api/v1/silences", headers=AUTH, json={
                    "matchers": ['alertname="NothingReal"'], "ends_at": "2999-01-01T00:00:00Z"})
                assert silence.status_code == 201, silence.text
                alert = http.get("/api/v1/alerts", params={"state": "firing"}).json()["items"][0]
                dead = http.get("/api/v1/notifications", params={"state": "dead"}, headers=AUTH).json()[0]
            yield Served(url, database, silence.json()["id"], alert["id"], dead["id"])
        finally:
            codes = stack.stop()
    assert codes == {"watchdog": 0}, f"{codes}; see {stack.log('watchdog')}"


def operations(url: str) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


def needs_token(operation: Any) -> bool:
    return bool(operation.definition.raw.get("security"))


def negatable(operation: Any) -> bool:
    """Whether schemathesis can send invalid input to it. Not for an operation without parameters or body,
    nor for one whose only input is a path string whose sole constraints are a length and "no NUL":
    schemathesis never puts a NUL in a path, so it drops every negated case after drawing it (seconds,
    no request). Those paths get their invalid requests from `HAND_WRITTEN_INVALID`."""
    if operation.body or any(True for _ in operation.query) or any(True for _ in operation.headers):
        return True
    return any(p.definition.get("schema", {}).get("type") != "string" for p in operation.path_parameters)


HAND_WRITTEN_INVALID = {"uid": ["x" * 65, "nul\x00inside"]}


def run(operation: Any, mode: GenerationMode, examples: int, send: Callable[[Any], None]) -> None:
    """Hypothesis over the operation's cases: derandomized, no example database, no deadline (a shared
    2-core machine), no health check (a slow draw is not the server's fault): the same requests every run."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
    def each(case: Any) -> None:
        send(case)

    each()


def report(record_property: Callable[[str, object], None], title: str, sent: Counter[str]) -> None:
    """Into the CI log (tests/conftest.py prints each test's "summary" at the end of the run): what was tried."""
    lines = [f"{title}: {len(sent)} operations, {sum(sent.values())} requests",
             *(f"  {count:4d}  {label}" for label, count in sorted(sent.items()))]
    record_property("summary", "\n".join(lines))


def test_every_operation_under_generated_input(served: Served, record_property: Callable[[str, object], None]) -> None:
    found = operations(served.url)
    sent: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    failures: list[str] = []

    def send(case: Any, extra: list[Any]) -> None:
        # A negative case may be the missing token itself: then it goes without one and must be refused.
        without = needs_token(case.operation) and case.operation.schema.is_security_param_negated(case)
        headers = AUTH if needs_token(case.operation) and not without else {}
        response = case.call(base_url=served.url, headers=headers, timeout=30)
        sent[case.operation.label] += 1
        if without:
            refused[case.operation.label] += 1
            # FastAPI reads a JSON body before it runs the route's dependencies: a body that is not JSON
            # is refused as such (400/422) before the token is looked at. Anything else: 401.
            garbled = response.status_code in (400, 422) and any(
                word in response.text for word in ("json_invalid", "not valid JSON", "error parsing the body"))
            assert response.status_code == 401 or garbled, \
                f"{case.operation.label} without a token: {response.status_code} {response.text[:200]}"
        case.validate_response(response, checks=CHECKS + extra, headers=headers)

    for operation in found:
        modes: list[tuple[GenerationMode, int, list[Any]]] = [(GenerationMode.POSITIVE, POSITIVE_EXAMPLES, [])]
        if negatable(operation):
            modes.append((GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES, [negative_data_rejection]))
        for mode, examples, extra in modes:
            try:
                run(operation, mode, examples, functools.partial(send, extra=extra))
            except (Exception, FailureGroup) as exc:  # every operation's findings in one report
                failures.append(f"{operation.label} ({mode.value}): {exc}")
        for name, values in HAND_WRITTEN_INVALID.items():
            if not negatable(operation) and name in {p.name for p in operation.path_parameters}:
                for value in values:
                    case = operation.Case(path_parameters={name: value})
                    response = case.call(base_url=served.url, headers=AUTH if needs_token(operation) else {})
                    sent[operation.label] += 1
                    try:
                        assert response.status_code == 422, f"{operation.label} {value!r}: {response.status_code}"
                        case.validate_response(response, checks=CHECKS)
                    except (Exception, FailureGroup) as exc:
                        failures.append(f"{operation.label} (hand-written {value!r}): {exc}")
    report(record_property, "schemathesis, every operation", sent)
    assert not failures, "\n\n".join(failures)
    assert set(sent) == {op.label for op in found} and len(found) >= 20
    assert sum(sent.values()) >= 200
    # Every guarded operation was also tried without its token (a negative case of its security).
    assert set(refused) == {op.label for op in found if needs_token(op)}, refused


def api_only_rows(database: Path) -> dict[str, list[tuple[Any, ...]]]:
    """What only the API writes, read straight from the watchdog's SQLite file."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as db:
        return {
            "silences": db.execute("SELECT * FROM silences ORDER BY id").fetchall(),
            "alert_requests": db.execute("SELECT * FROM alert_requests ORDER BY id").fetchall(),
            "dead_letters": db.execute("SELECT id, state, attempts, next_attempt_at FROM notification_deliveries"
                                       " WHERE state = 'dead' ORDER BY id").fetchall(),
            "from_alertmanager": db.execute("SELECT id FROM notification_entries WHERE json_extract(alert, "
                                            "'$.source') = 'alertmanager' ORDER BY id").fetchall(),
        }


def test_no_write_without_the_token(served: Served, record_property: Callable[[str, object], None]) -> None:
    writes = [op for op in operations(served.url) if op.method.upper() != "GET"]
    assert {op.label for op in writes} == {
        "POST /api/v1/alerts/{alert_id}/resolve", "POST /api/v1/alertmanager", "POST /api/v1/silences",
        "DELETE /api/v1/silences/{silence_id}", "POST /api/v1/notifications/{delivery_id}/retry"}
    assert all(needs_token(op) for op in writes)
    existing = {"silence_id": served.silence_id, "alert_id": served.alert_id, "delivery_id": served.dead_letter_id}
    before = api_only_rows(served.database)
    assert before["silences"] and before["dead_letters"]  # the rows the writes below would change
    sent: Counter[str] = Counter()
    answers: Counter[int] = Counter()

    def send(case: Any) -> None:
        for headers in ({}, {"Authorization": "Bearer not-the-token"}, {"Authorization": "Basic dXNlcjpwYXNz"}):
            response = case.call(base_url=served.url, headers=headers, timeout=30)
            sent[case.operation.label] += 1
            answers[response.status_code] += 1
            assert response.status_code == 401, f"{case.operation.label} {headers}: {response.status_code}"
            assert response.headers.get("www-authenticate") == ["Bearer"]
            case.validate_response(response, checks=CHECKS, headers=headers)

    for operation in writes:
        run(operation, GenerationMode.POSITIVE, UNAUTHORIZED_EXAMPLES, send)
        names = {p.name for p in operation.path_parameters}
        if names:  # and on the row that exists, which the write would change
            send(operation.Case(path_parameters={name: existing[name] for name in names}))
    report(record_property, "schemathesis, writes without the token", sent)
    assert answers == {401: sum(sent.values())} and sum(sent.values()) >= 5 * UNAUTHORIZED_EXAMPLES * 3
    after = api_only_rows(served.database)
    # Messages die on their own while this runs (new alerts, nobody listening): compare the letters that
    # were dead before; a retry would have taken one out of that state.
    after["dead_letters"] = [row for row in after["dead_letters"] if row in before["dead_letters"]]
    assert after == before
