"""The whole stack on one machine, as a user would run it: the simulated cluster, the exporter, the
watchdog, a local chat inbox and, where installed, Prometheus (with alerts/ loaded) and Alertmanager
(routing to the watchdog's receiver). Used by `make demo` and by the end-to-end test; every component
is started with its real command, on the ports given, with its log in `workdir`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Stack", "alertmanager_binary", "alertmanager_config", "prometheus_config"]


def alertmanager_binary() -> str | None:
    """Debian names it prometheus-alertmanager; upstream tarballs alertmanager."""
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def prometheus_config(targets: dict[str, str], rule_files: Sequence[Path], alertmanager: str | None,
                      interval: str = "5s") -> dict[str, Any]:
    """Scrape each `job name -> host:port`, evaluate the rule files, send alerts to `alertmanager`."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                           for job, target in targets.items()],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


def alertmanager_config(watchdog_url: str, api_token: str, group_wait: str = "10s") -> dict[str, Any]:
    """Everything to the watchdog's receiver, which routes it on to the chats (docs/notifications.md)."""
    return {
        "route": {"receiver": "volcano-watchdog", "group_by": ["alertname", "namespace", "job_name"],
                  "group_wait": group_wait, "group_interval": "30s", "repeat_interval": "4h"},
        "receivers": [{"name": "volcano-watchdog", "webhook_configs": [{
            "url": f"{watchdog_url.rstrip('/')}/api/v1/alertmanager", "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer", "credentials": api_token}},
        }]}],
    }


@dataclass
class Stack:
    workdir: Path
    python: str = sys.executable
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, command: Sequence[str], ready_url: str | None = None, timeout: float = 60) -> None:
        """Start `command` with its output in workdir/NAME.log; wait for `ready_url` to answer 200."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / f"{name}.log").open("ab")
        # A session of its own: Ctrl-C in the terminal reaches only the demo, which stops the others in
        # order (the simulator last), instead of every process at once and the clients logging errors.
        self.processes[name] = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True)
        if ready_url:
            self.wait_http(name, ready_url, timeout)

    def start_python(self, name: str, module: str, *args: str, ready_url: str | None = None,
                     timeout: float = 60) -> None:
        self.start(name, [self.python, "-m", module, *args], ready_url, timeout)

    def wait_http(self, name: str, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        process = self.processes[name]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited early with code {process.returncode}; see {self.log(name)}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name}: {url} did not answer within {timeout:g}s; see {self.log(name)}")

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def write_yaml(self, name: str, data: dict[str, Any]) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def start_prometheus(self, port: int, config: dict[str, Any], timeout: float = 60) -> str:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed (Debian package prometheus)")
        path = self.write_yaml("prometheus.yml", config)
        self.start("prometheus", [binary, f"--config.file={path}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                                  f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
                                  f"--web.external-url=http://127.0.0.1:{port}"],  # links in alerts, not the hostname
                   f"http://127.0.0.1:{port}/-/ready", timeout)
        return f"http://127.0.0.1:{port}"

    def start_alertmanager(self, port: int, config: dict[str, Any], timeout: float = 60) -> str:
        binary = alertmanager_binary()
        if binary is None:
            raise RuntimeError("Alertmanager is not installed (Debian package prometheus-alertmanager)")
        path = self.write_yaml("alertmanager.yml", config)
        self.start("alertmanager", [binary, f"--config.file={path}", f"--storage.path={self.workdir / 'am'}",
                                    f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                                    f"--web.external-url=http://127.0.0.1:{port}"],
                   f"http://127.0.0.1:{port}/-/ready", timeout)
        return f"http://127.0.0.1:{port}"

    def failed(self) -> str | None:
        """The name of a process that exited, if any."""
        return next((name for name, p in self.processes.items() if p.poll() is not None), None)

    def stop(self) -> dict[str, int | None]:
        """Terminate everything, newest first, each gone before the next is told (the API server the
        others talk to goes last); the exit codes."""
        codes: dict[str, int | None] = {}
        for name, process in reversed(self.processes.items()):
            if process.poll() is None:
                process.terminate()
            try:
                codes[name] = process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = process.wait(5)
        return codes
