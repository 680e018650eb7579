"""Basic facts of the Dockerfile (Docker itself is not available to the tests): a build stage that makes
wheels, a slim Python 3.11 runtime that installs only those, a non-root numeric user matching the chart,
both commands, and a build context that holds exactly what the build copies."""

from __future__ import annotations

import re
import tomllib

import yaml

from tests.deploy.chart import CHART, ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.MULTILINE))


def expand(text: str) -> str:
    values = args()
    return re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], text)


def test_multi_stage_build_then_slim_python_311_runtime() -> None:
    build, runtime = stages()
    assert re.fullmatch(r"\S+ AS build", build[0][1]) and expand(runtime[0][1]).startswith("python:3.11-slim")
    assert expand(build[0][1].split()[0]).startswith("python:3.11")
    assert any(i == "RUN" and "pip wheel --wheel-dir /wheels ." in a for i, a in build)
    install = next(a for i, a in runtime if i == "RUN" and "pip install" in a)
    assert "from=build" in install and "--no-index" in install and "volcano-monitor" in install


def test_runs_as_the_charts_non_root_user_without_entrypoint() -> None:
    runtime = stages()[-1]
    users = [expand(a) for i, a in runtime if i == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"] == values["containerSecurityContext"]["runAsUser"] != 0
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]
    names = [i for i, _ in runtime]
    assert names.index("USER") > max(n for n, i in enumerate(names) if i == "RUN")  # nothing runs as root after
    assert "ENTRYPOINT" not in names
    assert [a for i, a in runtime if i == "CMD"] == ['["volcano-exporter"]']
    assert {a for i, a in runtime if i == "EXPOSE"} == {"9746 9747"}
    assert [a for i, a in runtime if i == "WORKDIR"] == ["/var/lib/volcano-watchdog"]  # the chart's SQLite mount


def test_both_commands_are_installed_console_scripts() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {"volcano-exporter", "volcano-watchdog"} <= project["project"]["scripts"].keys()
    runtime_run = " ".join(a for i, a in stages()[-1] if i == "RUN")
    assert "volcano-exporter --help" in runtime_run and "volcano-watchdog --help" in runtime_run


def test_build_context_admits_exactly_what_the_build_copies() -> None:
    """.dockerignore excludes everything, then re-admits the sources; the build stage copies those: every
    package setuptools packs (pyproject's `include`) and the folders volcano_monitor/ links in."""
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*"
    admitted = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = set()
    for instruction, arguments in stages()[0]:
        if instruction == "COPY":
            assert "--from" not in arguments
            copied |= {source.rstrip("/") for source in arguments.split()[:-1]}
    assert copied == admitted
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    linked = {link.name for link in (ROOT / "volcano_monitor").iterdir() if link.is_symlink()}
    assert linked == {"core", "exporter", "watchdog", "simulator", "dashboards"}
    assert packages | linked | {"pyproject.toml", project["project"]["readme"]} == copied
