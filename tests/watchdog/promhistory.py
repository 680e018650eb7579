"""A real Prometheus holding generated history: OpenMetrics text written by the caller, turned into TSDB
blocks by `promtool tsdb create-blocks-from openmetrics`, and a Prometheus server started on that data
directory (no scrape targets, retention long enough to keep every block)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def _binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    assert found, f"{name} is needed (Debian package prometheus)"  # a failure, never a skip
    return found


def create_blocks(openmetrics: Path, data_dir: Path) -> None:
    """TSDB blocks in `data_dir` from an OpenMetrics file (ending in `# EOF`)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", "-q",
                             str(openmetrics), str(data_dir)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"promtool failed: {result.stdout[-2000:]}{result.stderr[-2000:]}"


class PrometheusServer:
    """`/usr/bin/prometheus` on `data_dir`, listening on a free local port."""

    def __init__(self, data_dir: Path, workdir: Path, extra_args: tuple[str, ...] = ()) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        self.log_path = workdir / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [_binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data_dir}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=90d",
             "--query.max-samples=200000000", "--log.level=warn", *extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 60.0) -> PrometheusServer:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.process.returncode}: {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready within {timeout}s: {self.log()[-2000:]}")
            time.sleep(0.2)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()
