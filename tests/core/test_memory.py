"""core.memory: freed heap pages go back to the kernel (each case in a fresh interpreter, since
malloc settings are process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

FRAGMENT = textwrap.dedent("""
    import json, sys, time
    from volcano_monitor.core import memory

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    memory.tune_allocator()
    blocks = [bytes(100_000) + b"x" for _ in range(2000)]  # ~200 MB of heap blocks
    keep = blocks[::20]  # every 20th stays: the heap cannot shrink from its top
    del blocks
    before = rss()
    if sys.argv[1] == "trim":
        memory.trim()
    elif sys.argv[1] == "thread":
        memory.start_trimmer(0.05)
        time.sleep(0.5)
    print(json.dumps({"before": before, "after": rss(), "kept": len(keep)}))
""")


def _run(mode: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", FRAGMENT, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("mode", ["trim", "thread"])
def test_free_pages_inside_a_fragmented_heap_are_returned(mode: str) -> None:
    result = _run(mode)
    assert result["before"] > 150 << 20
    assert result["after"] < result["before"] - (100 << 20), result


def test_without_a_trim_the_pages_stay_resident() -> None:
    """The control: what the trim fixes is real (glibc keeps them)."""
    result = _run("none")
    assert result["after"] > result["before"] - (20 << 20), result
