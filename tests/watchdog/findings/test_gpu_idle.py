"""GPU idle seconds per job and the AbortJob action, end to end: the simulated cluster (`gpu-idle`: an
idle-GPU job, a busy one, one no DCGM exporter reports), a real Prometheus scraping its cAdvisor and
DCGM series, the watchdog collecting from that Prometheus into SQLite or PostgreSQL, and the abort
action creating a Volcano Command that the simulator's job controller consumes.

Plus the tracker's arithmetic on its own (idle grows per interval, busy resets, missing data is never
idle, a long gap adds nothing).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.exporter.test_prometheus import Prometheus, poll, prometheus_binary
from tests.simtools import client_for
from tests.watchdog.harness import alerts, fast_settings, start_watchdog
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.simulator.resources import COMMANDS, JOBS
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.simulator.store import WatchEvent
from volcano_monitor.watchdog.actions.gpu_idle.abort import CREATED, GpuIdleAborter
from volcano_monitor.watchdog.actions.gpu_idle.metrics import render_gpu_idle_metrics
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.config import ConfigError, load
from volcano_monitor.watchdog.findings.detectors.gpuidle import GPU_IDLE, GPU_NO_DATA
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import GpuIdleAbortRow
from volcano_monitor.watchdog.state.gpu_idle import BUSY, IDLE, NO_GPU_DATA, GpuIdleTracker, JobGpu
from volcano_monitor.watchdog.state.samples import PodInfo, UsageSample

BUDGET = 60.0
SCRAPE_BOTH = ("    honor_labels: true\n    metric_relabel_configs:\n      - source_labels: [__name__]\n"
               "        regex: (container_.*|DCGM_.*)\n        action: keep\n")


# ---- the tracker alone ---------------------------------------------------------------------------------

def _info(uid: str, gpus: float = 1) -> PodInfo:
    return PodInfo(uid, f"job-{uid}", "ml", "w", "trainer", "gpu", "Running", 2.0, 2**30, gpus)


def _round(tracker: GpuIdleTracker, ts: float, pods: dict[str, tuple[str, float | None]]) -> None:
    """pods: pod name -> (job uid, GPU utilisation or None)."""
    infos = {pod: _info(uid) for pod, (uid, _) in pods.items()}
    samples = [UsageSample(ts, "ml", pod, "main", 1.0, 2.0**30, util, 1 if util is not None else 0)
               for pod, (_, util) in pods.items()]
    tracker.observe(samples, lambda _ns, pod: infos.get(pod))


def _job(tracker: GpuIdleTracker, uid: str) -> JobGpu:
    job = tracker.get(uid)
    assert job is not None, uid
    return job


def test_tracker_counts_idle_intervals_resets_when_busy_and_never_calls_missing_data_idle() -> None:
    tracker = GpuIdleTracker(GpuIdleSettings(idle_util_percent=5), max_gap_seconds=90)
    for i, (first, second) in enumerate([(1.0, 2.0), (0.0, 4.9), (3.0, 1.0)]):
        _round(tracker, 1000 + 60 * i, {"a-0": ("a", first), "a-1": ("a", second), "b-0": ("b", 80.0),
                                        "c-0": ("c", None)})
    a, b, c = (_job(tracker, uid) for uid in "abc")
    assert a.state == IDLE and a.idle_seconds == 120  # two intervals after the first round
    assert b.state == BUSY and b.idle_seconds == 0
    assert c.state == NO_GPU_DATA and c.idle_seconds == 0
    _round(tracker, 1180, {"a-0": ("a", 1.0), "a-1": ("a", 40.0)})  # one GPU busy: the streak ends
    assert _job(tracker, "a").state == BUSY and _job(tracker, "a").idle_seconds == 0
    _round(tracker, 1240, {"a-0": ("a", 1.0), "a-1": ("a", 1.0)})
    _round(tracker, 1300, {"a-0": ("a", 1.0), "a-1": ("a", None)})  # one GPU pod unreported: no data
    assert _job(tracker, "a").state == NO_GPU_DATA
    _round(tracker, 1360, {"a-0": ("a", 1.0), "a-1": ("a", 1.0)})
    _round(tracker, 1600, {"a-0": ("a", 1.0), "a-1": ("a", 1.0)})  # 240 s gap > 90: adds nothing
    assert _job(tracker, "a").idle_seconds == 0
    _round(tracker, 1660, {"a-0": ("a", 1.0), "a-1": ("a", 1.0)})
    assert _job(tracker, "a").idle_seconds == 60
    text = render_gpu_idle_metrics(tracker.snapshot(), {})
    assert 'volcano_watchdog_job_gpu_idle_seconds_total{namespace="ml",job_name="job-a",queue="gpu"} 60' in text
    assert 'job_name="job-c"' not in text.split("# HELP volcano_watchdog_job_gpu_state")[0]  # no data: no counter
    assert 'volcano_watchdog_job_gpu_state{namespace="ml",job_name="job-c",queue="gpu",state="no_gpu_data"} 1' in text


def test_abort_needs_enabling_and_a_limit() -> None:
    with pytest.raises(ConfigError, match=r"gpu_idle.queues.gpu.abort: needs gpu_idle.abort.enabled"):
        load(None, environ={}, gpu_idle={"queues": {"gpu": {"gpu_idle_limit_seconds": 60, "abort": True}}})
    with pytest.raises(ConfigError, match=r"gpu_idle.default.abort: needs gpu_idle_limit_seconds"):
        load(None, environ={}, gpu_idle={"abort": {"enabled": True}, "default": {"abort": True}})


# ---- end to end ----------------------------------------------------------------------------------------

@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(scenario="gpu-idle", speed=10, tick_interval=0.2) as running:
        yield running


def _job_phase(sim: SimulatorThread, prefix: str) -> tuple[str, str, str]:
    def read() -> tuple[str, str, str]:
        job = next(j for j in sim.store.objects(JOBS, "default") if j["metadata"]["name"].startswith(prefix))
        return job["metadata"]["name"], job["metadata"]["uid"], job.get("status", {}).get("state", {}).get("phase", "")

    result: tuple[str, str, str] = sim.call(read)
    return result


def _metric(text: str, name: str, job_prefix: str, state: str = "") -> float | None:
    for line in text.splitlines():
        wanted = line.startswith(name + "{") and f'job_name="{job_prefix}' in line
        if wanted and (not state or f'state="{state}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_idle_job_counts_then_is_aborted_once_busy_and_no_data_jobs_are_not(
        tmp_path: Path, sim: SimulatorThread, database_url: str) -> None:
    binary = prometheus_binary()
    deadline = time.monotonic() + BUDGET
    created: list[dict[str, Any]] = []

    def on_write(rtype: Any, event: WatchEvent) -> None:
        if rtype is COMMANDS and event.type == "ADDED":
            created.append(event.obj)

    sim.call(sim.store.listeners.append, on_write)
    target = sim.url.removeprefix("http://")
    (tmp_path / "prom").mkdir()
    prom = Prometheus(binary, tmp_path / "prom", {"cluster": target}, job_config={"cluster": SCRAPE_BOTH})
    watchdog = None
    try:
        prom.wait_ready(timeout=10)
        poll("DCGM scraped", deadline, lambda: None if len(prom.query("DCGM_FI_DEV_GPU_UTIL")) == 2 else "not yet")
        settings = fast_settings(
            database_url,
            sources={"metrics_api": {"interval_seconds": 0.25}, "rollup_seconds": 1,
                     "prometheus": {"enabled": True, "url": prom.url, "interval_seconds": 0.5, "rate_window": "5s"}},
            gpu_idle={"idle_util_percent": 5, "no_data_seconds": 1.5,
                      "queues": {"gpu": {"gpu_idle_limit_seconds": 4, "abort": True}},
                      "abort": {"enabled": True, "mode": "apply", "grace_seconds": 3, "interval_seconds": 0.3}})
        engine: Engine = make_engine(database_url)
        watchdog = start_watchdog(sim, engine, tmp_path, settings)
        api = client_for(sim, tmp_path / "aborter")
        aborter = GpuIdleAborter(settings.gpu_idle, engine, api, AlwaysLeader("replica-a").start(),
                                 identity="replica-a").start()
        idle_name, idle_uid, _ = _job_phase(sim, "idle-gpu")
        busy_name, _, _ = _job_phase(sim, "busy-gpu")

        def counted() -> str | None:
            text = render_gpu_idle_metrics(watchdog.gpu_idle.snapshot(), {})
            idle = _metric(text, "volcano_watchdog_job_gpu_idle_seconds_total", "idle-gpu")
            busy = _metric(text, "volcano_watchdog_job_gpu_idle_seconds_total", "busy-gpu")
            no_data = _metric(text, "volcano_watchdog_job_gpu_state", "no-dcgm", "no_gpu_data")
            if idle is not None and idle >= 1.0 and busy == 0.0 and no_data == 1.0:
                return None
            collector = next(src for name, _, src in watchdog._sources if name == "prometheus")
            return (f"idle {idle}, busy {busy}, no-dcgm no_gpu_data {no_data}; tracker "
                    f"{watchdog.gpu_idle.snapshot()}; collector {collector.errors} {collector.last_error!r} "
                    f"style {getattr(collector, 'dcgm_style', None)}")

        poll("idle seconds grow for the idle job only", deadline, counted)
        text = render_gpu_idle_metrics(watchdog.gpu_idle.snapshot(), {})
        assert _metric(text, "volcano_watchdog_job_gpu_idle_seconds_total", "no-dcgm") is None  # never idle
        first = _metric(text, "volcano_watchdog_job_gpu_idle_seconds_total", "idle-gpu") or 0.0

        def grown() -> str | None:
            # Polled, not slept for: on a loaded machine a collection round can take longer than any
            # fixed pause, and growth, not its speed, is what is checked.
            text = render_gpu_idle_metrics(watchdog.gpu_idle.snapshot(), {})
            idle = _metric(text, "volcano_watchdog_job_gpu_idle_seconds_total", "idle-gpu") or 0.0
            busy = _metric(text, "volcano_watchdog_job_gpu_idle_seconds_total", "busy-gpu")
            assert busy == 0.0
            return None if idle > first else f"idle {idle} <= {first}"

        poll("the idle job's idle seconds keep growing", deadline, grown)

        poll("the idle job aborted", deadline,
             lambda: None if _job_phase(sim, "idle-gpu")[2] == "Aborted" else f"phase {_job_phase(sim, 'idle-gpu')}")
        # A second replica that also believes it leads, and more passes: nothing more.
        other = GpuIdleAborter(settings.gpu_idle, engine, api, AlwaysLeader("replica-b").start(), identity="replica-b")
        assert other.run_once() == 0 and aborter.run_once() == 0
        time.sleep(1.0)
        assert [(c["metadata"]["name"], c["action"], c["target"]["name"], c["target"]["uid"]) for c in created] == \
            [(created[0]["metadata"]["name"], "AbortJob", idle_name, idle_uid)]
        assert created[0]["apiVersion"] == "bus.volcano.sh/v1alpha1" and created[0]["kind"] == "Command"
        assert sim.call(sim.store.objects, COMMANDS) == []  # consumed by the job controller
        assert _job_phase(sim, "busy-gpu")[2] == "Running" and _job_phase(sim, "no-dcgm")[2] == "Running"
        with Session(engine) as session:
            rows = list(session.scalars(select(GpuIdleAbortRow)))
        assert [(r.job_uid, r.state, r.mode, r.identity) for r in rows] == [(idle_uid, CREATED, "apply", "replica-a")]
        assert aborter.counts() == {("gpu", CREATED): 1}

        def alerted() -> str | None:
            found = {(a.kind, re.sub(r"-[^-]+$", "", a.job_name)) for a in alerts(engine) if a.state == "firing"
                     or a.fired_at is not None}
            want = {(GPU_IDLE, "idle-gpu"), (GPU_NO_DATA, "no-dcgm")}
            return None if found >= want and not {k for k in found if k[1] == "busy-gpu"} else f"{found}"

        poll("GpuIdle for the idle job, GpuNoData for the unreported one, nothing for the busy one", deadline,
             alerted)
        assert busy_name.startswith("busy-gpu")
        aborter.stop()
    finally:
        if watchdog is not None:
            watchdog.stop()
        prom.stop()


def test_api_pages_within_what_the_database_can_count(engine: Engine) -> None:
    """An offset past SQLite's 64-bit integers was a 500 (OverflowError binding it); now the 422 of a
    parameter out of range, like every other offset of the API."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from volcano_monitor.watchdog.actions.gpu_idle.api import gpu_idle_router

    app = FastAPI()
    app.include_router(gpu_idle_router(engine, GpuIdleSettings(), list, lambda: True))
    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/api/v1/gpu-idle", params={"offset": 10**9}).json()["aborts"] == []
    for offset in (10**9 + 1, 2**63, 10**20):
        assert client.get("/api/v1/gpu-idle", params={"offset": offset}).status_code == 422, offset
