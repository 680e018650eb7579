"""`volcano-sim --authn FILE`: the simulator process answers TokenReview and SubjectAccessReview from the
users and rules of a YAML file (what a demo or a watchdog with `auth.mode: kubernetes` talks to), and a bad
file is one line and exit, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.simtools import wait_for
from volcano_monitor.core.kube.config import api_client
from volcano_monitor.core.kube.reviews import Identity, Reviews

AUTHN = {"users": {"tok-a": {"user": "alice", "groups": ["team-a"]}},
         "rules": [{"group": "team-a", "namespaces": ["team-a"], "verbs": ["list"],
                    "resources": ["jobs.batch.volcano.sh"]}]}


def sim(tmp_path: Path, authn: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "volcano_monitor.simulator.cli", "--listen", "127.0.0.1:0", "--scenario", "empty",
         "--kubeconfig-out", str(tmp_path / "k.yaml"), "--authn", str(authn)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_reviews_answer_from_the_file(tmp_path: Path) -> None:
    authn = tmp_path / "authn.yaml"
    authn.write_text(yaml.safe_dump(AUTHN))
    process = sim(tmp_path, authn)
    try:
        wait_for(lambda: (tmp_path / "k.yaml").exists() or process.poll() is not None, timeout=30)
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        reviews = Reviews(api_client(str(tmp_path / "k.yaml")))
        alice = reviews.authenticate("tok-a")
        assert alice == Identity("alice", ("team-a",))
        assert reviews.allowed(alice, "team-a") and not reviews.allowed(alice, "team-b")
        assert reviews.authenticate("tok-b") is None
    finally:
        process.terminate()
        process.wait(10)


def test_a_bad_file_is_one_line(tmp_path: Path) -> None:
    authn = tmp_path / "authn.yaml"
    authn.write_text(yaml.safe_dump({"rules": [{"namespaces": ["x"]}]}))
    process = sim(tmp_path, authn)
    out, _ = process.communicate(timeout=30)
    assert process.returncode != 0
    assert out.strip().splitlines()[-1] == f"volcano-sim: {authn}: authn.rules[0]: needs a user or a group", out
    assert "Traceback" not in out
    missing = sim(tmp_path, tmp_path / "nope.yaml")
    out, _ = missing.communicate(timeout=30)
    assert missing.returncode != 0 and "cannot read" in out and "Traceback" not in out
