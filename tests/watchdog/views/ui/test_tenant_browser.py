"""Each team sees its own, in a real headless browser (Debian's chromium through Selenium, as
test_browser.py): a real watchdog process with `auth.mode: kubernetes` (tests/watchdog/views/tenants.py);
the browser sends alice's bearer token on every request (Chrome's DevTools `Network.setExtraHTTPHeaders`,
as a browser behind a token-injecting proxy would); the jobs and alerts pages list team-a only, every link
on them opens a page that names no team-b job, and team-b's job page is a 404. Without the header the
browser gets the 401. Screenshots go to test-artifacts/ui/ (tenant-*.png)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.watchdog.views.tenants import ALICE, ROOT, Site, bearer, tenant_watchdog
from tests.watchdog.views.ui.test_browser import browser, hrefs, shoot


@pytest.fixture
def signed_in(tmp_path: Path) -> Iterator[tuple[Site, Any]]:
    with tenant_watchdog(tmp_path) as site:
        driver = browser()
        try:
            yield site, driver
        finally:
            driver.quit()


def column(driver: Any, header: str) -> list[str]:
    """The cells of the page's table under `header`."""
    from selenium.webdriver.common.by import By

    heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "table th")]
    index = heads.index(header)
    return [row.find_elements(By.TAG_NAME, "td")[index].text
            for row in driver.find_elements(By.CSS_SELECTOR, "table tr") if row.find_elements(By.TAG_NAME, "td")]


@pytest.mark.slow(120)
def test_team_a_user_sees_only_team_a_in_the_browser(signed_in: tuple[Site, Any], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    site, driver = signed_in
    driver.get(f"{site.url}/ui/jobs")
    assert "a valid bearer token" in driver.page_source  # no identity yet: the one-line 401
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": bearer(ALICE)})

    driver.get(f"{site.url}/ui/jobs")
    shoot(driver, tmp_path, "tenant-jobs")
    shown = column(driver, "namespace")
    assert shown and set(shown) == {"team-a"}, shown
    driver.get(f"{site.url}/ui/alerts?state=")
    shoot(driver, tmp_path, "tenant-alerts")
    assert "team-a/" in driver.find_element(By.TAG_NAME, "table").text
    assert "team-b" not in driver.page_source

    everything = site.get("/api/v1/jobs?limit=1000", ROOT).json()["items"]
    team_b = {job["name"] for job in everything if job["namespace"] == "team-b"}
    driver.get(f"{site.url}/ui/jobs")
    pages = sorted(h for h in hrefs(driver) if h and h.startswith(site.url))
    assert pages
    for href in pages:
        driver.get(href)
        source = driver.page_source
        assert "team-b" not in source, href
        assert not any(f">{name}<" in source for name in team_b), href
    theirs = next(job for job in everything if job["namespace"] == "team-b")
    driver.get(f"{site.url}/ui/jobs/{theirs['uid']}")
    shoot(driver, tmp_path, "tenant-other-team-job")
    assert "no such job run" in driver.page_source
