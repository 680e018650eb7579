"""The layout rules of docs/architecture.md, checked on the source: no import cycle anywhere in volcano_monitor,
no import that runs back up a layer, and no module over 400 lines without a reason at its top (product modules
and the benchmarks' scripts alike: a long one is as hard to read in bench/ as anywhere).

Every import counts, also those inside functions (a late import hides a cycle from Python, not from a reader).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("core", "exporter", "watchdog", "simulator", "dashboards")
# The size rule walks these; the import rules only PROGRAMS (bench/'s scripts are no layer of the package).
SIZED = (*PROGRAMS, "bench")

# The watchdog's layers, lowest first: a module may import from its own layer and those before it. `state` is at
# the bottom as the model is in the VPA recommender: sources write into it, findings read it. Settings (config.py
# and every settings module) sit below all of them and import only core and one another.
WATCHDOG_LAYERS = ("settings", "state", "sources", "findings", "actions", "views", "runtime")

# Imports between programs: each program may use core; these are the only others.
ACROSS_PROGRAMS = {
    # docs/metrics.md documents both programs' families; imported only when the reference is rendered.
    ("volcano_monitor.exporter.docs", "volcano_monitor.watchdog.views.metrics"),
}

MAX_LINES = 400
ONE_PIECE = re.compile(r"^One piece:", re.M)


def source_files(folders: Iterable[str]) -> list[Path]:
    return [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))
            if "migrations" not in path.parts]  # Alembic's revisions: numbered scripts, never imported by name


def module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in source_files(PROGRAMS):
        parts = ("volcano_monitor", *path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _target(name: str, modules: Mapping[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The volcano_monitor modules `module` imports (a name imported from a package counts as its module when it
    is one, else as the package)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if source.startswith("volcano_monitor"):
                for alias in node.names:
                    target = _target(f"{source}.{alias.name}", modules) if f"{source}.{alias.name}" in modules \
                        else _target(source, modules)
                    if target:
                        found.add(target)
        elif isinstance(node, ast.Import):
            found.update(t for alias in node.names if alias.name.startswith("volcano_monitor")
                         if (t := _target(alias.name, modules)))
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def program(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def is_settings(module: str) -> bool:
    last = module.rpartition(".")[2]
    return program(module) == "watchdog" and (last in ("config", "settings") or last.endswith("_settings"))


def watchdog_layer(module: str) -> int:
    """Index in WATCHDOG_LAYERS; a module of the watchdog outside every layer folder fails the test."""
    if is_settings(module):
        return 0
    parts = module.split(".")
    if len(parts) > 2 and parts[2] in WATCHDOG_LAYERS:
        return WATCHDOG_LAYERS.index(parts[2])
    return -1


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = program(module), program(target)
            if mine != theirs:
                if theirs != "core" and (module, target) not in ACROSS_PROGRAMS:
                    wrong.append(f"{module} -> {target}: {mine} may use core, not {theirs}")
                continue
            if mine != "watchdog" or target == "volcano_monitor.watchdog":
                continue
            if is_settings(module) and not is_settings(target):
                wrong.append(f"{module} -> {target}: a settings module imports only core and other settings")
            elif watchdog_layer(target) > watchdog_layer(module):
                wrong.append(f"{module} -> {target}: {WATCHDOG_LAYERS[watchdog_layer(module)]} imports from "
                             f"{WATCHDOG_LAYERS[watchdog_layer(target)]}, a layer above it")
    return wrong


def test_no_import_cycle_in_volcano_monitor() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_only_run_down_the_layers() -> None:
    graph = import_graph()
    outside = [m for m in graph if program(m) == "watchdog" and m != "volcano_monitor.watchdog"
               and watchdog_layer(m) < 0]
    assert not outside, f"watchdog modules in no layer (docs/architecture.md): {outside}"
    assert upward_imports(graph) == []


def long_modules(paths: Iterable[Path]) -> list[str]:
    """The files over MAX_LINES lines with no "One piece:" line in their docstring or first comments."""
    long = []
    for path in paths:
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_LINES:
            head = ast.get_docstring(ast.parse(text)) or ""
            comments = "\n".join(line.lstrip("# ") for line in text.splitlines()[:5] if line.startswith("#"))
            if not ONE_PIECE.search(head) and not ONE_PIECE.search(comments):
                long.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {lines} lines")
    return long


def test_no_long_module_without_a_reason() -> None:
    paths = source_files(SIZED)
    assert any(path.parent.name == "bench" for path in paths)  # the walk reaches the benchmarks
    long = long_modules(paths)
    assert not long, (f"modules over {MAX_LINES} lines with no 'One piece: <why>' line at the top of their "
                      f"docstring: split them or say why they are one piece:\n" + "\n".join(long))


# ---- the checks themselves fail where they should --------------------------------------------------------

def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(("module", "target", "why"), [
    ("volcano_monitor.watchdog.state.ledger", "volcano_monitor.watchdog.findings.why", "a layer above"),
    ("volcano_monitor.watchdog.sources.feeds", "volcano_monitor.watchdog.runtime.app", "a layer above"),
    ("volcano_monitor.watchdog.config", "volcano_monitor.watchdog.state.ledger", "only core and other settings"),
    ("volcano_monitor.core.model", "volcano_monitor.watchdog.state.ledger", "may use core, not watchdog"),
    ("volcano_monitor.exporter.store", "volcano_monitor.simulator.store", "may use core, not simulator"),
])
def test_an_upward_import_is_found(module: str, target: str, why: str) -> None:
    (wrong,) = upward_imports({module: {target}})
    assert why in wrong


def test_a_long_module_needs_a_reason(tmp_path: Path) -> None:
    body = "x = 1\n" * MAX_LINES
    (tmp_path / "short.py").write_text('"""Short."""\n' + "x = 1\n" * (MAX_LINES - 1))
    (tmp_path / "long.py").write_text('"""Long."""\n' + body)
    (tmp_path / "reasoned.py").write_text('"""Long.\n\nOne piece: one state machine.\n"""\n' + body)
    (tmp_path / "commented.py").write_text("# One piece: generated tables.\n" + body)
    assert long_modules(sorted(tmp_path.iterdir())) == [f"{tmp_path / 'long.py'}: {MAX_LINES + 1} lines"]


def test_a_downward_import_passes() -> None:
    assert upward_imports({
        "volcano_monitor.watchdog.runtime.app": {"volcano_monitor.watchdog.state.ledger", "volcano_monitor.core.model"},
        "volcano_monitor.watchdog.state.ledger": {"volcano_monitor.watchdog.runtime.settings"},
        "volcano_monitor.watchdog.runtime.settings": {"volcano_monitor.watchdog.actions.capability.settings"},
    }) == []
