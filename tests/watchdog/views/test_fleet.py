"""Two clusters in one database (SQLite and PostgreSQL), rows written through two engines as each cluster's
watchdog writes them, read through the API and the UI of cluster a's watchdog: every item names its cluster,
`?cluster=` narrows every list (unknown: empty; malformed: a one-line 422), lists default to the fleet and a
job run to the serving cluster, a resolve of b's alert is carried out by b's leader only, /metrics stays a's,
tenancy still filters namespaces, the fleet page, `report --by cluster`, and links in chat messages."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from fastapi import Request
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.watchdog.views.test_api import NOW, TOKEN, health, insert, make_alert, make_run
from volcano_monitor.core.kube.reviews import Scope
from volcano_monitor.watchdog.actions.notify.describe import alert_item
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import (
    Alert,
    AlertRequest,
    NotificationDelivery,
    NotificationGroup,
    Silence,
)
from volcano_monitor.watchdog.state.db.scope import fleet
from volcano_monitor.watchdog.state.fleet import beat
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.auth_settings import AuthSettings
from volcano_monitor.watchdog.views.report.compute import compute_report
from volcano_monitor.watchdog.views.tenancy import Tenancy

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Fleet:
    a: Engine
    b: Engine


@pytest.fixture
def two(database_url: str, engine: Engine) -> Iterator[Fleet]:
    both = seed_two(database_url)
    yield both
    both.a.dispose()
    both.b.dispose()


def seed_two(database_url: str) -> Fleet:
    """Cluster a and cluster b in one migrated database: the same uid and job names in both (two clusters
    seeded alike), b's heartbeat stale."""
    a, b = make_engine(database_url, cluster="a"), make_engine(database_url, cluster="b")
    insert(a, make_alert(1, minutes_ago=30), make_alert(2, namespace="team-b", queue="q2", minutes_ago=20),
           make_run("r1", "train-a", created=timedelta(hours=3), finished=timedelta(hours=1), cpu=(3600, 7200)),
           make_run("r2", "live-a", phase="Running", created=timedelta(minutes=5), cpu=(1, 2)))
    insert(b, make_alert(1, minutes_ago=10), make_alert(3, namespace="team-b", minutes_ago=5),
           make_run("r1", "train-b", created=timedelta(hours=2), finished=timedelta(hours=1), gpu=(0, 7200)),
           make_run("r3", "wait-b", phase="Pending", namespace="team-b", created=timedelta(minutes=5)),
           make_run("r4", "wait-b2", phase="Inqueue", created=timedelta(minutes=4)))
    with Session(a) as session, session.begin():
        beat(session, "a", "wd-a", NOW - timedelta(seconds=10))
        beat(session, "b", "wd-b", NOW - timedelta(hours=1))
    return Fleet(a, b)


def served(engine: Engine, tenancy: Tenancy | None = None, wait: float = 0.2) -> TestClient:
    settings = Settings(api_token=SecretStr(TOKEN), api_read_token=SecretStr(TOKEN))
    return TestClient(create_app(engine, settings, health(), clock=lambda: NOW, request_wait_seconds=wait,
                                 tenancy=tenancy))


def of(response: Any) -> list[tuple[str, str]]:
    assert response.status_code == 200, response.text
    return sorted((item["cluster"], item.get("fingerprint") or item.get("name")) for item in response.json()["items"])


