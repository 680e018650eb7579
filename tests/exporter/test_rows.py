"""exporter.rows: cached gzip members per block say exactly what the plain rows say."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_monitor.core.exposition import Family
from volcano_monitor.exporter.rows import (
    BLOCK_SIZE,
    Deflated,
    Rows,
    Stale,
    _crc32_combine_slow,
    crc32_combine,
    gzip_stream,
)

A = Family("test_a", "A.", ("name",))
B = Family("test_b", "B.", ("name", "state"))


def rendered(name: str, state: str) -> tuple[str, str]:
    return A.line((name,), 1), B.line((name, state), 1) if state else ""


def plain(rows: Rows) -> bytes:
    out: list[bytes] = []
    rows.parts(out)
    return b"".join(out)


def zipped(rows: Rows, keep: bool = True) -> tuple[bytes, int]:
    """The gzip body (and how many members had to be compressed)."""
    planned: list[Deflated | Stale] = []
    rows.gzip_parts(planned)
    pieces, compressed = [], 0
    for part in planned:
        if isinstance(part, Stale):
            piece = part.compress()
            compressed += 1
            if keep:
                rows.keep(part, piece)
            pieces.append(piece)
        else:
            pieces.append(part)
    return b"".join(gzip_stream(pieces)), compressed


def lines(body: bytes) -> list[bytes]:
    return sorted(body.splitlines())


def test_unchanged_blocks_are_never_compressed_twice() -> None:
    rows = Rows((A, B))
    for i in range(3 * BLOCK_SIZE):
        rows.put(f"pod-{i}", rendered(f"pod-{i}", "Running"))
    first, compressed = zipped(rows)
    assert compressed == 2 * 3  # two families x three blocks
    assert lines(gzip.decompress(first)) == lines(plain(rows))
    again, compressed = zipped(rows)
    assert compressed == 0 and again == first
    rows.put("pod-7", rendered("pod-7", "Succeeded"))  # one row of family B, first block
    body, compressed = zipped(rows)
    assert compressed == 1
    assert b'test_b{name="pod-7",state="Succeeded"} 1' in gzip.decompress(body)
    rows.put("pod-8", rendered("pod-8", "Running"))  # the same text: nothing to redo
    assert zipped(rows)[1] == 0


def test_a_member_compressed_while_its_block_changed_is_not_kept() -> None:
    rows = Rows((A, B))
    rows.put("x", rendered("x", "Pending"))
    planned: list[Deflated | Stale] = []
    rows.gzip_parts(planned)
    stale = [p for p in planned if isinstance(p, Stale)]
    rows.put("x", rendered("x", "Running"))  # lands between the snapshot and the compression
    for part in stale:
        rows.keep(part, part.compress())
    assert b"Running" in gzip.decompress(zipped(rows)[0])


def test_emptied_blocks_are_reused_under_churn() -> None:
    rows = Rows((A,))
    for generation in range(20):  # a pod population replaced twenty times over
        for i in range(BLOCK_SIZE * 2):
            rows.put(f"{generation}-{i}", (A.line((f"{generation}-{i}",), 1),))
        if generation:
            for i in range(BLOCK_SIZE * 2):
                rows.delete(f"{generation - 1}-{i}")
    assert len(rows) == 2 * BLOCK_SIZE
    assert len(rows._blocks) <= 5


def test_long_lived_objects_do_not_keep_a_block_each() -> None:
    """One pod that stays among every block of short-lived ones (a notebook, a service) must not keep
    its whole block: blocks would grow with uptime, not with the live objects."""
    rows = Rows((A, B), block_size=16)
    for generation in range(300):
        rows.put(f"keep-{generation}", rendered(f"keep-{generation}", "Running"))
        for i in range(15):
            rows.put(f"{generation}-{i}", rendered(f"{generation}-{i}", "Running"))
        if generation:
            for i in range(15):
                rows.delete(f"{generation - 1}-{i}")
        if generation % 50 == 0:
            zipped(rows)
    assert len(rows) == 300 + 15
    in_use = len(rows._blocks) - len(rows._free)
    assert in_use <= len(rows) // (16 // 4) + 1  # every block but the open one at least a quarter full
    assert lines(gzip.decompress(zipped(rows)[0])) == lines(plain(rows))
    assert sum(len(keys) for keys in rows._blocks) == len(rows)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([4, 8]),
       st.lists(st.tuples(st.sampled_from(["put", "delete", "scrape"]), st.integers(0, 40),
                          st.sampled_from(["", "Pending", "Running", "Failed"])), max_size=300))
def test_gzip_body_equals_plain_body_after_any_history(block_size: int, ops: list[tuple[str, int, str]]) -> None:
    rows = Rows((A, B), block_size=block_size)
    for op, i, state in ops:
        if op == "put":
            rows.put(f"p{i}", rendered(f"p{i}", state))
        elif op == "delete":
            rows.delete(f"p{i}")
        else:
            zipped(rows)
    body, _ = zipped(rows)
    assert lines(gzip.decompress(body)) == lines(plain(rows))


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([4, 8]),
       st.lists(st.tuples(st.sampled_from(["put", "delete", "scrape"]), st.integers(0, 40),
                          st.sampled_from(["", "Pending", "Running", "Failed"])), max_size=300))
def test_plain_body_follows_every_change_after_any_history(block_size: int, ops: list[tuple[str, int, str]]) -> None:
    """Plain scrapes keep each block's row references: a put, delete or retire in between must show."""
    rows = Rows((A, B), block_size=block_size)
    live: dict[str, str] = {}
    for op, i, state in ops:
        if op == "put":
            rows.put(f"p{i}", rendered(f"p{i}", state))
            live[f"p{i}"] = state
        elif op == "delete":
            rows.delete(f"p{i}")
            live.pop(f"p{i}", None)
        else:
            plain(rows)
    expected = b"".join(line.encode() for name, state in live.items() for line in rendered(name, state))
    assert lines(plain(rows)) == lines(expected + b"".join(rows.headers[f] for f in (0, 1) if rows.count(f)))


