"""The fleet page in a real headless browser (the chromium of test_browser), over two clusters' rows in one
SQLite database, served by cluster a's app: the navigation's first entry opens it, it shows both clusters and
b as stale, and following b's "jobs waiting" lands on the very jobs it
counts, b's Pending and Inqueue ones, with the cluster column."""

from __future__ import annotations

import threading
from pathlib import Path

import uvicorn
from pydantic import SecretStr

from tests.simtools import wait_for
from tests.watchdog.views.test_api import NOW, health
from tests.watchdog.views.test_fleet import seed_two
from tests.watchdog.views.ui.test_browser import browser, browser_check, shoot
from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.state.db.engine import make_engine, migrate
from volcano_monitor.watchdog.views.api import create_app


def test_the_fleet_page_in_a_browser(tmp_path: Path) -> None:
    browser_check()
    from selenium.webdriver.common.by import By

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    migrate(make_engine(url))
    two = seed_two(url)
    app = create_app(two.a, Settings(api_token=SecretStr("t0ken-of-a")), health(), clock=lambda: NOW)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    driver = None
    try:
        wait_for(lambda: server.started, timeout=10)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        driver = browser()
        driver.get(base + "/ui/jobs")
        first = driver.find_elements(By.CSS_SELECTOR, "header a")[0]
        assert first.text == "Fleet"
        first.click()
        assert driver.find_element(By.TAG_NAME, "h1").text == "Fleet"
        rows = {r.find_elements(By.TAG_NAME, "td")[0].text: r
                for r in driver.find_elements(By.CSS_SELECTOR, "tbody tr")}
        assert set(rows) == {"a", "b"}
        assert "stale" in rows["b"].text and "stale" not in rows["a"].text
        shoot(driver, tmp_path, "fleet")
        waiting = rows["b"].find_elements(By.TAG_NAME, "td")[2].find_element(By.TAG_NAME, "a")
        assert waiting.text == "2"  # one Pending, one Inqueue
        waiting.click()
        assert driver.find_element(By.TAG_NAME, "h1").text == "Jobs"
        headers = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "thead th")]
        cells = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                 for tr in driver.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert headers[0] == "cluster" and [c[:2] for c in cells] == [["b", "wait-b2"], ["b", "wait-b"]]
        driver.get(base + "/")  # more than one cluster: home is the fleet
        assert driver.find_element(By.TAG_NAME, "h1").text == "Fleet"
    finally:
        if driver is not None:
            driver.quit()
        server.should_exit = True
        thread.join(10)
        two.a.dispose()
        two.b.dispose()
