"""Watch streams of the simulated API server (simulator.server): the events after a resourceVersion (or
the current state first, as ADDED events, or as a streaming list ending in its marked bookmark),
bookmarks, `timeoutSeconds`, 410 for versions older than the retained window, and the stream faults
(cut lines, garbage lines, dropped streams) the clients' resilience tests inject.

Kept apart from the routes (get/list/create/update/patch/delete) because a watch is the one long-lived
answer: it loops on the store's change signal until its deadline, a fault or the client goes. ApiServer
derives from WatchStreams, which uses the server's attributes declared below.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
from aiohttp import web

from volcano_monitor.simulator.request import Faults, Target
from volcano_monitor.simulator.selectors import Predicate
from volcano_monitor.simulator.store import ApiError, Store, WatchEvent
from volcano_monitor.simulator.tables import table, wants_table

DEFAULT_WATCH_TIMEOUT = 1800.0


class WatchStreams:
    """The watch half of ApiServer: `_watch` answers a watch request, one event per line."""

    # Set by ApiServer.
    store: Store
    faults: Faults
    bookmark_interval: float
    active_watches: int
    streamed_lists: int

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        query = request.query
        predicate = self._predicate(request, t)
        as_table = wants_table(request)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1", "True")
        try:
            timeout = float(query.get("timeoutSeconds", DEFAULT_WATCH_TIMEOUT))
            rv_text = query.get("resourceVersion", "")
            since = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid watch parameter: {exc}") from exc
        streaming = query.get("sendInitialEvents") in ("true", "1", "True")
        match = query.get("resourceVersionMatch", "")
        if streaming:  # a streaming list (KEP-3157): the current state, a marked bookmark, then the watch
            if not self.faults.watch_list:
                raise ApiError(422, "Invalid", "sendInitialEvents is forbidden for watch unless the WatchList "
                                               "feature gate is enabled")
            if match != "NotOlderThan" or not bookmarks:
                raise ApiError(422, "Invalid", "sendInitialEvents requires resourceVersionMatch=NotOlderThan "
                                               "and allowWatchBookmarks=true")
            if since is not None and since > self.store.rv:
                raise ApiError(504, "Timeout", f"Too large resource version: {since}, current: {self.store.rv}")
            since = None
        elif match:
            raise ApiError(422, "Invalid", "resourceVersionMatch is forbidden for watch unless sendInitialEvents "
                                           "is provided")
        bucket = self.store.bucket(t.rtype)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        self.active_watches += 1
        generation = self.faults.drop_generation
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.bookmark_interval
        rtype = t.rtype

        def line(event_type: str, obj: dict[str, Any], raw: bytes | None) -> bytes:
            if as_table:
                raw = orjson.dumps(table(rtype, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}))
            elif raw is None:
                raw = orjson.dumps(obj)
            return b'{"type":"' + event_type.encode() + b'","object":' + raw + b"}\n"

        try:
            if since is None:  # start with the current state, as synthetic ADDED events
                last_rv = self.store.rv
                initial = [s for s in self.store.items(rtype, t.namespace)
                           if predicate is None or predicate(s.obj)]
                if streaming and self.faults.truncate_streams > 0:  # cut before the end bookmark
                    self.faults.truncate_streams -= 1
                    await response.write(b"".join(line("ADDED", s.obj, s.raw) for s in initial[:len(initial) // 2]))
                    raise ConnectionResetError
                for stored in initial:  # one write (one HTTP chunk) per event, as the API server's watch
                    await response.write(line("ADDED", stored.obj, stored.raw))  # encoder: never the state at once
                if streaming:
                    mark = {"kind": rtype.kind, "apiVersion": rtype.api_version,
                            "metadata": {"resourceVersion": str(last_rv),
                                         "annotations": {"k8s.io/initial-events-end": "true"}}}
                    self.streamed_lists += 1  # before the write: a client may act on the bookmark at once
                    await response.write(b'{"type":"BOOKMARK","object":' + orjson.dumps(mark) + b"}\n")
            else:
                last_rv = since
            while True:
                if self.faults.drop_generation != generation or time.monotonic() >= deadline:
                    break
                try:
                    events = bucket.events_after(last_rv)
                except ApiError as error:
                    await response.write(b'{"type":"ERROR","object":' + orjson.dumps(error.status()) + b"}\n")
                    break
                if events:
                    last_rv = events[-1].rv
                    chunk, cut = self._render_events(events, predicate, line)
                    if chunk:
                        await response.write(chunk)
                    if cut:
                        break
                    continue
                now = time.monotonic()
                if bookmarks and now >= next_bookmark:
                    # No await since events_after found nothing: every event up to store.rv was sent.
                    last_rv = self.store.rv
                    mark = {"kind": rtype.kind, "apiVersion": rtype.api_version,
                            "metadata": {"resourceVersion": str(last_rv)}}
                    await response.write(b'{"type":"BOOKMARK","object":' + orjson.dumps(mark) + b"}\n")
                    next_bookmark = now + self.bookmark_interval
                    continue
                wait = min(deadline - now, (next_bookmark - now) if bookmarks else deadline - now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(bucket.changed.wait(), timeout=max(wait, 0.001))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.active_watches -= 1
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response

    def _render_events(self, events: list[WatchEvent], predicate: Predicate | None,
                       line: Any) -> tuple[bytes, bool]:
        """Turn store events into watch lines for one watcher; True when a fault cuts the stream."""
        out: list[bytes] = []
        for event in events:
            event_type = event.type
            if predicate is not None:
                now_match = predicate(event.obj)
                was_match = event.old is not None and predicate(event.old)
                if event_type == "MODIFIED" and now_match != was_match:
                    event_type = "ADDED" if now_match else "DELETED"
                elif not now_match:
                    continue
            encoded = line(event_type, event.obj, event.raw)
            if self.faults.truncate_streams > 0:
                self.faults.truncate_streams -= 1
                out.append(encoded[: len(encoded) // 2])
                return b"".join(out), True
            if self.faults.malformed_lines > 0:
                self.faults.malformed_lines -= 1
                encoded = b'{"type":"MODIFIED","object":{"metadata":\x00garbage\n'
            out.append(encoded)
        return b"".join(out), False

    # Provided by ApiServer (declared here for the type checker).
    def _predicate(self, request: web.Request, t: Target) -> Predicate | None:
        raise NotImplementedError
