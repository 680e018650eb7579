"""Each team sees its own (issue 32, section 3), against a real watchdog process on the simulated cluster
whose TokenReview and SubjectAccessReview decide (tests/watchdog/views/tenants.py): alice, allowed to list
Volcano jobs in team-a only, sees team-a's jobs, costs, alerts and queue usage and nothing of team-b;
another team's job is a 404; a bad, expired or missing token is a 401 of one line naming no token; proxy
headers from an untrusted address are ignored; an API server that cannot review is a 503."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.watchdog.views.tenants import ALICE, EXPIRED, ROOT, WRITE_TOKEN, Site, tenant_watchdog


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with tenant_watchdog(tmp_path_factory.mktemp("tenants")) as running:
        yield running


def namespaces(items: list[dict[str, object]]) -> set[object]:
    return {item["namespace"] for item in items}


def one_line_401(response: object, *secrets: str) -> None:
    import httpx

    assert isinstance(response, httpx.Response)
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    text = response.text
    assert "\n" not in text and list(response.json()) == ["detail"], text
    assert not any(secret in text for secret in secrets) and "Traceback" not in text


@pytest.mark.slow(60)
def test_a_team_a_user_sees_team_a_jobs_and_nothing_of_team_b(site: Site) -> None:
    everything = site.get("/api/v1/jobs?limit=1000", ROOT).json()["items"]
    assert {"team-a", "team-b"} <= namespaces(everything)
    mine = site.get("/api/v1/jobs?limit=1000", ALICE).json()
    assert mine["items"] and namespaces(mine["items"]) == {"team-a"}
    assert mine["total"] == sum(1 for job in everything if job["namespace"] == "team-a") or mine["total"] > 0
    assert site.get("/api/v1/jobs?namespace=team-b", ALICE).json() == {"total": 0, "limit": 100, "offset": 0,
                                                                       "items": []}
    theirs = next(job for job in everything if job["namespace"] == "team-b")
    ours = next(job for job in everything if job["namespace"] == "team-a")
    hidden = site.get(f"/api/v1/jobs/{theirs['uid']}", ALICE)
    assert hidden.status_code == 404 and hidden.json() == {"detail": "no such job run"}  # as if it did not exist
    assert site.get(f"/api/v1/jobs/{ours['uid']}", ALICE).json()["uid"] == ours["uid"]
    why = site.get(f"/api/v1/jobs/{theirs['uid']}/why", ALICE)
    assert why.status_code in (404, 503)  # 503 only before the informers synced; never the job's answer
    assert why.status_code == 404 or "synced" in why.text


@pytest.mark.slow(30)
def test_alerts_costs_and_queues_are_team_a_only(site: Site) -> None:
    everything = site.get("/api/v1/alerts?limit=1000", ROOT).json()["items"]
    assert len(namespaces(everything)) >= 2
    mine = site.get("/api/v1/alerts?limit=1000", ALICE).json()["items"]
    assert mine and namespaces(mine) == {"team-a"}
    theirs = next(a for a in everything if a["namespace"] != "team-a")
    assert site.get(f"/api/v1/alerts/{theirs['id']}", ALICE).status_code == 404

    path = "/api/v1/reports?by=namespace&since=1d&format=json"
    before = site.get(path, ROOT).json()  # running jobs' cost grows: alice's falls between two of root's
    report = site.get(path, ALICE).json()
    after = site.get(path, ROOT).json()
    assert [g["group"] for g in report["groups"]] == ["team-a"]
    assert {w["namespace"] for w in report["top_wasters"]} <= {"team-a"}
    assert {"team-a", "team-b"} <= {g["group"] for g in after["groups"]}
    team_a = [next(g for g in r["groups"] if g["group"] == "team-a") for r in (before, after)]
    for key in ("runs", "cost_requested", "cost_used"):  # alice's total is team-a's, not the cluster's
        assert team_a[0][key] <= report["total"][key] <= team_a[1][key], key
    assert report["total"]["cost_requested"] > 0 and report["total"]["runs"] < after["total"]["runs"]
    csv = site.get("/api/v1/reports?by=namespace&since=1d&format=focus", ALICE).text
    assert "team-b" not in csv and "team-a" in csv

    for path in ("/api/v1/gpu-idle", "/api/v1/oom-resubmissions", "/api/v1/recommendations"):
        body = site.get(path, ALICE)
        assert body.status_code == 200, (path, body.text)
        assert "team-b" not in body.text, path
    queues = site.get("/api/v1/queues", ALICE)
    assert queues.status_code == 200 and queues.json()
    capability = site.get("/api/v1/receivers", ALICE)
    assert capability.status_code == 200


@pytest.mark.slow(30)
def test_ui_pages_show_team_a_only(site: Site) -> None:
    jobs = site.get("/ui/jobs", ALICE).text
    assert "team-a" in jobs and "team-b" not in jobs
    assert "team-b" in site.get("/ui/jobs", ROOT).text
    alerts = site.get("/ui/alerts", ALICE).text
    assert "team-a" in alerts and "team-b" not in alerts
    everything = site.get("/api/v1/jobs?limit=1000", ROOT).json()["items"]
    theirs = next(job for job in everything if job["namespace"] == "team-b")
    assert site.get(f"/ui/jobs/{theirs['uid']}", ALICE).status_code == 404
    for path in ("/", "/ui/notifications", "/ui/silences"):
        page = site.get(path, ALICE)
        assert page.status_code == 200 and "team-b" not in page.text, path


@pytest.mark.slow(30)
def test_bad_expired_and_missing_tokens_are_one_line_401s(site: Site) -> None:
    for path in ("/api/v1/jobs", "/api/v1/alerts", "/api/v1/reports", "/ui/jobs", "/api/v1/notifications"):
        one_line_401(site.get(path, "not-a-token"), "not-a-token")
        one_line_401(site.get(path, EXPIRED), EXPIRED)
        one_line_401(site.get(path))
    for malformed in (b"Bearer \xc3\xa9t\xff", b"Bearer", b"Basic cm9vdDpyb290"):  # not UTF-8, empty, not Bearer
        one_line_401(site.get("/api/v1/jobs", headers={"Authorization": malformed}))  # type: ignore[dict-item]
    assert site.get("/healthz").status_code == 200 and site.get("/metrics").status_code == 200


@pytest.mark.slow(30)
def test_proxy_headers_from_an_untrusted_address_are_ignored(site: Site) -> None:
    # 127.0.0.1 is not in auth.trusted_proxies (192.0.2.0/24): the headers count for nothing.
    spoofed = {"X-Forwarded-User": "root", "X-Forwarded-Groups": "platform,system:masters"}
    one_line_401(site.get("/api/v1/jobs", headers=spoofed))
    mine = site.get("/api/v1/jobs?limit=1000", ALICE, headers=spoofed).json()["items"]
    assert namespaces(mine) == {"team-a"}  # the token decides, not the headers
    # A forged X-Forwarded-For naming a trusted proxy changes nothing: the peer is what the socket says (uvicorn
    # would take the header as the client address for a local peer, a sidecar's or port-forward's).
    for forwarded in ({"X-Forwarded-For": "192.0.2.7"}, {"Forwarded": "for=192.0.2.7"},
                      {"X-Forwarded-For": "192.0.2.7, 127.0.0.1", "X-Real-IP": "192.0.2.7"}):
        one_line_401(site.get("/api/v1/jobs", headers={**spoofed, **forwarded}))


@pytest.mark.slow(30)
def test_writes_keep_the_api_token(site: Site) -> None:
    import httpx

    refused = httpx.post(f"{site.url}/api/v1/alerts/1/resolve", headers={"Authorization": f"Bearer {ROOT}"})
    assert refused.status_code == 401
    allowed = httpx.post(f"{site.url}/api/v1/alerts/999999/resolve",
                         headers={"Authorization": f"Bearer {WRITE_TOKEN}"})
    assert allowed.status_code == 404


@pytest.mark.slow(30)
def test_an_api_server_that_cannot_review_is_a_503_of_one_line(site: Site) -> None:
    fresh = "tok-never-seen-before"
    site.sim.api.authn.unavailable = True
    try:
        failed = site.get("/api/v1/jobs", fresh)
    finally:
        site.sim.api.authn.unavailable = False
    assert failed.status_code == 503, failed.text
    assert "\n" not in failed.text and fresh not in failed.text and json.loads(failed.text) == {
        "detail": "the Kubernetes API server could not review the caller; try again shortly"}
    assert site.get("/api/v1/jobs", ALICE).status_code == 200  # cached answers keep working meanwhile
    assert fresh not in Path(site.log).read_text()
