"""bench/soak.py's view of the programs under test: their processes (started, watched, stopped with the
script), their RSS and CPU time read from /proc, and their /metrics scraped as Prometheus does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

Obj = dict[str, Any]

_ROOT = Path(__file__).resolve().parents[1]


def read_rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def read_cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Child:
    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.log = self.log_path.open("wb")
        setpriv = shutil.which("setpriv")
        # Dies with this script even on SIGKILL (PR_SET_PDEATHSIG), without a preexec_fn.
        prefix = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
        self.proc = subprocess.Popen(prefix + argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=_ROOT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLCANO_EXPORTER_", "VOLCANO_WATCHDOG_"))}
    return env | extra


def wait_until(condition: Callable[[], bool], timeout: float, what: str, children: list[Child]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for child in children:
            if not child.alive():
                raise SystemExit(f"bench/soak: {child.name} exited ({child.proc.returncode}):\n{child.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/soak: timed out waiting for {what}")
        time.sleep(0.25)


def ready(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# ---- scraping --------------------------------------------------------------------------------------------

SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", re.M)


def sums(body: bytes, prefix: bytes, names: tuple[str, ...]) -> dict[str, float]:
    """Totals of the named families (every label set added up), from the lines starting with `prefix`."""
    out = dict.fromkeys(names, 0.0)
    for match in SAMPLE.finditer(body):
        name = match.group(1)
        if name.startswith(prefix):
            key = name.decode()
            if key in out:
                with contextlib.suppress(ValueError):
                    out[key] += float(match.group(3))
    return out


ERROR_FAMILIES = ("volcano_exporter_handler_errors_total", "volcano_exporter_request_errors_total")


def error_series(body: bytes) -> dict[str, float]:
    """The exporter's non-zero error counters by label set (same parse as `sums`), so that
    `exporter_errors` can be read without the logs."""
    out: dict[str, float] = {}
    for match in SAMPLE.finditer(body):
        if match.group(1).decode() in ERROR_FAMILIES:
            with contextlib.suppress(ValueError):
                if value := float(match.group(3)):
                    out[(match.group(1) + (match.group(2) or b"")).decode(errors="replace")] = value
    return out


@dataclass
class Scrapes:
    count: int = 0
    failures: int = 0
    durations: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    last: bytes = b""

    def get(self, http: httpx.Client, url: str) -> None:
        started = time.perf_counter()
        try:
            response = http.get(url, timeout=30)
            response.raise_for_status()
        except httpx.HTTPError:
            self.failures += 1
            return
        self.durations.append(time.perf_counter() - started)
        self.count += 1
        self.sizes.append(len(response.content))
        self.last = response.content

    def summary(self) -> Obj:
        ordered = sorted(self.durations)
        return {"count": self.count, "failures": self.failures,
                "ms_p50": round(ordered[len(ordered) // 2] * 1000, 1) if ordered else None,
                "ms_max": round(ordered[-1] * 1000, 1) if ordered else None,
                "bytes_first": self.sizes[0] if self.sizes else None,
                "bytes_last": self.sizes[-1] if self.sizes else None,
                "bytes_max": max(self.sizes) if self.sizes else None}

