"""The watch half of the informer: one watch request and the events its stream brings.

`Informer` (core.kube.informer) lists, keeps the cache and retries; this module reads a watch
stream. A streaming list is a watch too (sendInitialEvents): its ADDED events are the current state,
ended by a bookmark annotated `k8s.io/initial-events-end`, after which the same stream goes on with
changes. While it lists, the cyclic GC is paused (`gc_paused`).

Here too is what both halves name: the event types handlers receive, the states self-metrics
report and the two errors a request or a stream ends with. `core.kube.informer` imports them all
from here, and importers name that module.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import urllib3

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.watchline import decode_event

log = logging.getLogger("volcano_monitor.core.kube.informer")  # the informer's log, whichever half writes

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the bookmark annotation that ends a streaming list

# Informer states, as self-metrics report them.
STARTING, LISTING, WATCHING, BACKOFF, FORBIDDEN, NOT_FOUND, STOPPED = (
    "starting", "listing", "watching", "backoff", "forbidden", "not_found", "stopped",
)


class ApiStatusError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"HTTP {code}: {message}")
        self.code = code
        self.message = message


class WatchExpired(Exception):
    """The resourceVersion we resume from is gone (410): only a relist can recover."""


def status_message(body: bytes) -> str:
    """The message of the Status object an API server answers an error with (the body itself if not one)."""
    try:
        status = orjson.loads(body)
        return str(status.get("message") or status.get("reason") or "")[:500]
    except (orjson.JSONDecodeError, AttributeError):
        return body[:200].decode("utf-8", "replace")


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_freeze = False  # a pause that ended meanwhile asked for a freeze when the last one ends


class gc_paused:
    """Pause the cyclic GC while decoding large lists (it would rescan every new dict many times).

    A streaming list pauses it from its first event to its end bookmark (`WatchStream._begin_stream`): the
    objects it keeps (views, rows) arrive by the hundred thousand, each allocation count past the
    threshold runs a collection, and the growing young and old generations are rescanned over and over
    for no garbage (decoded events hold no cycles and go by reference counting). At 20k real-shaped
    pods that was ~25% of the sync's CPU (bench/exporter.py `initial_sync_gc_seconds`).

    `freeze`: when the last pause ends, collect once, then move every object left to the permanent
    generation (`gc.freeze`), so that no later full collection rescans the cache the list built. Only a
    complete streaming list asks for it: what it leaves are the views and rows of the cache, freed by
    reference counting when their objects go. The collection first is not optional: while the
    collector was off, every thread of the process (the watchdog's database and HTTP work, tracebacks
    of failed requests) may have left cyclic garbage, and a frozen cycle is never collected, so each
    relist over months of uptime would leak what it froze. It costs one pass (0.4-0.5 s after a
    100k-pod list), once per complete list."""

    def __init__(self, freeze: bool = False) -> None:
        self.freeze = freeze

    def __enter__(self) -> None:
        global _gc_pausers
        with _gc_lock:
            _gc_pausers += 1
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        global _gc_pausers, _gc_freeze
        with _gc_lock:
            _gc_pausers -= 1
            _gc_freeze = _gc_freeze or self.freeze
            if _gc_pausers == 0:
                if _gc_freeze:
                    gc.collect()
                    gc.freeze()
                _gc_freeze = False
                gc.enable()


def lines(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The stream's lines (a line may keep its newline: JSON decoding ignores it).

    An API server writes each watch event as one write, so most chunks are exactly one line: those
    are passed on as they are, without the concatenation and split (two more passes over ~8 KB,
    and a list) that other chunks get."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        if not buffer and chunk.find(b"\n") == len(chunk) - 1:
            if len(chunk) > 1 and not chunk.isspace():
                yield chunk
            continue
        buffer += chunk
        if b"\n" not in buffer:
            continue
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer  # a last line without newline: the stream was cut, decoding will tell


class WatchStream:
    """`Informer`'s watch requests (a mixin: `Informer` is the one class that uses it).

    The attributes and methods declared below are `Informer`'s: this half reads and writes them."""

    watch_timeout_seconds: int
    backoff: Backoff
    drop_managed_fields: bool
    stream_lists: bool
    cache: dict[str, Any]
    last_resource_version: str
    state: str
    synced: threading.Event
    relists: int
    decode_errors: int
    request_errors: Counter[str]
    _storage_list: bool
    _initial: set[str] | None
    _gc_pause: gc_paused | None
    _reported: str
    _stop: threading.Event
    _response: urllib3.BaseHTTPResponse | None

    @property
    def name(self) -> str:
        raise NotImplementedError

    def _request(self, query: list[tuple[str, str]], read_timeout: float) -> urllib3.BaseHTTPResponse:
        raise NotImplementedError

    def _selector_query(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def _apply(self, event_type: str, raw: Any, from_list: bool = False) -> str | None:
        raise NotImplementedError

    def _dispatch(self, event_type: str, obj: Any) -> None:
        raise NotImplementedError

    def _watch(self, initial: bool = False) -> bool:
        """One watch request; False when it went wrong in a way that warrants backing off
        (closed within a second with nothing delivered, or an undecodable line). `initial`: a
        streaming list, the current state first (see `_begin_stream`)."""
        started = time.monotonic()
        delivered = 0
        query = [("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(self.watch_timeout_seconds)), *self._selector_query()]
        if initial:
            since = "" if self._storage_list else self.last_resource_version
            query += [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan"),
                      ("resourceVersion", since)]
        else:
            query.append(("resourceVersion", self.last_resource_version))
        try:
            response = self._request(query, read_timeout=self.watch_timeout_seconds + 30)
        except ApiStatusError as exc:
            if not initial or exc.code not in (400, 422, 504):
                raise
            self.request_errors[str(exc.code)] += 1
            if exc.code == 504:  # too large resource version: the server is behind what we saw
                self._storage_list = True
            else:  # WatchList is off (Kubernetes 1.33 by default) or unknown: LIST from now on
                self.stream_lists = False
                log.info("%s: the API server does not stream lists (%s); listing instead", self.name, exc.message)
            self._initial = set()  # not complete: list (or stream again)
            return True
        self._response = response
        if initial:
            self._begin_stream()
        else:
            self.state = WATCHING
        try:
            for line in lines(response):
                if self._stop.is_set():
                    return True
                if not self._handle_line(line):
                    return False  # undecodable line: reconnect from the last good resourceVersion
                delivered += 1
                self.backoff.reset()
        finally:
            self._resume_gc()
            self._response = None
            response.release_conn()
        return delivered > 0 or time.monotonic() - started > 1.0

    def _handle_line(self, line: bytes) -> bool:
        try:
            event = decode_event(line, self.drop_managed_fields)
            event_type = event["type"]
            obj = event["object"]
            if not isinstance(obj, dict) or not isinstance(event_type, str):
                raise TypeError("event object is not a JSON object")
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            self.decode_errors += 1
            log.warning("%s: undecodable watch event (%s); reconnecting from resourceVersion %s",
                        self.name, exc, self.last_resource_version)
            return False
        if event_type == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise WatchExpired()
            raise ApiStatusError(int(code) if isinstance(code, int) else 500, str(obj.get("message", "")))
        if event_type == "BOOKMARK":
            meta = obj.get("metadata") or {}
            rv = meta.get("resourceVersion")
            if isinstance(rv, str) and rv:
                self.last_resource_version = rv
            if self._initial is not None and (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                self._end_stream()
            return True
        if self._initial is not None and event_type == ADDED:
            key = self._apply(ADDED, obj, from_list=True)
            if key is not None:
                self._initial.add(key)
            return True
        if event_type not in (ADDED, MODIFIED, DELETED):
            self.decode_errors += 1
            log.warning("%s: unknown watch event type %r skipped", self.name, event_type[:40])
            return True
        self._apply(event_type, obj)
        return True

    def _begin_stream(self) -> None:
        self.state = LISTING
        if self.synced.is_set():
            self.relists += 1
        self._initial = set()
        if self._gc_pause is None:
            self._gc_pause = gc_paused()
            self._gc_pause.__enter__()

    def _resume_gc(self, complete: bool = False) -> None:
        """End the pause `_begin_stream` took, at the end bookmark (`complete`: then freeze what the list
        left, see `gc_paused`) or when the stream ends before it."""
        pause, self._gc_pause = self._gc_pause, None
        if pause is not None:
            pause.freeze = complete
            pause.__exit__()

    def _end_stream(self) -> None:
        """The bookmark after the initial state: what it did not name is gone, as after a LIST."""
        seen, self._initial = self._initial or set(), None
        self._resume_gc(complete=True)
        for key in [k for k in self.cache if k not in seen]:
            entry = self.cache.pop(key)
            self._dispatch(DELETED, entry.obj)
        self._storage_list = False
        self.state = WATCHING
        self.synced.set()
        if self._reported:
            log.info("%s: listing works again (%d objects)", self.name, len(self.cache))
            self._reported = ""