def single_member(body: bytes) -> bytes:
    """What a reader that takes one gzip member gets (httpx, zlib with wbits=31): all of it must be there."""
    reader = zlib.decompressobj(31)
    data = reader.decompress(body) + reader.flush()
    assert reader.eof and not reader.unused_data
    return data


def test_the_cached_pieces_make_one_gzip_member_every_reader_takes() -> None:
    rows = Rows((A, B), block_size=4)
    for i in range(40):
        rows.put(f"p{i}", rendered(f"p{i}", "Running"))
    body, _ = zipped(rows)
    rows.put("p3", rendered("p3", "Failed"))
    again, compressed = zipped(rows)
    assert compressed == 1 and single_member(again) == gzip.decompress(again)
    assert lines(single_member(body)) == lines(plain(rows).replace(b'"p3",state="Failed"', b'"p3",state="Running"'))


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc32_combine(first: bytes, second: bytes) -> None:
    whole = zlib.crc32(first + second)
    assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == whole
    assert _crc32_combine_slow(zlib.crc32(first), zlib.crc32(second), len(second)) == whole  # without libz


def test_one_table_over_every_object_whatever_the_number_of_families() -> None:
    """A dict never shrinks, and under churn it regrows to twice its size by chance near a resize boundary:
    a table per family made every family's table (15 for jobs) flip together, megabytes of RSS moved by
    luck. Only `_block_of` may span the objects; the blocks' dicts stay within a block."""
    families = [Family(f"test_f{i}", "F.", ("name",)) for i in range(15)]
    rows = Rows(families, block_size=64)
    for i in range(3000):
        rows.put(f"p{i}", tuple(f.line((f"p{i}",), 1) for f in families))
        if i >= 1000:
            rows.delete(f"p{i - 1000}")

    def dicts(value: object) -> list[dict[object, object]]:
        if isinstance(value, dict):
            return [value]
        if isinstance(value, list | tuple):
            return [d for item in value for d in dicts(item)]
        return []

    big = [d for value in vars(rows).values() for d in dicts(value) if len(d) > rows.block_size]
    assert big == [rows._block_of] and len(rows) == 1000
    assert [rows.count(f) for f in range(15)] == [1000] * 15
    assert len(plain(rows).splitlines()) == 15 * (1000 + 2)
