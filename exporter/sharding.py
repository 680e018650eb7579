"""Splitting objects between exporter replicas by UID.

The hash is 64-bit FNV-1a of the UID's UTF-8 bytes, modulo the number of shards — the same rule as
kube-state-metrics' `--shard`/`--total-shards`, so one replica of each can be reasoned about
together. A UID never changes, so an object stays on its shard for its whole life.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK = 0xFFFFFFFFFFFFFFFF


def fnv1a_64(data: bytes) -> int:
    value = FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & MASK
    return value


def shard_of(uid: str, total_shards: int) -> int:
    return fnv1a_64(uid.encode()) % total_shards


def owns(shard: int, total_shards: int) -> Callable[[str], bool]:
    if total_shards <= 1:
        return lambda uid: True
    return lambda uid: shard_of(uid, total_shards) == shard


def raw_uid(raw: Any) -> str:
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""
