"""Rendered rows of one kind of object, with compressed blocks cached between scrapes.

Prometheus always asks for gzip. Compressing a 100k-pod exposition (~100 MB) takes ~300 ms even at
level 1, while between two scrapes only a small share of the objects change. So objects are grouped
in blocks (at most `BLOCK_SIZE` objects, in arrival order: a pod changes mostly while it is young, so
the changes of an interval meet in few blocks), and each family keeps one gzip member per block,
compressed when first asked for and dropped when a row of the block changes. A gzip body may be a
sequence of members (RFC 1952 §2.2; Go's reader, and so Prometheus, reads them all), so a scrape
sends the cached members and compresses only the blocks that changed.
"""

from __future__ import annotations

import zlib
from collections.abc import KeysView, Sequence
from dataclasses import dataclass

from exporter.cardinality import FamilyFilter
from exporter.families.base import Family

BLOCK_SIZE = 512
GZIP_LEVEL = 1  # level 6 would cost several times the CPU for ~20% fewer bytes


def gzip_member(data: bytes) -> bytes:
    """`data` as one complete gzip member."""
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


@dataclass(slots=True)
class Stale:
    """A block whose member must be compressed: its rows (references taken under the lock) and the
    block version they belong to, so a result computed outside the lock is kept only if still true."""

    rows: Rows
    family: int
    block: int
    version: int
    parts: list[bytes]

    def compress(self) -> bytes:
        return gzip_member(b"".join(self.parts))


class Rows:
    """Rendered samples per family, keyed by object (callers hold the store's lock). Families `served`
    denies (--metric-denylist) keep no rows: nothing is encoded, held, compressed or written for them."""

    def __init__(self, families: Sequence[Family], block_size: int = BLOCK_SIZE,
                 served: FamilyFilter | None = None) -> None:
        self.block_size = block_size
        self.families = tuple(families)
        self.enabled = tuple(served is None or served.allows(f.name) for f in self.families)
        self.any = any(self.enabled)  # else the kind's objects are not even rendered
        self.headers = [f.header.encode() for f in self.families]
        self.rows: list[dict[str, bytes]] = [{} for _ in self.families]
        self._zipped_headers = [gzip_member(h) for h in self.headers]
        self._block_of: dict[str, int] = {}
        self._blocks: list[dict[str, None]] = []  # block -> its objects' keys, in arrival order
        self._versions: list[int] = []  # block -> bumped on every change of one of its rows
        self._members: list[list[bytes | None]] = [[] for _ in self.families]  # family -> block -> member
        self._free: list[int] = []  # emptied blocks, reused before new ones
        self._open = -1  # the block new objects join

    def put(self, key: str, rendered: Sequence[str]) -> None:
        block = self._block_of.get(key)
        if block is None:
            block = self._block_of[key] = self._take_block()
            self._blocks[block][key] = None
        changed = False
        for family, (rows, text) in enumerate(zip(self.rows, rendered, strict=True)):
            if text and self.enabled[family]:
                data = text.encode()
                if rows.get(key) != data:
                    rows[key] = data
                    self._members[family][block] = None
                    changed = True
            elif rows.pop(key, None) is not None:
                self._members[family][block] = None
                changed = True
        if changed:
            self._versions[block] += 1

    def delete(self, key: str) -> None:
        block = self._block_of.pop(key, None)
        if block is None:
            return
        for family, rows in enumerate(self.rows):
            if rows.pop(key, None) is not None:
                self._members[family][block] = None
        self._versions[block] += 1
        keys = self._blocks[block]
        del keys[key]
        if not keys and block != self._open:
            self._free.append(block)

    def _take_block(self) -> int:
        if self._open >= 0 and len(self._blocks[self._open]) < self.block_size:
            return self._open
        if self._free:
            self._open = self._free.pop()
        else:
            self._open = len(self._blocks)
            self._blocks.append({})
            self._versions.append(0)
            for members in self._members:
                members.append(None)
        return self._open

    def parts(self, out: list[bytes]) -> None:
        """Headers and row references, not joined (see `ExporterStore.chunks`)."""
        for header, rows in zip(self.headers, self.rows, strict=True):
            if rows:
                out.append(header)
                out.extend(rows.values())

    def gzip_parts(self, out: list[bytes | Stale]) -> None:
        """Gzip members per family and block: cached ones as bytes, the others as `Stale`."""
        for family, rows in enumerate(self.rows):
            if not rows:
                continue
            out.append(self._zipped_headers[family])
            members = self._members[family]
            for block, keys in enumerate(self._blocks):
                member = members[block]
                if member is not None:
                    out.append(member)
                    continue
                parts = [rows[k] for k in keys if k in rows]
                if parts:
                    out.append(Stale(self, family, block, self._versions[block], parts))

    def keep(self, stale: Stale, member: bytes) -> None:
        """Cache a member compressed outside the lock, unless its block changed meanwhile."""
        if self._versions[stale.block] == stale.version:
            self._members[stale.family][stale.block] = member

    def keys(self) -> KeysView[str]:
        """The objects put (denied families or not)."""
        return self._block_of.keys()

    def __contains__(self, key: str) -> bool:
        return key in self._block_of

    def __len__(self) -> int:
        return len(self._block_of)