def test_lists_read_the_fleet_and_cluster_narrows_them(two: Fleet) -> None:
    api = served(two.a)
    assert of(api.get("/api/v1/alerts")) == [("a", "fp1"), ("a", "fp2"), ("b", "fp1"), ("b", "fp3")]
    assert of(api.get("/api/v1/alerts?cluster=b")) == [("b", "fp1"), ("b", "fp3")]
    assert api.get("/api/v1/alerts?cluster=b").json()["total"] == 2
    both = of(api.get("/api/v1/alerts?cluster=a,b"))
    assert both == of(api.get("/api/v1/alerts?cluster=a&cluster=b")) and len(both) == 4
    assert of(api.get("/api/v1/alerts?cluster=b&namespace=team-b")) == [("b", "fp3")]
    assert of(api.get("/api/v1/jobs")) == [("a", "live-a"), ("a", "train-a"), ("b", "train-b"), ("b", "wait-b"),
                                           ("b", "wait-b2")]
    assert of(api.get("/api/v1/jobs?cluster=a")) == [("a", "live-a"), ("a", "train-a")]
    unknown = api.get("/api/v1/jobs?cluster=nowhere")
    assert unknown.status_code == 200 and unknown.json() == {"total": 0, "limit": 100, "offset": 0, "items": []}
    for bad in ("-a", "a b", "a/b", "x" * 64):
        refused = api.get("/api/v1/jobs", params={"cluster": bad})
        assert refused.status_code == 422, bad
        errors = refused.json()["detail"]
        assert len(errors) == 1 and "\n" not in errors[0]["msg"] and errors[0]["loc"] == ["query", "cluster"]
    assert api.get("/api/v1/alerts?cluster=a,%20-x").status_code == 422


def test_a_job_run_defaults_to_the_serving_cluster_and_alerts_are_found_by_id(two: Fleet) -> None:
    api = served(two.a)
    assert api.get("/api/v1/jobs/r1").json()["name"] == "train-a"  # both clusters hold uid r1
    theirs = api.get("/api/v1/jobs/r1?cluster=b").json()
    assert theirs["name"] == "train-b" and theirs["cluster"] == "b"
    assert api.get("/api/v1/jobs/r3").status_code == 404  # b's only
    assert api.get("/api/v1/jobs/r1?cluster=c").status_code == 404
    assert api.get("/api/v1/jobs/r1?cluster=-c").status_code == 422
    b_alert = next(i for i in api.get("/api/v1/alerts?cluster=b").json()["items"] if i["fingerprint"] == "fp3")
    one = api.get(f"/api/v1/alerts/{b_alert['id']}")
    assert one.status_code == 200 and one.json()["cluster"] == "b"
    assert api.get(f"/api/v1/alerts/{b_alert['id']}?cluster=a").status_code == 404


def test_resolving_another_clusters_alert_is_that_clusters_leaders_work(two: Fleet) -> None:
    api = served(two.a)
    b_alert = next(i for i in api.get("/api/v1/alerts?cluster=b").json()["items"] if i["fingerprint"] == "fp1")
    stored = api.post(f"/api/v1/alerts/{b_alert['id']}/resolve", headers=AUTH)
    assert stored.status_code == 202, stored.text  # nobody of b carried it out within the wait
    with Session(two.a) as session:
        requests = list(session.scalars(fleet(select(AlertRequest))))
    assert [(r.cluster, r.alert_id, r.done_at) for r in requests] == [("b", b_alert["id"], None)]
    settings = Settings(api_token=SecretStr(TOKEN))
    Watchdog(settings, two.a, api=None, clock=NOW.timestamp).apply([], ["requests"])  # a's leader: not its own
    assert api.get(f"/api/v1/alerts/{b_alert['id']}").json()["state"] == "firing"
    Watchdog(settings, two.b, api=None, clock=NOW.timestamp).apply([], ["requests"])
    assert api.get(f"/api/v1/alerts/{b_alert['id']}").json()["state"] == "resolved"
    states = {(i["cluster"], i["fingerprint"]): i["state"] for i in api.get("/api/v1/alerts").json()["items"]}
    assert states == {("a", "fp1"): "firing", ("a", "fp2"): "firing", ("b", "fp1"): "resolved",
                      ("b", "fp3"): "firing"}  # a's alert of the same fingerprint untouched
    ui = api.post(f"/ui/alerts/{b_alert['id']}/resolve", data={"token": TOKEN}, follow_redirects=False)
    assert ui.status_code == 409 or "already resolved" in ui.text


