"""Keep a long-running process's RSS at what it holds, not at its high-water mark.

Both programs churn through objects of every size for months: watch events, rendered rows, scrape
bodies of many megabytes, database batches. glibc's malloc serves them from per-thread arenas and,
by default, raises its mmap threshold each time a big block is freed, so later big blocks come from
the heap and the pages they leave free stay resident. Measured with bench/soak.py, that made RSS
drift upward for hours while the live objects were flat.

`tune_allocator` fixes the thresholds (which also turns the dynamic raise off) and caps the arenas;
`start_trimmer` hands free pages back to the kernel every 15 s (malloc_trim walks the free lists
and madvises whole free pages away, a few milliseconds for a few hundred MB). Every 15 s, not every
minute: a container's memory limit must cover the freed pages that are still resident, and a scrape
or a flush frees megabytes each time (the exporter's body is 14 MB at 11k pods), so a minute of them
swung RSS by ~5% from one moment to the next. The cost is a page fault when freed memory is used
again (~1 ms per MB here). Elsewhere than glibc (musl, macOS) both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc <malloc.h>
MMAP_THRESHOLD_BYTES = 256 * 1024  # blocks this big get their own mapping, returned on free
TRIM_THRESHOLD_BYTES = 1024 * 1024  # free space at the heap's top kept before giving it back
ARENA_MAX = 2  # threads share two arenas: fewer half-empty heaps (the GIL serialises them anyway)
TRIM_INTERVAL_SECONDS = 15.0


def _glibc() -> Any | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _glibc()


def tune_allocator() -> bool:
    """Set the malloc parameters; call before starting threads. False when not on glibc."""
    if _LIBC is None:
        return False
    ok = all(_LIBC.mallopt(option, value) == 1 for option, value in (
        (M_ARENA_MAX, ARENA_MAX), (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES), (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)))
    if not ok:
        log.debug("mallopt refused a setting; the allocator keeps its defaults")
    return ok


def trim() -> bool:
    """Return free heap pages to the kernel; True when some were."""
    return _LIBC is not None and _LIBC.malloc_trim(0) == 1


def start_trimmer(interval: float = TRIM_INTERVAL_SECONDS) -> threading.Event | None:
    """A daemon thread that trims every `interval` seconds; set the returned event to stop it."""
    if _LIBC is None:
        return None
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            trim()

    threading.Thread(target=loop, name="malloc-trim", daemon=True).start()
    return stop
