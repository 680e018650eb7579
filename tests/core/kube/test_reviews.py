"""TokenReview and SubjectAccessReview through the raw client against the simulator's endpoints
(simulator/authn.py), and the cache that spares the API server."""

from __future__ import annotations

from pathlib import Path

import pytest
import urllib3
from kubernetes import client

from tests.simtools import FakeClock, client_for
from volcano_monitor.core.kube.reviews import Identity, Reviews, ReviewUnavailable, TtlCache, token_key
from volcano_monitor.simulator.authn import Authn
from volcano_monitor.simulator.runtime import SimulatorThread

AUTHN = {
    "users": {"tok-alice": {"user": "alice", "groups": ["team-a"]},
              "tok-root": {"user": "root", "groups": ["admins"]},
              "tok-old": {"user": "bob", "groups": ["team-b"], "expired": True},
              "tok-narrow": {"user": "root", "groups": ["admins"], "uid": "42",
                             "extra": {"volcano-sim/scopes": ["team-a"]}}},
    "rules": [{"group": "team-a", "namespaces": ["team-a"], "verbs": ["list"],
               "resources": ["jobs.batch.volcano.sh"]},
              {"group": "admins", "namespaces": ["*"], "verbs": ["*"], "resources": ["*"]},
              {"user": "alice", "namespaces": ["shared"], "verbs": ["get"], "resources": ["jobs.batch.volcano.sh"]}],
}


def reviews(sim: SimulatorThread, api: client.ApiClient, clock: FakeClock) -> Reviews:
    sim.api.authn = Authn.from_config(AUTHN)
    return Reviews(api, ttl=30.0, clock=clock)


def test_token_review_names_the_user_and_refuses_unknown_and_expired_tokens(sim: SimulatorThread,
                                                                             api: client.ApiClient) -> None:
    r = reviews(sim, api, FakeClock(0.0))
    assert r.authenticate("tok-alice") == Identity("alice", ("team-a",))
    assert r.authenticate("tok-old") is None
    assert r.authenticate("no-such-token") is None
    assert r.authenticate("") is None


def test_access_review_follows_the_rules_per_namespace_verb_and_resource(sim: SimulatorThread,
                                                                         api: client.ApiClient) -> None:
    r = reviews(sim, api, FakeClock(0.0))
    alice, root = Identity("alice", ("team-a",)), Identity("root", ("admins",))
    assert r.allowed(alice, "team-a") is True
    assert r.allowed(alice, "team-b") is False
    assert r.allowed(alice, "shared") is False  # get, not list
    assert r.allowed(alice, "") is False  # every namespace: only a "*" rule
    assert r.allowed(root, "") is True
    assert Reviews(api, resource="pods", group="").allowed(alice, "team-a") is False


def test_answers_are_cached_by_token_hash_until_the_ttl(sim: SimulatorThread, api: client.ApiClient) -> None:
    clock = FakeClock(0.0)
    r = reviews(sim, api, clock)
    alice = Identity("alice", ("team-a",))
    for _ in range(3):
        assert r.authenticate("tok-alice") == alice
        assert r.allowed(alice, "team-a") is True
    assert (sim.api.authn.token_reviews, sim.api.authn.access_reviews) == (1, 1)
    assert "tok-alice" not in repr(r.tokens._items) and token_key("tok-alice") in r.tokens._items
    sim.api.authn = Authn.from_config({"users": {}, "rules": []})  # revoked: seen once the TTL is over
    clock.t += 29.0
    assert r.authenticate("tok-alice") == alice
    clock.t += 2.0
    assert r.authenticate("tok-alice") is None
    assert r.allowed(alice, "team-a") is False


def test_an_api_server_that_fails_is_unavailable_not_a_denial_and_is_not_cached(
        sim: SimulatorThread, api: client.ApiClient) -> None:
    r = reviews(sim, api, FakeClock(0.0))
    sim.api.authn.unavailable = True
    with pytest.raises(ReviewUnavailable) as failed:
        r.authenticate("tok-alice")
    assert "tok-alice" not in str(failed.value) and "500" in str(failed.value)
    with pytest.raises(ReviewUnavailable):
        r.allowed(Identity("alice"), "team-a")
    sim.api.authn.unavailable = False
    assert r.authenticate("tok-alice") == Identity("alice", ("team-a",))


def test_an_unreachable_api_server_is_unavailable(tmp_path: Path) -> None:
    with SimulatorThread() as sim:
        api = client_for(sim, tmp_path)
    with pytest.raises(ReviewUnavailable):
        Reviews(api, timeout=1.0).authenticate("tok-alice")


def test_sim_authn_endpoint_sets_users_and_refuses_bad_config(sim: SimulatorThread) -> None:
    http = urllib3.PoolManager()
    ok = http.request("POST", f"{sim.url}/sim/authn", body=b'{"users": {"t": {"user": "u"}}, "rules": []}')
    assert ok.status == 200 and sim.api.authn.users["t"].name == "u"
    bad = http.request("POST", f"{sim.url}/sim/authn", body=b'{"rules": [{"namespaces": ["x"]}]}')
    assert bad.status == 400 and b"needs a user or a group" in bad.data
    malformed = http.request("POST", f"{sim.url}/apis/authentication.k8s.io/v1/tokenreviews", body=b"{")
    assert malformed.status == 400


def test_ttl_cache_forgets_the_oldest_beyond_its_size() -> None:
    cache: TtlCache[str, int] = TtlCache(10.0, size=2, clock=FakeClock(0.0))
    for i, key in enumerate("abc"):
        cache.put(key, i)
    assert cache.get("a") == (False, None) and cache.get("c") == (True, 2) and len(cache) == 2


def test_a_token_narrowed_through_extra_keeps_its_narrowing_in_access_reviews(sim: SimulatorThread,
                                                                              api: client.ApiClient) -> None:
    """TokenReview's uid and extra go back into every SubjectAccessReview (as kube-rbac-proxy does): root's
    token narrowed to team-a must not read with root's rights."""
    r = reviews(sim, api, FakeClock(0.0))
    narrow = r.authenticate("tok-narrow")
    assert narrow == Identity("root", ("admins",), "42", (("volcano-sim/scopes", ("team-a",)),))
    assert narrow != r.authenticate("tok-root")  # cached apart from the same user's full token
    assert narrow is not None
    assert (r.allowed(narrow, "team-a"), r.allowed(narrow, "team-b"), r.allowed(narrow, "")) == (True, False, False)
    root = r.authenticate("tok-root")
    assert root is not None and r.allowed(root, "team-b") and r.allowed(root, "")
