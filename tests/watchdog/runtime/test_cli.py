"""`volcano-watchdog run` as a person starts it: what it says when it cannot start."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import yaml


def test_a_taken_port_is_one_line_and_exit_2_before_anything_starts(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    database = tmp_path / "watchdog.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "volcano_monitor.watchdog.runtime.cli",
                               "--kubeconfig", str(kubeconfig),
                               "--listen", f"127.0.0.1:{port}", "--database-url", f"sqlite:///{database}", "run"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"volcano-watchdog: cannot listen on 127.0.0.1:{port}: "
                                                "Address already in use"]
    assert not database.exists()  # nothing started: no database, no informers, no leader election