def test_metrics_are_the_serving_clusters_own(two: Fleet) -> None:
    def firing(engine: Engine) -> float:
        text = served(engine).get("/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("volcano_watchdog_alerts{") and 'state="firing"' in line)

    assert firing(two.a) == 2 and firing(two.b) == 2
    with Session(two.b) as session, session.begin():
        session.add(make_alert(9))
    assert firing(two.a) == 2 and firing(two.b) == 3


class TeamA(Tenancy):
    """auth.mode kubernetes whose every caller may list team-a only (the reviews are tested elsewhere)."""

    def __init__(self) -> None:
        super().__init__(AuthSettings(mode="kubernetes"), reviews=object())  # type: ignore[arg-type]

    def scope(self, request: Request) -> Scope:
        return frozenset({"team-a"})


def test_tenancy_filters_namespaces_on_top_of_the_clusters(two: Fleet) -> None:
    api = served(two.a, TeamA())
    assert of(api.get("/api/v1/alerts")) == [("a", "fp1"), ("b", "fp1")]
    assert of(api.get("/api/v1/alerts?cluster=b")) == [("b", "fp1")]
    assert of(api.get("/api/v1/jobs?cluster=b")) == [("b", "train-b"), ("b", "wait-b2")]
    assert api.get("/api/v1/jobs/r3?cluster=b").status_code == 404  # team-b's
    page = api.get("/ui/fleet").text
    assert "wait-b" not in page
    waiting = api.get("/ui/jobs?cluster=b&phase=Inqueue").text
    assert "wait-b2" in waiting
    assert "wait-b<" not in api.get("/ui/jobs?cluster=b").text


def test_silences_and_messages_name_their_cluster(two: Fleet) -> None:
    with Session(two.b) as session, session.begin():
        session.add(Silence(matchers=['namespace="team-a"'], starts_at=NOW, ends_at=NOW + timedelta(hours=1),
                            created_by="b", comment="", created_at=NOW, updated_at=NOW))
        group = NotificationGroup(group_key="k", receiver="chat", route="0", labels={}, created_at=NOW, updated_at=NOW)
        session.add(group)
        session.flush()
        session.add(NotificationDelivery(receiver="chat", group_id=group.id, state="dead", attempts=1,
                                         next_attempt_at=NOW, created_at=NOW, updated_at=NOW, last_error="",
                                         message={"alerts": []}))
    api = served(two.a)
    silences = api.get("/api/v1/silences", headers=AUTH).json()
    assert [s["cluster"] for s in silences] == ["b"]
    assert api.get("/api/v1/silences?cluster=a", headers=AUTH).json() == []
    made = api.post("/api/v1/silences", headers=AUTH, json={"matchers": ['queue="q1"'], "cluster": "b",
                                                            "ends_at": (NOW + timedelta(hours=2)).isoformat()})
    assert made.status_code == 201 and made.json()["cluster"] == "b"
    mine = api.post("/api/v1/silences", headers=AUTH, json={"matchers": ['queue="q1"'],
                                                            "ends_at": (NOW + timedelta(hours=2)).isoformat()})
    assert mine.json()["cluster"] == "a"
    deliveries = api.get("/api/v1/notifications?cluster=b", headers=AUTH).json()
    assert [d["cluster"] for d in deliveries] == ["b"]
    assert api.get("/api/v1/notifications?cluster=a", headers=AUTH).json() == []


def test_fleet_page_first_and_lists_with_a_cluster_column(two: Fleet) -> None:
    ui = served(two.a)
    home = ui.get("/")
    assert home.status_code == 200 and "<title>Fleet" in home.text
    assert home.text.index('href="/ui/fleet"') < home.text.index('href="/ui/queues"')  # the first entry
    rows = {row.split("</td>")[0].rsplit(">", 1)[1]: row for row in home.text.split("<tr>")[2:]}
    assert set(rows) == {"a", "b"}
    assert ">1</a>" in rows["a"].split("</td>")[1] and ">0</a>" in rows["a"].split("</td>")[2]  # running, waiting
    assert ">0</a>" in rows["b"].split("</td>")[1] and ">2</a>" in rows["b"].split("</td>")[2]
    assert ">2</a>" in rows["a"].split("</td>")[3] and ">2</a>" in rows["b"].split("</td>")[3]  # firing
    assert ">2</td>" in rows["b"].split("</td>")[6] + "</td>"  # 2 GPU-hours requested, none used
    assert "stale" in rows["b"] and "stale" not in rows["a"] and "(60 min ago)" in rows["b"]
    assert "/ui/jobs?cluster=b&amp;phase=Pending%2CInqueue" in rows["b"]
    waiting_b = ui.get("/ui/jobs?cluster=b&phase=Pending%2CInqueue").text  # the link lists the 2 it counts
    assert ">wait-b</a>" in waiting_b and ">wait-b2</a>" in waiting_b and ">train-b</a>" not in waiting_b
    assert "<title>Fleet" in ui.get("/ui/fleet?cluster=b").text and ">a<" not in ui.get("/ui/fleet?cluster=b").text
    jobs = ui.get("/ui/jobs").text
    assert "<th>cluster</th>" in jobs and "/ui/jobs/r1?cluster=b" in jobs and "/ui/jobs/r1?cluster=a" in jobs
    only_b = ui.get("/ui/jobs?cluster=b").text
    assert "train-b" in only_b and "train-a" not in only_b
    assert ui.get("/ui/jobs?cluster=-b").status_code == 422
    assert "train-b" in ui.get("/ui/jobs/r1?cluster=b").text and "train-a" in ui.get("/ui/jobs/r1").text
    alerts = ui.get("/ui/alerts?cluster=b").text
    assert "<th>cluster</th>" in alerts and alerts.count("/ui/alerts/") >= 2 and "cluster=a" not in alerts
    queues = ui.get("/ui/queues?cluster=b").text
    assert "Queues of b" in queues and "/ui/jobs?cluster=b&amp;queue=q1&amp;phase=Pending%2CInqueue" in queues


def test_one_cluster_keeps_the_queue_page_at_home(engine: Engine) -> None:
    ui = served(engine)
    home = ui.get("/").text
    assert "<title>Queues" in home and "<th>cluster</th>" not in ui.get("/ui/jobs").text
    assert "<title>Fleet" in ui.get("/ui/fleet").text


def test_report_by_cluster_rolls_up_the_fleet(two: Fleet) -> None:
    since, until = NOW - timedelta(days=1), NOW + timedelta(minutes=1)
    with Session(two.a) as session:
        by_cluster = compute_report(session, since, until, "cluster")
        own = compute_report(session, since, until, "queue")  # the CLI's: this watchdog's cluster
    assert [(g.name, g.runs) for g in by_cluster.groups] == [("a", 2), ("b", 3)] and by_cluster.total.runs == 5
    assert by_cluster.groups[1].gpu.wasted == pytest.approx(2.0) and by_cluster.groups[0].alerts == {"JobFailed": 2}
    assert own.total.runs == 2
    api = served(two.a)
    answer = api.get("/api/v1/reports", params={"by": "cluster", "since": "1d"}).json()
    assert [g["group"] for g in answer["groups"]] == ["a", "b"]
    narrowed = api.get("/api/v1/reports", params={"by": "queue", "since": "1d", "cluster": "b"}).json()
    assert narrowed["total"]["runs"] == 3
    fleet_wide = api.get("/api/v1/reports", params={"by": "namespace", "since": "1d"}).json()
    assert fleet_wide["total"]["runs"] == 5
    assert ("b", "train-b") in {(w["cluster"], w["name"]) for w in fleet_wide["top_wasters"]}  # whose run it is
    table = api.get("/api/v1/reports", params={"since": "1d", "format": "table"}).text
    assert "  b: team-a/train-b (queue q1)" in table
    focus = api.get("/api/v1/reports", params={"since": "1d", "format": "focus"}).text
    assert {json.loads(row["Tags"])["cluster"] for row in csv.DictReader(io.StringIO(focus))} == {"a", "b"}
    assert api.get("/api/v1/reports", params={"cluster": "-x"}).status_code == 422


def test_links_in_messages_open_the_alerts_cluster(two: Fleet) -> None:
    with Session(two.b) as session:
        row = session.scalars(select(Alert).where(Alert.fingerprint == "fp3")).one()
        url = alert_item(row, "firing", api_url="http://fleet:9747").url
    assert url == f"http://fleet:9747/ui/alerts/{row.id}?cluster=b"
    page = served(two.a).get(url.removeprefix("http://fleet:9747"))
    assert page.status_code == 200 and "summary 3" in page.text
