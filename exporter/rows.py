"""Rendered rows of one kind of object, with compressed blocks cached between scrapes.

Prometheus always asks for gzip. Compressing a 100k-pod exposition (~100 MB) takes ~300 ms even at
level 1, while between two scrapes only a small share of the objects change. So objects are grouped
in blocks (at most `BLOCK_SIZE` objects, in arrival order: a pod changes mostly while it is young, so
the changes of an interval meet in few blocks), and each family keeps one compressed piece per block,
made when first asked for and dropped when a row of the block changes.

A piece is raw deflate ended by a sync flush (byte-aligned, not final) from a compressor of its own,
so pieces concatenate into one valid deflate stream, as pigz does; `gzip_stream` wraps them in ONE
gzip member whose CRC is combined from the pieces' CRCs. (Several gzip members would be smaller code,
but only some readers take them: Go's does; Python's httpx and others silently stop at the first.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, KeysView, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

from volcano_monitor.core.exposition import Family
from volcano_monitor.exporter.cardinality import FamilyFilter

BLOCK_SIZE = 512
MIN_FILL_DIVISOR = 4  # a block left with under a quarter of BLOCK_SIZE objects hands them on (`_retire`)
GZIP_LEVEL = 1  # level 6 would cost several times the CPU for ~20% fewer bytes
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no time, unknown OS
FINAL_EMPTY_BLOCK = b"\x03\x00"  # a final fixed-Huffman block holding nothing: ends the deflate stream


class Deflated(NamedTuple):
    """Raw deflate of some bytes, byte-aligned and not final, with their CRC-32 and length."""

    data: bytes
    crc: int
    size: int


def deflate(data: bytes) -> Deflated:
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return Deflated(packer.compress(data) + packer.flush(zlib.Z_SYNC_FLUSH), zlib.crc32(data), len(data))


def _zlib_crc32_combine() -> Callable[[int, int, int], int] | None:
    try:
        libz = ctypes.CDLL(ctypes.util.find_library("z") or "libz.so.1")
        combine = libz.crc32_combine64
    except (OSError, AttributeError):
        return None
    combine.argtypes, combine.restype = [ctypes.c_ulong, ctypes.c_ulong, ctypes.c_int64], ctypes.c_ulong
    return lambda crc1, crc2, size2: int(combine(crc1, crc2, size2))


def _crc32_combine_slow(crc1: int, crc2: int, size2: int) -> int:
    """The CRC of A+B from crc(A), crc(B) and len(B): CRC-32 is affine in its start value, so running
    len(B) zero bytes from crc(A) and from 0 differ by what crc(A) contributes."""
    zeros = bytes(size2)
    return zlib.crc32(zeros, crc1) ^ zlib.crc32(zeros) ^ crc2


crc32_combine: Callable[[int, int, int], int] = _zlib_crc32_combine() or _crc32_combine_slow


def gzip_stream(pieces: Iterable[Deflated]) -> Iterator[bytes]:
    """One gzip member made of the pieces, as they come (the trailer needs only their CRCs)."""
    yield GZIP_HEADER
    crc = size = 0
    for piece in pieces:
        if piece.size:
            yield piece.data
            crc = crc32_combine(crc, piece.crc, piece.size)
            size += piece.size
    yield FINAL_EMPTY_BLOCK + struct.pack("<II", crc, size & 0xFFFFFFFF)


def gzip_bytes(data: bytes) -> bytes:
    return b"".join(gzip_stream([deflate(data)]))


@dataclass(slots=True)
class Stale:
    """A block whose member must be compressed: its rows (references taken under the lock) and the
    block version they belong to, so a result computed outside the lock is kept only if still true."""

    rows: Rows
    family: int
    block: int
    version: int
    parts: list[bytes]

    def compress(self) -> Deflated:
        return deflate(b"".join(self.parts))


class Rows:
    """Rendered samples per object and family, in blocks (callers hold the store's lock). Families `served`
    denies (--metric-denylist) keep no rows: nothing is encoded, held, compressed or written for them.

    Each object's rows are one tuple (one bytes per family, b"" for none) in its block's dict, and
    `_block_of` is the only table over every object. Why not a dict per family: a dict never shrinks
    and regrows to twice its size by chance, when churn fills it with deleted slots while the live count
    sits near a resize boundary. With a dict per family, every pod family's table flipped between
    ~0.4 and ~1 MB together at ~11k pods, and the 15 job families' likewise: ~7 MB of RSS moved up and
    down by luck (bench/soak.py). One table per kind moves by one table's worth."""

    def __init__(self, families: Sequence[Family], block_size: int = BLOCK_SIZE,
                 served: FamilyFilter | None = None) -> None:
        self.block_size = block_size
        self.min_fill = max(1, block_size // MIN_FILL_DIVISOR)
        self.families = tuple(families)
        self.enabled = tuple(served is None or served.allows(f.name) for f in self.families)
        self.any = any(self.enabled)  # else the kind's objects are not even rendered
        self._all_enabled = all(self.enabled)
        self.headers = [f.header.encode() for f in self.families]
        self._none: tuple[bytes, ...] = (b"",) * len(self.families)
        self._pick = [itemgetter(family) for family in range(len(self.families))]
        self._counts = [0] * len(self.families)  # family -> objects with a row in it
        self._zipped_headers = [deflate(h) for h in self.headers]
        self._block_of: dict[str, int] = {}
        self._blocks: list[dict[str, tuple[bytes, ...]]] = []  # block -> key -> rows, in arrival order
        self._versions: list[int] = []  # block -> bumped on every change of one of its rows
        self._members: list[list[Deflated | None]] = [[] for _ in self.families]  # family -> block -> member
        # family -> block -> (block version, its rows in the family): the plain scrape's references, kept
        # until the block changes (8 bytes a row; picking them afresh was ~40% of a plain scrape).
        self._plain: list[list[tuple[int, list[bytes]] | None]] = [[] for _ in self.families]
        self._free: list[int] = []  # emptied blocks, reused before new ones
        self._open = -1  # the block new objects join

    def put(self, key: str, rendered: Sequence[str]) -> None:
        block = self._block_of.get(key)
        if block is None:
            block = self._join(key, self._none)
        keys = self._blocks[block]
        old = keys[key]
        if self._all_enabled:  # the usual case: "" encodes to b"" (a generator here cost ~5% of a sync)
            if len(rendered) != len(old):
                raise ValueError(f"{len(rendered)} rows for {len(old)} families")
            new = tuple([text.encode() for text in rendered])
        else:
            new = tuple([text.encode() if text and on else b""
                         for text, on in zip(rendered, self.enabled, strict=True)])
        if new == old:
            return
        keys[key] = new
        for family, (was, now) in enumerate(zip(old, new, strict=True)):
            if was != now:
                self._members[family][block] = None
                self._counts[family] += bool(now) - bool(was)
        self._versions[block] += 1

    def delete(self, key: str) -> None:
        block = self._block_of.pop(key, None)
        if block is None:
            return
        keys = self._blocks[block]
        for family, was in enumerate(keys.pop(key)):
            if was:
                self._members[family][block] = None
                self._counts[family] -= 1
        self._versions[block] += 1
        if len(keys) < self.min_fill and block != self._open:
            self._retire(block)

    def _retire(self, block: int) -> None:
        """Free a block that churn has nearly emptied, moving its few objects to the open block.

        Why: objects join blocks in arrival order, so a long-lived pod created among short-lived ones
        would otherwise keep its whole block for months: one block per such pod, each with a key table
        sized for BLOCK_SIZE objects and a compressed piece per family, growing with uptime. Moving the
        survivors keeps every block but the open one at least `min_fill` full, so blocks stay within
        live objects / min_fill + 1; a retired block had lost over 3/4 of its objects, so the moves
        cost O(1) per deletion.
        """
        survivors = self._blocks[block]
        self._blocks[block] = {}  # a new dict: deleting keys one by one kept a full block's table
        for members in self._members:
            members[block] = None
        self._versions[block] += 1
        self._free.append(block)
        for key, rendered in survivors.items():
            target = self._join(key, rendered)
            self._versions[target] += 1
            for members in self._members:  # the open block's pieces are redone on new arrivals anyway
                members[target] = None

    def _join(self, key: str, rendered: tuple[bytes, ...]) -> int:
        """Put a key in the open block (opening one if it is full); its block."""
        block = self._block_of[key] = self._take_block()
        self._blocks[block][key] = rendered
        return block

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
            for kept in self._plain:
                kept.append(None)
        return self._open

    def parts(self, out: list[bytes]) -> None:
        """Headers and row references, not joined (see `ExporterStore.chunks`): each block's rows of a
        family are picked once and kept until the block's version moves (any change of one of its rows)."""
        versions = self._versions
        for family, header in enumerate(self.headers):
            if self._counts[family]:
                out.append(header)
                pick = self._pick[family]
                kept = self._plain[family]
                for block, keys in enumerate(self._blocks):
                    plain = kept[block]
                    if plain is None or plain[0] != versions[block]:
                        plain = kept[block] = (versions[block], list(filter(None, map(pick, keys.values()))))
                    out += plain[1]

    def gzip_parts(self, out: list[Deflated | Stale]) -> None:
        """Compressed pieces per family and block: cached ones as `Deflated`, the others as `Stale`."""
        for family, members in enumerate(self._members):
            if not self._counts[family]:
                continue
            out.append(self._zipped_headers[family])
            pick = self._pick[family]
            for block, keys in enumerate(self._blocks):
                member = members[block]
                if member is not None:
                    out.append(member)
                    continue
                parts = list(filter(None, map(pick, keys.values())))
                if parts:
                    out.append(Stale(self, family, block, self._versions[block], parts))

    def count(self, family: int) -> int:
        """Objects with a row in the family (0 for a denied one)."""
        return self._counts[family]

    def keep(self, stale: Stale, member: Deflated) -> None:
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
