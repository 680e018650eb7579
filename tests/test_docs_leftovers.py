"""Merge leftovers in the Markdown docs: two versions of one sentence kept one under the other.

A merge that both sides edited can keep both lines, each with its own ending ("... kept up to date by
policy (...); OOM-killed jobs ..." next to "... kept up to date by policy (...); GPU idle ..."). Nothing
else catches it: the links resolve, the words are spelled right. Two prose lines a few lines apart that
begin with the same long run of characters are such a leftover; code blocks and tables repeat on purpose
and are not prose."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.promql import ROOT

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "deploy").rglob("*.md")])
SHARED_PREFIX = 40  # characters two nearby prose lines may share at their start (a long link is ~40)
WINDOW = 3  # lines: a leftover sits right below or one or two lines below its twin
_FENCE = re.compile(r"(`{3,}|~{3,})")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, stripped line) of each non-blank line outside fenced code blocks and tables."""
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        opening = _FENCE.match(stripped)
        if opening:
            if not fence:
                fence = opening.group(1)
            elif stripped.startswith(fence):
                fence = ""
            continue
        if fence or not stripped or stripped.startswith("|"):
            continue
        yield number, stripped


def _shared_start(a: str, b: str) -> str:
    length = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return a[:length]


def leftovers(text: str) -> list[tuple[int, int, str]]:
    """Pairs of prose lines at most WINDOW lines apart sharing SHARED_PREFIX or more leading characters."""
    lines = list(prose_lines(text))
    found = []
    for index, (number, line) in enumerate(lines):
        for other_number, other in lines[index + 1:]:
            if other_number - number > WINDOW:
                break
            shared = _shared_start(line, other)
            if len(shared) >= SHARED_PREFIX:
                found.append((number, other_number, shared))
    return found


def test_the_check_finds_a_merge_leftover_and_passes_parallel_prose() -> None:
    leftover = ("Queue capability kept up\n"
                "  to date by policy ([docs/capability.md](docs/capability.md)); OOM-killed jobs resubmitted\n"
                "  memory until they fit;\n"
                "  to date by policy ([docs/capability.md](docs/capability.md)); GPU idle seconds per job\n")
    assert [(a, b) for a, b, _ in leftovers(leftover)] == [(2, 4)]
    parallel = ("1. `queue_too_small`: a queue's capability is below the gang's minResources.\n"
                "2. `queue_capability`: a queue's allocated plus the gang's minResources exceed it.\n")
    assert leftovers(parallel) == []
    code = "```sh\ncurl -s http://127.0.0.1:9747/api/v1/alerts?state=firing | jq .\n" \
           "curl -s http://127.0.0.1:9747/api/v1/alerts?state=resolved | jq .\n```\n"
    assert leftovers(code) == []
    far = "x" * 50 + " one\n" + "\n".join(f"line {n}" for n in range(WINDOW)) + "\n" + "x" * 50 + " two\n"
    assert leftovers(far) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_merge_leftovers(path: Path) -> None:
    found = leftovers(path.read_text())
    assert not found, "\n".join(f"{path.name}:{a} and :{b} begin alike: {shared!r}" for a, b, shared in found)
