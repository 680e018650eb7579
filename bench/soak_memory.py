"""bench/soak.py --debug-memory: the bootstrap both programs run under (it dumps their gc counts, allocator
figures, large containers and tracemalloc snapshots on SIGUSR1) and the comparison of the first and last dumps
that goes into the JSON as `memory_debug`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

_ROOT = Path(__file__).resolve().parents[1]


# ---- the bootstrap of the programs under test ------------------------------------------------------------

# --debug-memory: run the CLI's main() after installing a SIGUSR1 handler that dumps, on a thread of its
# own, into $SOAK_DUMP_DIR/<n>.json (and <n>.snap): gc object counts by type; the length of every
# dict/list/set/deque attribute of the project's objects and modules (volcano_monitor.*) holding >= 100 items,
# as "module.Class.attribute" (the largest when a class has several instances); a tracemalloc snapshot.
BOOTSTRAP = r"""
import collections, gc, itertools, json, os, signal, sys, threading, tracemalloc
if os.environ.get("SOAK_TRACEMALLOC") == "1":
    tracemalloc.start(10)
_seq = itertools.count(1)
def _allocator():
    # Where the bytes are that no Python object shows: pymalloc's blocks (small objects), glibc's heap in
    # use (big objects, SQLite's page caches and statements) and free (fragmentation), and SQLite's share.
    import ctypes, ctypes.util
    out = {"pymalloc_blocks": sys.getallocatedblocks()}
    try:
        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
        out |= {"glibc_in_use_bytes": info.uordblks, "glibc_free_bytes": info.fordblks, "glibc_mmap_bytes": info.hblkhd}
    except (OSError, AttributeError):
        pass
    try:  # SQLite's own allocations (page caches, schemas, statements), where _sqlite3 links it dynamically
        sqlite = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        sqlite.sqlite3_memory_used.restype = sqlite.sqlite3_memory_highwater.restype = ctypes.c_int64
        out |= {"sqlite_bytes": sqlite.sqlite3_memory_used(),
                "sqlite_highwater_bytes": sqlite.sqlite3_memory_highwater(0)}
    except (OSError, AttributeError):
        pass
    return out
def _measure(key, value, sizes, capacities):
    # A container's length, and its own table's bytes (a dict or set keeps the capacity of its busiest moment
    # until it next resizes): the largest when a class has several instances.
    if isinstance(value, (dict, list, set, frozenset, collections.deque)) and len(value) >= 100:
        sizes[key] = max(sizes.get(key, 0), len(value))
        capacities[key] = max(capacities.get(key, 0), sys.getsizeof(value))
def _rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
def _pymalloc():
    # pymalloc's own account (sys._debugmallocstats, written to fd 2): its arenas and the bytes in used and
    # free blocks; arenas that a few live blocks keep mapped show as free bytes growing with the arenas.
    import tempfile
    keys = {"# arenas allocated current": "arenas", "# bytes in allocated blocks": "allocated_bytes",
            "# bytes in available blocks": "available_bytes", "# bytes lost to pool headers": "pool_header_bytes",
            "# bytes lost to quantization": "quantization_bytes"}
    with tempfile.TemporaryFile("w+") as f:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        out = {}
        for line in f:
            name, _, value = line.rpartition("=")
            if name.strip() in keys:
                out[keys[name.strip()]] = int(value.strip().replace(",", ""))
        return out
