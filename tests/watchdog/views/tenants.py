"""A real watchdog process with `auth.mode: kubernetes` on the simulator's default scenario, whose
TokenReview / SubjectAccessReview answer for three users: alice may list Volcano jobs in team-a only, root
everywhere, and bob's token has expired. Shared by the API and browser tenant tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.simtools import wait_for
from tests.watchdog.harness import FAST_DETECTORS
from tests.watchdog.test_crash import free_port
from volcano_monitor.simulator.authn import Authn
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig

ALICE, ROOT, EXPIRED = "tok-alice-Sekret", "tok-root-Sekret", "tok-bob-expired"
SPEED = 200  # the default scenario fails and OOMs jobs of both teams within ~20 s of wall time at 200x
WRITE_TOKEN = "tenants-write-T0ken"
AUTHN = {
    "users": {ALICE: {"user": "alice", "groups": ["team-a"]}, ROOT: {"user": "root", "groups": ["platform"]},
              EXPIRED: {"user": "bob", "groups": ["team-b"], "expired": True}},
    "rules": [{"group": "team-a", "namespaces": ["team-a"], "verbs": ["get", "list", "watch"],
               "resources": ["jobs.batch.volcano.sh"]},
              {"group": "platform", "namespaces": ["*"], "verbs": ["list"], "resources": ["jobs.batch.volcano.sh"]}],
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Site:
    url: str
    sim: SimulatorThread
    log: Path

    def get(self, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = {**(bearer(token) if token else {}), **kwargs.pop("headers", {})}
        return httpx.get(f"{self.url}{path}", headers=headers, timeout=10, **kwargs)


def _namespaces(site: Site, path: str) -> set[str]:
    response = site.get(path, ROOT)
    return {item["namespace"] for item in response.json()["items"]} if response.status_code == 200 else set()


@contextmanager
def tenant_watchdog(tmp_path: Path) -> Iterator[Site]:
    """The watchdog process, once root sees jobs of team-a and team-b and alerts of team-a and of another
    namespace (the default scenario fails and OOMs jobs in both teams soon after the start at SPEED)."""
    log, kubeconfig, config = tmp_path / "watchdog.log", tmp_path / "kubeconfig", tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "api_token": WRITE_TOKEN,
        "auth": {"mode": "kubernetes", "cache_ttl_seconds": 30, "trusted_proxies": ["192.0.2.0/24"]},
        "costs": {"currency": "USD", "prices": {"cpu": 0.05, "memory": 0.01}},
        "detectors": FAST_DETECTORS,
        "sources": {"metrics_api": {"interval_seconds": 0.25}, "rollup_seconds": 1, "flush_interval_seconds": 1},
    }))
    port = free_port()
    with SimulatorThread(scenario="default", speed=SPEED, tick_interval=0.05) as sim:
        sim.api.authn = Authn.from_config(AUTHN)
        write_kubeconfig(kubeconfig, sim.url)
        process = subprocess.Popen(
            [sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli", "--kubeconfig", str(kubeconfig),
             "--database-url", f"sqlite:///{tmp_path / 'watchdog.db'}", "--listen", f"127.0.0.1:{port}",
             "--config", str(config)],
            stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        site = Site(f"http://127.0.0.1:{port}", sim, log)
        try:
            def ready() -> bool:
                assert process.poll() is None, log.read_text()[-3000:]
                try:
                    return httpx.get(f"{site.url}/readyz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_for(ready, timeout=60, interval=0.2)
            wait_for(lambda: {"team-a", "team-b"} <= _namespaces(site, "/api/v1/jobs?limit=1000"),
                     timeout=90, interval=0.5)
            wait_for(lambda: len(alerted := _namespaces(site, "/api/v1/alerts?limit=1000")) >= 2
                     and "team-a" in alerted, timeout=120, interval=0.5)
            yield site
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
