"""The Dockerfile builds, and both commands run from the image against the simulator, as the chart
runs them (uid 10001, read-only configuration mounted, the watchdog's SQLite in its working
directory). Built with buildah (vfs, chroot isolation) on a debootstrap base: see
deploy/tools/build-image.sh for why. Needs root, buildah and debootstrap (make test installs them)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.test_cli import free_port
from tests.simtools import wait_for
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/volcano-monitor:test"
BUILDAH = ["buildah", "--storage-driver", "vfs"]


@pytest.fixture(scope="module")
def image() -> str:
    if os.geteuid() != 0 or not shutil.which("buildah") or not shutil.which("debootstrap"):
        pytest.fail("building the image needs root, buildah and debootstrap (make test installs them as root)",
                    pytrace=False)
    done = subprocess.run(["bash", str(ROOT / "deploy" / "tools" / "build-image.sh"), TAG], capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return TAG


@pytest.fixture
def container(image: str) -> Iterator[str]:
    name = subprocess.run([*BUILDAH, "from", image], capture_output=True, text=True, check=True).stdout.strip()
    yield name
    subprocess.run([*BUILDAH, "rm", name], capture_output=True, check=False)


def run_in(container: str, config: Path, *command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*BUILDAH, "run", "--isolation", "chroot", "--network", "host", "--user", "10001:10001",
                             "-v", f"{config}:/cfg:ro", container, "--", *command],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read() if response.status == 200 else b""
    except OSError:
        return b""


# Building the image (debootstrap of its base on a fresh machine, then pip wheel of every dependency) is most
# of the time: 300 s was not always enough beside the other xdist worker, so it gets its own budget.
@pytest.mark.slow(300)
@pytest.mark.timeout(900)
def test_both_commands_run_from_the_image(container: str, tmp_path: Path) -> None:
    config = tmp_path / "cfg"
    config.mkdir(mode=0o755)
    with SimulatorThread(scenario="default", speed=10) as sim:
        write_kubeconfig(config / "kubeconfig", sim.url)
        (config / "kubeconfig").chmod(0o644)
        exporter_port, watchdog_port = free_port(), free_port()
        processes = [
            run_in(container, config, "volcano-exporter", "--kubeconfig", "/cfg/kubeconfig",
                   "--listen", f"127.0.0.1:{exporter_port}"),
            run_in(container, config, "volcano-watchdog", "--kubeconfig", "/cfg/kubeconfig",
                   "--listen", f"127.0.0.1:{watchdog_port}", "run"),
        ]
        try:
            wait_for(lambda: b"volcano_pod_info{" in get(f"http://127.0.0.1:{exporter_port}/metrics"), timeout=60)
            wait_for(lambda: b'"ready"' in get(f"http://127.0.0.1:{watchdog_port}/readyz"), timeout=90)
            wait_for(lambda: b'"total":0' not in get(f"http://127.0.0.1:{watchdog_port}/api/v1/jobs")
                     and bool(get(f"http://127.0.0.1:{watchdog_port}/api/v1/jobs")), timeout=60)
        finally:
            for process in processes:
                os.killpg(process.pid, signal.SIGTERM)
            outputs = [process.communicate(timeout=30)[0].decode(errors="replace") for process in processes]
    assert all("Traceback" not in out for out in outputs), outputs