def _trim():
    # What glibc gives back when asked (malloc_trim(0)): free pages still resident in its heaps.
    import ctypes, ctypes.util
    before = _rss()
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    return {"rss_before_trim": before, "trim_released_bytes": before - _rss()}
def _dump():
    base = os.path.join(os.environ["SOAK_DUMP_DIR"], str(next(_seq)))
    try:
        gc.collect()
        early = _allocator() | {"pymalloc_" + k: v for k, v in _pymalloc().items()}
        early |= _trim()
        objects = gc.get_objects()
        # Counts and bytes by type of what gc tracks (sys.getsizeof: a dict's or list's own table).
        counts, nbytes = collections.Counter(), collections.Counter()
        for o in objects:
            name = f"{type(o).__module__!s}.{type(o).__qualname__!s}"
            counts[name] += 1
            nbytes[name] += sys.getsizeof(o)
        sizes, capacities = {}, {}
        for o in objects:
            t = type(o)
            module = t.__module__
            if not isinstance(module, str) or not module.startswith("volcano_monitor.") or isinstance(o, type):
                continue
            try:
                attrs = dict(object.__getattribute__(o, "__dict__"))
            except Exception:
                attrs = {}
            for klass in t.__mro__:
                for name in klass.__dict__.get("__slots__", ()):
                    try:
                        attrs[name] = object.__getattribute__(o, name)
                    except Exception:
                        pass
            for name, value in attrs.items():
                _measure(f"{module}.{t.__qualname__}.{name}", value, sizes, capacities)
        del objects
        for module_name, module in list(sys.modules.items()):  # module-level caches (e.g. shared tuples)
            if module_name.startswith("volcano_monitor."):
                for name, value in list(vars(module).items()):
                    if not name.startswith("__"):
                        _measure(f"{module_name}.{name}", value, sizes, capacities)
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(base + ".snap")
        out = {"gc": counts, "gc_bytes": nbytes, "garbage": len(gc.garbage),
               "containers": sizes, "container_bytes": capacities, "allocator": early,
               "peaks": _peaks_report()}
    except Exception as exc:
        out = {"error": repr(exc)}
    with open(base + ".tmp", "w") as f:
        json.dump(out, f)
    os.rename(base + ".tmp", base + ".json")
_peaks = {"events": 0, "at_peaks": collections.Counter(), "at_random": collections.Counter(), "timeline": []}
def _where(frames, me, names):
    # Each thread's innermost project frames, as "thread | [package running] file:function:line < ...".
    for ident, frame in frames.items():
        if ident == me:
            continue
        where, inner = [], frame.f_code.co_filename.split("/site-packages/")[-1].split("/")[0]
        while frame is not None and len(where) < 3:
            code = frame.f_code
            if "volcano_monitor" in code.co_filename:
                where.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}:{frame.f_lineno}")
            frame = frame.f_back
        yield f"{names.get(ident, ident)} | [{inner}] {' < '.join(where)}"
def _watch_peaks(after):
    # Who makes pymalloc grow after the warm-up: at each new high of its allocated blocks, what every other
    # thread runs, weighted by the blocks the high added; and the same taken once a second at random, so that
    # a thread waiting in the same place all along (an informer reading its socket) can be told apart from
    # the one that makes the peaks (`lift`: its share at the peaks over its share at random).
    import time
    start, high, me, tick = time.monotonic(), 0, threading.get_ident(), 0
    while True:
        time.sleep(0.02)
        tick += 1
        blocks = sys.getallocatedblocks()
        late = time.monotonic() - start >= after
        names = None
        if late and tick % 50 == 0:
            names = {t.ident: t.name for t in threading.enumerate()}
            _peaks["at_random"].update(_where(sys._current_frames(), me, names))
        if blocks <= high:
            continue
        grown, high = blocks - high, blocks
        if not late:
            continue
        names = names or {t.ident: t.name for t in threading.enumerate()}
        _peaks["events"] += 1
        _peaks["timeline"].append((round(time.monotonic() - start), blocks))
        for key in _where(sys._current_frames(), me, names):
            _peaks["at_peaks"][key] += grown
def _peaks_report():
    peaks, randoms = _peaks["at_peaks"], _peaks["at_random"]
    total_p, total_r = sum(peaks.values()) or 1, sum(randoms.values()) or 1
    rows = [{"where": k, "peak_blocks": v, "lift": round((v / total_p) / max(randoms[k] / total_r, 1 / total_r), 2)}
            for k, v in peaks.items()]
    rows.sort(key=lambda r: -r["peak_blocks"] * (min(r["lift"], 50) - 1))
    return {"events": _peaks["events"], "timeline": _peaks["timeline"][-200:], "by_thread_frame": rows[:30]}
