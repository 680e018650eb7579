"""OOM auto scale-up against the simulated cluster (scenario `oom-scale-up`: programs that need 2Gi and
ask for 1Gi; the simulator's kubelet OOM-kills a container when its working set reaches its limit),
with the real watchdog (usage, histograms, outbox to a local chat inbox) on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.simtools import client_for, wait_for
from tests.watchdog.harness import fast_settings, start_watchdog
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.core.quantity import parse_quantity
from volcano_monitor.simulator import resources as R
from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.actions.oomscale.api import oom_router, outbox_notice, render_oom_metrics
from volcano_monitor.watchdog.actions.oomscale.controller import OomScaleUpController
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.runtime.app import Watchdog
from volcano_monitor.watchdog.state.db.models import OomResubmission, UsageRollup
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health

GI = 2**30
SPEED = 8.0
Obj = dict[str, Any]


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    started = SimulatorThread(scenario="oom-scale-up", speed=SPEED, tick_interval=0.1, bookmark_interval=1.0)
    started.driver.metrics_interval = 0.25  # PodMetrics often enough to see each short run's peak
    started.start()
    yield started
    started.stop()


@pytest.fixture
def inbox() -> Iterator[ChatInbox]:
    with ChatInbox().start() as started:
        yield started


def settings_for(database_url: str, inbox: ChatInbox, mode: str) -> Settings:
    return fast_settings(database_url, oom_scale_up={"enabled": True, "mode": mode, "reconcile_interval_seconds": 1},
                         notifications={"receivers": [{"name": "inbox",
                                                       "webhook": {"url": f"{inbox.url}/webhook/volcano"}}],
                                        "route": {"receiver": "inbox", "group_wait": 0, "group_interval": "1s"},
                                        "delivery": {"poll_interval_seconds": 0.1}})


def jobs(sim: SimulatorThread) -> dict[str, Obj]:
    return {j["metadata"]["name"]: j for j in sim.call(sim.store.objects, R.JOBS, "default")}


def phase(job: Obj) -> str:
    return str(((job.get("status") or {}).get("state") or {}).get("phase", ""))


def memory(job: Obj) -> tuple[float, float]:
    resources = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    return parse_quantity(resources["requests"]["memory"]), parse_quantity(resources["limits"]["memory"])


def first(sim: SimulatorThread, prefix: str) -> str:
    found = [n for n in jobs(sim) if n.startswith(prefix) and "-oom" not in n]
    assert len(found) == 1, sorted(jobs(sim))
    return found[0]


def events(sim: SimulatorThread, reason: str) -> list[Obj]:
    return [e for e in sim.call(sim.store.objects, R.EVENTS, "default") if e.get("reason") == reason]


def controller(settings: Settings, engine: Engine, sim: SimulatorThread, tmp_path: Path, watchdog: Watchdog | None,
               leader: Any = None) -> OomScaleUpController:
    return OomScaleUpController(settings.oom_scale_up, engine, client_for(sim, tmp_path),
                                leader or AlwaysLeader().start(),
                                notify=outbox_notice(watchdog.outbox) if watchdog else None,
                                wake=watchdog.notifier.wake if watchdog else None,
                                informer_backoff=(0.02, 0.2)).start()


def test_opted_in_job_is_resubmitted_twice_with_rising_memory_then_completes(
        sim: SimulatorThread, engine: Engine, database_url: str, inbox: ChatInbox, tmp_path: Path) -> None:
    settings = settings_for(database_url, inbox, "apply")
    watchdog = start_watchdog(sim, engine, tmp_path / "wd", settings)
    oom = controller(settings, engine, sim, tmp_path / "oom", watchdog)
    try:
        wait_for(lambda: any(n.startswith("grows-") for n in jobs(sim)), timeout=10)
        grows = first(sim, "grows-")
        wait_for(lambda: phase(jobs(sim).get(f"{grows}-oom2", {})) in ("Completed", "Failed"), timeout=60,
                 interval=0.1)
        time.sleep(1.5)  # a late pass must not resubmit a completed lineage
        found = jobs(sim)
        stays = first(sim, "stays-")
        wait_for(lambda: watchdog.idle(), timeout=10)
        time.sleep(1.0)  # the last usage flush
    finally:
        oom.stop()
        watchdog.stop()
    assert phase(found[grows]) == "Failed" and phase(found[f"{grows}-oom1"]) == "Failed"
    assert phase(found[f"{grows}-oom2"]) == "Completed"
    assert f"{grows}-oom3" not in found
    limits = [memory(found[name]) for name in (grows, f"{grows}-oom1", f"{grows}-oom2")]
    assert limits == [(GI, GI), (1.5 * GI, 1.5 * GI), (2.25 * GI, 2.25 * GI)]
    meta = found[f"{grows}-oom2"]["metadata"]
    assert meta["annotations"]["volcano-monitor/scaled-from"] == f"{grows}-oom1"
    assert meta["annotations"]["volcano-monitor/oom-lineage"] == grows
    assert meta["labels"]["volcano-monitor/scaled-from"] == f"{grows}-oom1"
    # opted out: OOM-killed too, and left alone
    assert phase(found[stays]) == "Failed" and not [n for n in found if n.startswith(f"{stays}-oom")]
    # the audit: database rows through the API, Events on the OOM-killed Jobs, a notice each, the counter
    app = create_app(engine, settings, Health(lambda: True, dict), routers=[oom_router(engine)])
    with TestClient(app) as client:
        page = client.get("/api/v1/oom-resubmissions", params={"lineage": grows}).json()
        everything = client.get("/api/v1/oom-resubmissions").json()
    assert page["total"] == 2 and everything["total"] == 2
    by_attempt = {item["attempt"]: item for item in page["items"]}
    assert {a: (i["source_name"], i["new_name"], i["outcome"]) for a, i in by_attempt.items()} == {
        1: (grows, f"{grows}-oom1", "applied"), 2: (f"{grows}-oom1", f"{grows}-oom2", "applied")}
    assert by_attempt[2]["containers"]["main/main"]["limit"] == 1.5 * GI
    assert by_attempt[2]["containers"]["main/main"]["new_limit"] == 2.25 * GI
    scaled = events(sim, "OOMScaleUp")
    assert sorted(e["involvedObject"]["name"] for e in scaled) == [grows, f"{grows}-oom1"]
    def notices() -> list[str]:
        return [m.title() for m in inbox.messages() if "OOMScaleUp" in m.title()]
    wait_for(lambda: len(notices()) >= 2, timeout=10)
    time.sleep(0.5)
    assert len(notices()) == 2, [m.title() for m in inbox.messages()]
    assert sum(f"resubmitted as {grows}-oom" in json.dumps(m.body) for m in inbox.messages()) == 2
    assert oom.counts == {("default", "applied"): 2}
    assert 'volcano_watchdog_oom_resubmissions_total{namespace="default",outcome="applied"} 2' in \
        render_oom_metrics(lambda: oom.counts)
    # the workload's history (and so its recommendation) learns the new peak under the same workload
    with Session(engine) as session:
        uid = found[f"{grows}-oom2"]["metadata"]["uid"]
        peak = session.execute(select(UsageRollup.workload, UsageRollup.memory_bytes_max)
                               .where(UsageRollup.job_uid == uid)).all()
    assert peak and {w for w, _ in peak} == {"grows"}
    assert max(m for _, m in peak) > 1.9 * GI
    recommendation = watchdog.histograms.recommendation("default", "grows", "main", "main", datetime.now(UTC))
    assert recommendation is not None and recommendation.memory_target_bytes >= max(m for _, m in peak)


def test_dry_run_submits_nothing_and_records_what_it_would(
        sim: SimulatorThread, engine: Engine, database_url: str, inbox: ChatInbox, tmp_path: Path) -> None:
    settings = settings_for(database_url, inbox, "dry-run")
    oom = controller(settings, engine, sim, tmp_path / "oom", None)
    try:
        wait_for(lambda: any(n.startswith("grows-") for n in jobs(sim)), timeout=10)
        grows = first(sim, "grows-")

        def recorded() -> list[OomResubmission]:
            with Session(engine) as session:
                return list(session.scalars(select(OomResubmission)))
        wait_for(lambda: bool(recorded()), timeout=30, interval=0.1)
        time.sleep(2.0)  # more passes: still nothing submitted, nothing recorded twice
    finally:
        oom.stop()
    rows = recorded()
    assert [(r.lineage, r.attempt, r.new_name, r.mode, r.outcome) for r in rows] == [
        (grows, 1, f"{grows}-oom1", "dry-run", "dry_run")]
    assert rows[0].containers["main/main"]["new_limit"] == 1.5 * GI
    assert not [n for n in jobs(sim) if "-oom" in n]
    assert [e["involvedObject"]["name"] for e in events(sim, "OOMScaleUpPlanned")] == [grows]
    assert oom.counts == {("default", "dry_run"): 1}
