"""The web UI in a real headless browser (Debian's chromium and chromedriver, driven by Selenium; nothing
is downloaded): the watchdog runs against the simulator's default scenario and serves its app with
uvicorn, with a real Prometheus scraping the simulator's cAdvisor/DCGM series for GPU utilisation; every
page renders its data (a GPU job's page its GPU chart, and with minutes of history "not enough history"
instead of a patch), every link on it answers below 400, and the resolve and silence forms work with
the api_token and are refused without it, even with a reader's login in the browser.
A screenshot of each page is kept under the test's tmp dir and copied to test-artifacts/ui/."""

from __future__ import annotations

import base64
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import SecretStr
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from tests.exporter.test_prometheus import Prometheus, prometheus_binary
from tests.simtools import client_for, wait_for
from tests.watchdog.findings.test_gpu_idle import SCRAPE_BOTH
from tests.watchdog.harness import fast_settings, start_watchdog
from tests.watchdog.test_crash import free_port
from volcano_monitor.core.kube.leaderelection import AlwaysLeader
from volcano_monitor.simulator.runtime import SimulatorThread
from volcano_monitor.watchdog.actions.capability.controller import CapabilityController
from volcano_monitor.watchdog.actions.capability.settings import CapabilitySettings
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import (
    Alert,
    CapabilityChange,
    JobRun,
    NotificationDelivery,
    Silence,
    UsageRollup,
)
from volcano_monitor.watchdog.views.api import create_app
from volcano_monitor.watchdog.views.health import Health, QueueView

