"""The wheel installs one import package of its own, `volcano_monitor`, so it lives next to PyPI's
`watchdog` (file-system events) in one environment; in the test process each module has one name."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import volcano_monitor.exporter.cli
import volcano_monitor.watchdog.state.db.engine

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("bare", ["core", "exporter", "simulator", "dashboards"])
def test_the_folders_are_not_importable_under_their_bare_names(bare: str) -> None:
    with pytest.raises(ModuleNotFoundError, match=f"volcano_monitor.{bare}"):
        importlib.import_module(bare)


def test_a_bare_watchdog_is_never_ours() -> None:
    try:
        found = importlib.import_module("watchdog")
    except ModuleNotFoundError:
        return
    assert Path(found.__file__ or "").resolve().parent != ROOT / "watchdog"


def test_modules_come_from_the_repository_folders() -> None:
    assert Path(volcano_monitor.exporter.cli.__file__).resolve() == ROOT / "exporter" / "cli.py"
    assert volcano_monitor.watchdog.state.db.engine.MIGRATIONS == ROOT / "watchdog" / "state" / "db" / "migrations"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source") / "tree"
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds.
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".tools", ".demo", "build", "test-artifacts", "*.egg-info", "__pycache__", "*.db*", ".*cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(out), str(source)], check=True, cwd=out)
    (built,) = out.glob("volcano_monitor-*.whl")
    return built


def test_the_wheel_holds_only_volcano_monitor_with_its_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"volcano_monitor"}
    for needed in ("volcano_monitor/watchdog/state/db/migrations/env.py",
                   "volcano_monitor/watchdog/state/db/migrations/script.py.mako",
                   "volcano_monitor/watchdog/state/db/migrations/versions/0001_initial.py",
                   "volcano_monitor/dashboards/volcano-job.json",
                   "volcano_monitor/core/kube/informer.py",
                   "volcano_monitor/py.typed"):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.startswith(("volcano_monitor/tests", "tests/"))]


@pytest.mark.slow(40)
def test_the_wheel_installs_next_to_pypis_watchdog_and_both_import(wheel: Path, tmp_path: Path) -> None:
    """A fresh venv: PyPI's watchdog and the wheel, the project's dependencies borrowed from this venv's
    site-packages (a plain path entry, so the editable install's hook there is not loaded)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel), "watchdog"],
                   check=True)
    probe = ("import watchdog.observers, watchdog.events, volcano_monitor.watchdog.runtime.cli,"
             " volcano_monitor.exporter.cli,"
             " volcano_monitor.dashboards.generate as d;"
             " print(watchdog.observers.__file__); print(volcano_monitor.watchdog.runtime.cli.__file__);"
             " print(len(d.rendered()))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path,
                          env=env)
    observers, ours, dashboards = done.stdout.split()
    assert observers.startswith(site) and "/watchdog/observers/" in observers
    assert ours.startswith(site) and ours.endswith("volcano_monitor/watchdog/runtime/cli.py")
    assert int(dashboards) >= 4
    # The console scripts run, and the packaged migrations create a database.
    helped = subprocess.run([str(venv / "bin" / "volcano-exporter"), "--help"], capture_output=True, text=True,
                            cwd=tmp_path, env=env)
    assert helped.returncode == 0 and "--kubeconfig" in helped.stdout, helped.stderr
    database = tmp_path / "fresh.db"
    migrated = subprocess.run([str(venv / "bin" / "volcano-watchdog"), "--database-url", f"sqlite:///{database}",
                               "migrate"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert database.stat().st_size > 0
