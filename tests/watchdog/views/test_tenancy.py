"""The tenancy dependency (watchdog/views/tenancy.py) on the simulator's real TokenReview and
SubjectAccessReview: who the caller is (bearer token, or a trusted proxy's headers only from its
addresses), which namespaces it sees, what is cached, and that token mode asks nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.simtools import client_for
from tests.watchdog.views.test_api import health, insert, make_alert, make_run
from volcano_monitor.core.kube.reviews import Reviews, Scope
from volcano_monitor.simulator.authn import Authn
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.auth_settings import AuthSettings
from volcano_monitor.watchdog.views.tenancy import Tenancy, check_reads_scoped

AUTHN = {"users": {"tok-a": {"user": "alice", "groups": ["team-a"]}, "tok-root": {"user": "root"}},
         "rules": [{"group": "team-a", "namespaces": ["team-a"], "verbs": ["list"],
                    "resources": ["jobs.batch.volcano.sh"]},
                   {"group": "team-c", "namespaces": ["team-c"], "verbs": ["list"],
                    "resources": ["jobs.batch.volcano.sh"]},
                   {"user": "root", "namespaces": ["*"], "verbs": ["list"], "resources": ["jobs.batch.volcano.sh"]}]}
PROXY = ("192.0.2.7", 40000)
K8S = AuthSettings(mode="kubernetes", trusted_proxies=["192.0.2.0/28"])


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread() as running:
        running.api.authn = Authn.from_config(AUTHN)
        yield running


def tenancy(sim: SimulatorThread, tmp_path: Path, engine: Engine | None = None,
            settings: AuthSettings = K8S) -> Tenancy:
    return Tenancy(settings, Reviews(client_for(sim, tmp_path), ttl=settings.cache_ttl_seconds), engine,
                   live_namespaces=lambda: ["team-a", "team-b", "team-c"])


def probe(t: Tenancy, peer: tuple[str, int] = ("127.0.0.1", 1234)) -> TestClient:
    """An app with one route answering the caller's scope (sorted, or "all")."""
    app = FastAPI()

    @app.get("/scope")
    def scope(allowed: Scope = Depends(t.scope)) -> object:  # noqa: B008
        return "all" if allowed is None else sorted(allowed)

    @app.get("/everything", dependencies=[Depends(t.cluster_wide)])
    def everything() -> str:
        return "ok"

    return TestClient(app, client=peer)


def test_bearer_tokens_are_reviewed_and_scoped_per_namespace(sim: SimulatorThread, tmp_path: Path) -> None:
    client = probe(tenancy(sim, tmp_path))
    assert client.get("/scope", headers={"Authorization": "Bearer tok-a"}).json() == ["team-a"]
    assert client.get("/scope", headers={"Authorization": "bearer tok-root"}).json() == "all"
    assert client.get("/everything", headers={"Authorization": "Bearer tok-root"}).json() == "ok"
    refused = client.get("/everything", headers={"Authorization": "Bearer tok-a"})
    assert refused.status_code == 403 and "every namespace" in refused.json()["detail"]
    for bad in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dG9rLWE="}):
        answer = client.get("/scope", headers=bad)
        assert answer.status_code == 401 and "nope" not in answer.text and "tok-a" not in answer.text


def test_proxy_headers_count_only_from_trusted_addresses(sim: SimulatorThread, tmp_path: Path) -> None:
    t = tenancy(sim, tmp_path)
    headers = {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "staff, team-c"}
    assert probe(t, PROXY).get("/scope", headers=headers).json() == ["team-c"]
    repeated = [("X-Forwarded-User", "dave"), ("X-Forwarded-Groups", "staff"), ("X-Forwarded-Groups", "team-a")]
    assert probe(t, PROXY).get("/scope", headers=repeated).json() == ["team-a"]
    assert probe(t, ("192.0.2.99", 1)).get("/scope", headers=headers).status_code == 401  # outside the /28
    assert probe(t).get("/scope", headers=headers).status_code == 401
    # From an untrusted peer a token still works, and the headers beside it change nothing.
    assert probe(t).get("/scope", headers={**headers, "Authorization": "Bearer tok-a"}).json() == ["team-a"]
    renamed = AuthSettings(mode="kubernetes", trusted_proxies=["192.0.2.0/28"], user_header="X-Auth-Request-User",
                           groups_header="X-Auth-Request-Groups")
    assert probe(tenancy(sim, tmp_path, settings=renamed), PROXY).get(
        "/scope", headers={"X-Auth-Request-User": "root"}).json() == "all"


def test_answers_and_scopes_are_cached(sim: SimulatorThread, tmp_path: Path) -> None:
    client = probe(tenancy(sim, tmp_path))
    for _ in range(5):
        assert client.get("/scope", headers={"Authorization": "Bearer tok-a"}).json() == ["team-a"]
    # one TokenReview; one cluster-wide review and one per known namespace, once
    assert (sim.api.authn.token_reviews, sim.api.authn.access_reviews) == (1, 4)


def test_token_mode_asks_nothing(sim: SimulatorThread) -> None:
    t = Tenancy(AuthSettings())
    assert probe(t).get("/scope").json() == "all" and probe(t).get("/everything").json() == "ok"
    assert (sim.api.authn.token_reviews, sim.api.authn.access_reviews) == (0, 0)
    with pytest.raises(ValueError, match="needs the API server"):
        Tenancy(K8S)


def test_known_namespaces_come_from_the_ledger_and_the_alerts(sim: SimulatorThread, tmp_path: Path,
                                                              engine: Engine) -> None:
    insert(engine, make_run("r1", "a", namespace="team-x"), make_alert(1, namespace="team-y"),
           make_alert(2, namespace=""))
    t = Tenancy(K8S, Reviews(client_for(sim, tmp_path)), engine)
    assert t.namespaces() == {"team-x", "team-y"}


def test_an_app_with_an_unscoped_read_is_refused(sim: SimulatorThread, tmp_path: Path, engine: Engine) -> None:
    t = tenancy(sim, tmp_path, engine)
    app = create_app(engine, Settings(auth=K8S), health(), clock=lambda: datetime.now(UTC), tenancy=t)
    check_reads_scoped(app, t)  # as built: every read is scoped
    app.get("/api/v1/leak")(lambda: "every namespace")
    with pytest.raises(RuntimeError, match="GET /api/v1/leak must depend on the tenancy"):
        check_reads_scoped(app, t)
