"""Exporter rows under months of churn (issue 12): do blocks follow the live objects or the uptime?

Prints one JSON object. Pods pass through `exporter.rows.Rows` (the exporter's two pod families'
shape: one row each) as a queue of --live pods, oldest deleted first, while one pod in --keep-every
never goes (a notebook, a service, a hung shard): after --pods pods the live set is --live plus the
kept ones. Measured:
- blocks_in_use: blocks holding objects (bounded by live / (BLOCK_SIZE / 4) + 1 since the retire step);
- block_key_table_bytes: sys.getsizeof of every block's key dict (a dict keeps its largest table);
- gzip_pieces: pieces of one gzip scrape (`gzip_parts`) once every piece is cached;
- churn_seconds: wall time of the puts and deletes.

    .venv/bin/python bench/rows_churn.py [--pods 300000 --live 10000 --keep-every 300]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

from volcano_monitor.core.exposition import Family
from volcano_monitor.exporter.rows import BLOCK_SIZE, Deflated, Rows, Stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=300_000, help="pods created in all")
    parser.add_argument("--live", type=int, default=10_000, help="short-lived pods alive at once")
    parser.add_argument("--keep-every", type=int, default=300, help="one pod in this many is never deleted")
    args = parser.parse_args()
    info = Family("bench_pod_info", "Pod.", ("pod",))
    phase = Family("bench_pod_phase", "Pod phase.", ("pod", "phase"))
    rows = Rows((info, phase))
    rendered = [(info.line((f"pod-{i}",), 1), phase.line((f"pod-{i}", "Running"), 1)) for i in range(args.pods)]
    short_lived: collections.deque[str] = collections.deque()
    started = time.perf_counter()
    for i, text in enumerate(rendered):
        key = f"pod-{i}"
        rows.put(key, text)
        if i % args.keep_every:
            short_lived.append(key)
        if len(short_lived) > args.live:
            rows.delete(short_lived.popleft())
    churn_seconds = time.perf_counter() - started
    planned: list[Deflated | Stale] = []
    rows.gzip_parts(planned)
    for part in planned:
        if isinstance(part, Stale):
            rows.keep(part, part.compress())
    print(json.dumps({
        "pods": args.pods, "live_objects": len(rows), "block_size": BLOCK_SIZE,
        "blocks_in_use": len(rows._blocks) - len(rows._free),
        "block_key_table_bytes": sum(sys.getsizeof(keys) for keys in rows._blocks),
        "gzip_pieces": len(planned),
        "churn_seconds": round(churn_seconds, 3),
    }))


if __name__ == "__main__":
    main()