if os.environ.get("SOAK_PEAKS_AFTER"):
    threading.Thread(target=_watch_peaks, args=(float(os.environ["SOAK_PEAKS_AFTER"]),), daemon=True).start()
signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=_dump, daemon=True).start())
module = __import__(sys.argv[1] + ".cli", fromlist=["main"])
sys.exit(module.main(sys.argv[2:]))
"""


# ---- memory debugging ------------------------------------------------------------------------------------

def wait_for_dumps(dump_dir: Path, count: int, timeout: float = 120) -> list[Path]:
    """The dumps a child wrote on SIGUSR1 (1.json, 2.json, ...), once all `count` are there."""
    paths = [dump_dir / f"{n}.json" for n in range(1, count + 1)]
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [p for p in paths if p.exists()]


def compare_dumps(first: Path, last: Path, top: int = 15) -> Obj:
    before, after = json.loads(first.read_text()), json.loads(last.read_text())
    if "gc" not in before or "gc" not in after:
        return {"errors": [before.get("error"), after.get("error")]}
    growth = Counter(after["gc"])
    growth.subtract(before["gc"])
    out: Obj = {"gc_objects_growth": dict(growth.most_common(top)), "gc_garbage": after["garbage"],
                **{f"{key}_growth": dict(sorted(((k, v - before.get(key, {}).get(k, 0))
                                                 for k, v in after.get(key, {}).items()), key=lambda kv: -kv[1])[:top])
                   for key in ("gc_bytes",)},
                "allocator": {k: {"at_25": before.get("allocator", {}).get(k), "at_100": v}
                              for k, v in after.get("allocator", {}).items()}}
    lengths = {k: (before["containers"].get(k, 0), n) for k, n in after["containers"].items()}
    out["container_lengths_growth"] = {k: {"at_25": a, "at_100": b} for k, (a, b) in
                                       sorted(lengths.items(), key=lambda kv: kv[1][0] - kv[1][1])[:top]}
    capacities = {k: (before.get("container_bytes", {}).get(k, 0), n)
                  for k, n in after.get("container_bytes", {}).items()}
    out["container_bytes_growth"] = {k: {"at_25": a, "at_100": b} for k, (a, b) in
                                     sorted(capacities.items(), key=lambda kv: kv[1][0] - kv[1][1])[:top]}
    if after.get("peaks", {}).get("events"):
        out["peaks_after_25"] = after["peaks"]
    out["container_bytes_total"] = {"at_25": sum(before.get("container_bytes", {}).values()),
                                    "at_100": sum(capacities[k][1] for k in capacities)}
    snap_a, snap_b = first.with_suffix(".snap"), last.with_suffix(".snap")
    if snap_a.exists() and snap_b.exists():
        import tracemalloc

        old, new = tracemalloc.Snapshot.load(str(snap_a)), tracemalloc.Snapshot.load(str(snap_b))
        flt = [tracemalloc.Filter(False, tracemalloc.__file__),
               tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
        old, new = old.filter_traces(flt), new.filter_traces(flt)
        out["tracemalloc_growth_by_line"] = [
            {"where": f"{s.traceback[0].filename.replace(str(_ROOT) + '/', '')}:{s.traceback[0].lineno}",
             "size_diff": s.size_diff, "count_diff": s.count_diff, "size": s.size}
            for s in new.compare_to(old, "lineno")[:top]]
        out["tracemalloc_growth_by_traceback"] = [
            {"size_diff": s.size_diff, "count_diff": s.count_diff,
             "traceback": [f"{f.filename.replace(str(_ROOT) + '/', '')}:{f.lineno}" for f in s.traceback][:6]}
            for s in new.compare_to(old, "traceback")[:5]]
    return out