TOKEN = "ui-write-T0ken"
READ = "ui-read-T0ken"
CHROMIUM = os.environ.get("VOLCANO_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("VOLCANO_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[4] / "test-artifacts" / "ui"


def browser_check() -> None:
    """One line, and a failure (never a skip), when the browser is not installed."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"the UI tests need {CHROMIUM} and {CHROMEDRIVER} (Debian: apt-get install chromium "
                    "chromium-driver; deploy/tools/test-prereqs.sh installs them as root)", pytrace=False)


def browser() -> Any:
    """Headless chromium through the system chromedriver: the Service names the driver, so Selenium
    Manager (which would download one) never runs."""
    browser_check()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Any, Engine]]:
    """The watchdog (SQLite) on the simulated cluster, with some history, served on a free port."""
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    engine = make_engine(url)
    browser_check()  # before a minute of setup
    with SimulatorThread(scenario="default", speed=1200, tick_interval=0.05) as sim, ExitStack() as stack:
        (tmp_path / "prom").mkdir()
        prom = Prometheus(prometheus_binary(), tmp_path / "prom", {"cluster": sim.url.removeprefix("http://")},
                          job_config={"cluster": SCRAPE_BOTH})  # DCGM's GPU utilisation, as in production
        stack.callback(prom.stop)
        prom.wait_ready(timeout=10)
        settings = fast_settings(url, api_token=SecretStr(TOKEN), api_read_token=SecretStr(READ), notifications={
            "receivers": [{"name": "team-chat", "webhook": {"url": f"http://127.0.0.1:{free_port()}/"}}],
            "route": {"receiver": "team-chat", "group_wait": "0s"}},  # nobody listens: messages stay in the outbox
            sources={"metrics_api": {"interval_seconds": 0.25}, "rollup_seconds": 1, "prometheus": {
                "enabled": True, "url": prom.url, "interval_seconds": 0.5, "rate_window": "5s"}})
        watchdog = start_watchdog(sim, engine, tmp_path, settings)
        capability = CapabilityController(CapabilitySettings(  # dry-run plans for the capability page
            enabled=True, reconcile_interval_seconds=0.5, debounce_seconds=0, cooldown_seconds=0,
            policies={"research-nlp": {"share": {"fraction": 0.5}}}), engine, client_for(sim, tmp_path),
            AlwaysLeader("wd-0").start(), informer_backoff=(0.02, 0.2)).start()

        def enough() -> bool:
            with Session(engine) as s:
                firing = s.execute(select(func.count()).where(Alert.state == "firing")).scalar_one()
                used = s.execute(select(func.count()).where(JobRun.cpu_core_seconds_used > 0)).scalar_one()
                rollups = s.execute(select(func.count(func.distinct(UsageRollup.bucket_start)))).scalar_one()
                gang = s.execute(select(func.count()).where(Alert.kind == "GangUnschedulable")).scalar_one()
                told = s.execute(select(func.count()).select_from(NotificationDelivery)).scalar_one()
                planned = s.execute(select(func.count()).select_from(CapabilityChange)).scalar_one()
                gpu = s.execute(select(func.count()).where(UsageRollup.gpu_samples > 0)).scalar_one()
            return firing >= 3 and used >= 3 and rollups >= 5 and gang > 0 and told > 0 and planned > 0 and gpu >= 3

        app = create_app(engine, settings, Health(ready=watchdog.ready, collectors=dict),
                         queues=lambda: [QueueView(*row) for row in watchdog.index.queue_snapshot()],
                         outbox=watchdog.outbox, request_made=watchdog.request_made)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, daemon=True)
        try:
            wait_for(enough, timeout=60, interval=0.5)
            thread.start()
            wait_for(lambda: server.started, timeout=10)
            driver = browser()
            try:
                yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}", driver, engine
            finally:
                driver.quit()
        finally:
            server.should_exit = True
            thread.join(10)
            capability.stop()
            watchdog.stop()
            engine.dispose()


def shoot(driver: Any, tmp_path: Path, name: str) -> None:
    (tmp_path / "ui").mkdir(exist_ok=True)
    target = tmp_path / "ui" / f"{name}.png"
    driver.save_screenshot(str(target))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(target, ARTIFACTS / target.name)


def hrefs(driver: Any) -> set[str]:
    from selenium.webdriver.common.by import By

    return {a.get_attribute("href") for a in driver.find_elements(By.TAG_NAME, "a")}


def test_every_page_renders_and_every_link_works(site: tuple[str, Any, Engine], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    base, driver, engine = site
    reader = "Basic " + base64.b64encode(f"me:{READ}".encode()).decode()
    driver.execute_cdp_cmd("Network.enable", {})  # the reader's login, as the browser would send it
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": reader}})
    with Session(engine) as s:  # the run with the longest usage history: its chart has lines
        uid = s.execute(select(UsageRollup.job_uid).where(UsageRollup.job_uid != "").group_by(UsageRollup.job_uid)
                        .order_by(func.count().desc()).limit(1)).scalar_one()
        gpu_uid = s.execute(select(UsageRollup.job_uid).where(UsageRollup.job_uid != "", UsageRollup.gpu_samples > 0)
                            .group_by(UsageRollup.job_uid).order_by(func.count().desc()).limit(1)).scalar_one()
    job = f"{base}/ui/jobs/{uid}"
    driver.get(base + "/ui/alerts?state=firing")
    alert = next(h for h in hrefs(driver) if "/ui/alerts/" in h)
    driver.get(base + "/")
    queue = next(h for h in hrefs(driver) if h.endswith("/ui/queues/research-nlp"))
    pages = {"queues": base + "/", "jobs": base + "/ui/jobs", "job": job, "gpu-job": f"{base}/ui/jobs/{gpu_uid}",
             "alerts": base + "/ui/alerts?state=firing",
             "alert": alert, "silences": base + "/ui/silences", "notifications": base + "/ui/notifications",
             "capability": queue}
    expect = {"queues": "research-nlp", "jobs": "efficiency", "job": "<polyline", "gpu-job": "GPU utilisation",
              "alerts": "firing",
              "alert": "Silence", "silences": "matchers", "notifications": "team-chat", "capability": "dry"}
    links: set[str] = set()
    for name, url in pages.items():
        driver.get(url)
        assert driver.find_element(By.TAG_NAME, "h1").text, name
        assert expect[name] in driver.page_source, f"{name}: {expect[name]!r} not on {url}"
        shoot(driver, tmp_path, name)
        links |= {h for h in hrefs(driver) if h.startswith(base)}
        if name == "gpu-job":  # DCGM's utilisation drawn beside CPU and memory; minutes of history: no patch
            charts = [svg.get_attribute("aria-label") for svg in driver.find_elements(By.TAG_NAME, "svg")]
            assert charts == ["CPU", "Memory", "GPU utilisation"], charts
            gpu_lines = driver.find_elements(By.CSS_SELECTOR, 'svg[aria-label="GPU utilisation"] polyline')
            assert len(gpu_lines) == 2 and len(gpu_lines[1].get_attribute("points").split()) >= 2
            assert "not enough history (" in driver.find_element(By.ID, "no-patch").text
            assert not driver.find_elements(By.ID, "patch") and "limits:" not in driver.page_source
    assert len(links) > 20
    with httpx.Client(headers={"Authorization": reader}, timeout=10) as http:
        broken = {link: code for link in sorted(links) if (code := http.get(link).status_code) >= 400}
    assert not broken, broken


def test_resolve_and_silence_need_the_token(site: tuple[str, Any, Engine], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    base, driver, engine = site
    reader = "Basic " + base64.b64encode(f"me:{READ}".encode()).decode()
    driver.execute_cdp_cmd("Network.enable", {})  # logged in as a reader: that is no write token
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": reader}})
    with Session(engine) as s:  # one that keeps firing while the scenario plays (the gang never fits)
        alert_id = s.execute(select(Alert.id).where(Alert.state == "firing", Alert.kind == "GangUnschedulable")
                             .limit(1)).scalar_one()
    alert = f"{base}/ui/alerts/{alert_id}"

    def submit(form_action: str, token: str) -> None:
        driver.get(alert)
        form = driver.find_element(By.CSS_SELECTOR, f'form[action="{form_action}"]')
        form.find_element(By.NAME, "token").send_keys(token)
        page = driver.find_element(By.TAG_NAME, "html")
        form.find_element(By.TAG_NAME, "button").click()
        # click() returns before the POST's answer is loaded: wait until the old page is gone
        WebDriverWait(driver, 20).until(expected_conditions.staleness_of(page))

    submit(f"/ui/alerts/{alert_id}/resolve", READ)
    assert "401" in driver.find_element(By.TAG_NAME, "h1").text
    shoot(driver, tmp_path, "resolve-refused")
    submit("/ui/silences", "wrong")
    assert "401" in driver.find_element(By.TAG_NAME, "h1").text
    with Session(engine) as s:
        assert s.get(Alert, alert_id).state == "firing"  # type: ignore[union-attr]
        assert s.execute(select(func.count()).select_from(Silence)).scalar_one() == 0

    submit("/ui/silences", TOKEN)
    assert "Silence added." in driver.page_source
    assert driver.current_url.endswith(f"/ui/alerts/{alert_id}?note=silenced")
    submit(f"/ui/alerts/{alert_id}/resolve", TOKEN)
    assert "Resolved" in driver.page_source, driver.page_source[:500]
    shoot(driver, tmp_path, "resolved")
    with Session(engine) as s:
        assert s.get(Alert, alert_id).state == "resolved"  # type: ignore[union-attr]
        assert s.execute(select(func.count()).select_from(Silence)).scalar_one() == 1
    driver.get(base + "/ui/silences")
    assert "alertname=" in driver.page_source
