"""List+watch informer on raw JSON, in the manner of client-go's reflector.

The initial state comes from a streaming list where the server offers one (a watch with
sendInitialEvents, ended by a bookmark: no list response of every object held in memory at once),
else from a LIST served by the API server's watch cache, else from paginated reads of storage; then
WATCH from that state's resourceVersion with bookmarks and a server timeout;
reconnect from the last seen resourceVersion when a watch ends; relist and reconcile the cache on
410 Gone; back off with jitter on connection errors and 5xx, forever, keeping the cache. The
official client does authentication and TLS, but responses are decoded with orjson and never
turned into generated models: that deserialization costs ~10x the JSON parsing.

The watch requests (streaming lists included) are `WatchStream`'s, in core.kube.watchstream.

Handlers receive `(event_type, object)` with event_type ADDED, MODIFIED or DELETED, where object is
whatever `transform` made of the raw JSON (the raw dict by default). They are called on the
informer's thread, in resourceVersion order for any one object.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
import urllib3
from kubernetes import client

from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.resources import ResourceKind
from volcano_monitor.core.kube.watchstream import ADDED as ADDED
from volcano_monitor.core.kube.watchstream import BACKOFF as BACKOFF
from volcano_monitor.core.kube.watchstream import DELETED as DELETED
from volcano_monitor.core.kube.watchstream import FORBIDDEN as FORBIDDEN
from volcano_monitor.core.kube.watchstream import LISTING as LISTING
from volcano_monitor.core.kube.watchstream import MODIFIED as MODIFIED
from volcano_monitor.core.kube.watchstream import NOT_FOUND as NOT_FOUND
from volcano_monitor.core.kube.watchstream import STARTING as STARTING
from volcano_monitor.core.kube.watchstream import STOPPED as STOPPED
from volcano_monitor.core.kube.watchstream import WATCHING as WATCHING
from volcano_monitor.core.kube.watchstream import ApiStatusError, WatchExpired, WatchStream, status_message
from volcano_monitor.core.kube.watchstream import gc_paused as gc_paused

# The event types, states and gc_paused are defined beside the watch half (core.kube.watchstream); imported
# `as` themselves, they are named from here too (the watchdog's `from ...informer import DELETED`, ...).
log = logging.getLogger(__name__)

T = TypeVar("T")
Raw = dict[str, Any]
Handler = Callable[[str, T], None]

STREAM_ATTEMPTS = 3  # streaming lists cut short in a row before falling back to LIST


@dataclass(slots=True)
class Entry(Generic[T]):
    resource_version: str
    obj: T


def connection_problem(exc: BaseException) -> str:
    """What went wrong in words ("[Errno 111] Connection refused", "Read timed out"), without urllib3's
    wrapping of the pool, the URL and the exception classes."""
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    errno_at = text.find("[Errno")
    if errno_at >= 0:
        return text[errno_at:].rstrip("\"')")
    return text.split(": ", 1)[-1] if isinstance(reason, urllib3.exceptions.HTTPError) and ": " in text else text


def object_key(meta: Raw) -> str:
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class Informer(WatchStream, Generic[T]):
    def __init__(
        self,
        api: client.ApiClient,
        kind: ResourceKind,
        *,
        namespace: str | None = None,
        transform: Callable[[Raw], T] | None = None,
        predicate: Callable[[Raw], bool] | None = None,
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        backoff: Backoff | None = None,
        forbidden_retry_seconds: float = 60.0,
        list_from_cache: bool = True,
        stream_lists: bool = True,
        drop_managed_fields: bool = True,
    ) -> None:
        self.api = api
        self.kind = kind
        self.namespace = namespace
        self.transform: Callable[[Raw], Any] = transform if transform is not None else (lambda raw: raw)
        self.predicate = predicate
        self.label_selector = label_selector
        self.page_size = page_size
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff = backoff or Backoff()
        self.forbidden_retry_seconds = forbidden_retry_seconds
        self.handlers: list[Handler[T]] = []
        self.cache: dict[str, Entry[T]] = {}
        self.last_resource_version = ""
        self.list_from_cache = list_from_cache  # False: every list is a paginated read from etcd
        self._storage_list = False  # the cache could not serve the last list: read from storage
        self.stream_lists = stream_lists  # False, or refused by the server: LIST instead
        self.drop_managed_fields = drop_managed_fields  # watch lines are decoded without them (nothing reads them)
        self._initial: set[str] | None = None  # keys seen while a streaming list is under way
        self._gc_pause: gc_paused | None = None  # held from a streaming list's start to its end bookmark
        self._incomplete_streams = 0  # streaming lists in a row that ended before their end bookmark
        # Observable state (read by self-metrics; plain attributes, written by one thread).
        self.synced = threading.Event()
        self.state = STARTING
        self.last_event_time: float | None = None
        self.events: Counter[str] = Counter()
        self.relists = 0  # lists after the first complete one: 410s, expired continue tokens, 403/404 recoveries
        self.decode_errors = 0
        self.handler_errors = 0
        self.request_errors: Counter[str] = Counter()  # by HTTP code or "connection"
        self.last_error = ""
        self._reported = ""  # the standing problem already logged, so a retry loop logs it once
        self._reloaded = False  # credentials read again since the last request that got through
        self._stop = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.kind.name + (f" in {self.namespace}" if self.namespace else "")

    def add_handler(self, handler: Handler[T]) -> None:
        self.handlers.append(handler)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Informer[T]:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.kind.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # best effort: the socket may already be gone
                response.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)

    def run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list and self.stream_lists:
                    healthy = self._watch(initial=True)
                    need_list = self._initial is not None  # ended before the initial state was complete
                    self._initial = None
                    self._incomplete_streams = self._incomplete_streams + 1 if need_list else 0
                    if self._incomplete_streams >= STREAM_ATTEMPTS:  # e.g. a proxy that drops the parameter
                        self.stream_lists = False
                        log.info("%s: %d streaming lists ended without their end bookmark; listing instead",
                                 self.name, self._incomplete_streams)
                    if not healthy and not self._stop.is_set():
                        self._sleep_backoff("the streaming list ended early or sent an undecodable line")
                    continue
                if need_list:
                    self._list_and_reconcile()
                    need_list = False
                    self.backoff.reset()
                if not self._watch() and not self._stop.is_set():
                    self._sleep_backoff("the watch stream ended early or sent an undecodable line")
            except WatchExpired:
                need_list = True
            except ApiStatusError as exc:
                self._on_status_error(exc)
                need_list = need_list or exc.code in (403, 404)
            except (urllib3.exceptions.HTTPError, OSError, client.ApiException) as exc:
                if self._stop.is_set():
                    break  # stop() shut the stream down under us: not an error
                self.request_errors["connection"] += 1
                self.last_error = connection_problem(exc)
                host = getattr(getattr(self.api, "configuration", None), "host", "")
                self._sleep_backoff(f"cannot reach the API server {host}: {self.last_error}".replace("  ", " "))
            except orjson.JSONDecodeError as exc:  # a LIST body that is not JSON
                self.decode_errors += 1
                self._sleep_backoff(f"undecodable list response: {exc}")
            except Exception as exc:  # e.g. a credential the HTTP library refuses to send: never end the thread
                self.request_errors["client"] += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("%s: unexpected error", self.name)
                self._sleep_backoff(f"unexpected error: {self.last_error}")
        self.state = STOPPED

    def _on_status_error(self, exc: ApiStatusError) -> None:
        self.request_errors[str(exc.code)] += 1
        self.last_error = str(exc)
        if exc.code == 401 and self._reload_credentials():
            return  # retry at once with what was read
        if exc.code in (401, 403):
            if self._reported != FORBIDDEN:
                self._reported = FORBIDDEN
                log.error("access to %s is %s (check RBAC): %s; retrying every %gs", self.name,
                          "forbidden" if exc.code == 403 else "unauthorized", exc.message,
                          self.forbidden_retry_seconds)
            self.state = FORBIDDEN
            self._stop.wait(self.forbidden_retry_seconds)
            self._reloaded = False  # a 401 after the wait may be a token replaced meanwhile: read again
        elif exc.code == 404:
            if self._reported != NOT_FOUND:
                self._reported = NOT_FOUND
                # An optional kind (a CRD only some Volcano releases have) is expected to be missing.
                log.log(logging.INFO if self.kind.optional else logging.ERROR,
                        "the API server does not serve %s/%s %s (is the CRD installed?); retrying every %gs",
                        self.kind.group or "core", self.kind.version, self.kind.plural,
                        self.forbidden_retry_seconds)
            self.state = NOT_FOUND
            self._stop.wait(self.forbidden_retry_seconds)
        else:
            self._sleep_backoff(f"the API server answered {exc}")

    def _reload_credentials(self) -> bool:
        """After a 401: read the token / kubeconfig again, once per failure streak (a rotated projected
        token is the usual cause). False when there is nothing to reload or it was just done."""
        reload = getattr(self.api, "reload_credentials", None)
        if reload is None or self._reloaded:
            return False
        self._reloaded = True
        try:
            reload()
        except Exception as exc:  # a ClusterConfigError, or a file that vanished mid-rotation
            log.error("%s: unauthorized, and reading the credentials again failed: %s", self.name, exc)
            return False
        log.info("%s: unauthorized; credentials read again, retrying", self.name)
        return True

    def _sleep_backoff(self, why: str) -> None:
        delay = self.backoff.next_delay()
        if self.backoff.failures in (1, 5, 10) or self.backoff.failures % 50 == 0:
            log.warning("%s: %s; retrying in %.1fs (attempt %d)", self.name, why, delay, self.backoff.failures)
        self.state = BACKOFF
        self._stop.wait(delay)

    # ---- HTTP -----------------------------------------------------------------------------------

    def _request(self, query: list[tuple[str, str]], read_timeout: float) -> urllib3.BaseHTTPResponse:
        method, url, headers, _, _ = self.api.param_serialize(
            "GET", self.kind.path(self.namespace), query_params=query,
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
        )
        rest_response = self.api.call_api(method, url, header_params=headers, _request_timeout=(10, read_timeout))
        response: urllib3.BaseHTTPResponse = rest_response.response
        if response.status >= 300:
            body = response.data
            response.release_conn()
            if response.status == 410:
                raise WatchExpired()
            raise ApiStatusError(response.status, status_message(body))
        self._reloaded = False
        return response

    def _selector_query(self) -> list[tuple[str, str]]:
        return [("labelSelector", self.label_selector)] if self.label_selector else []

    # ---- list -----------------------------------------------------------------------------------

    def _list_resource_version(self) -> str:
        """Where a list may be served from, as client-go's reflector decides. The first list takes "0": any
        state the API server's watch cache holds, with no read from etcd (paginated reads of 100k pods
        from etcd cost the API server and etcd several times more). A relist asks for a state no older
        than the one already seen (still from the cache), so the view never goes back in time. After
        the server said it cannot (410), "": a consistent read from storage."""
        if self._storage_list or not self.list_from_cache:
            return ""
        return self.last_resource_version or "0"

    def _list_and_reconcile(self) -> None:
        """List every page, applying each as it arrives; then delete what the list no longer has."""
        self.state = LISTING
        if self.synced.is_set():
            self.relists += 1
        seen: set[str] = set()
        token = ""
        since = self._list_resource_version()
        while True:
            query = [("limit", str(self.page_size)), *self._selector_query()]
            if token:
                query.append(("continue", token))  # the API server refuses a resourceVersion with it
            elif since == "0":
                query.append(("resourceVersion", "0"))
            elif since:
                query += [("resourceVersion", since), ("resourceVersionMatch", "NotOlderThan")]
            try:
                response = self._request(query, read_timeout=120)
            except ApiStatusError as exc:
                if not (since and exc.code == 504 and "too large resource version" in exc.message.lower()):
                    raise
                # Our resourceVersion is newer than the server's (an etcd restore, a lagging replica).
                log.info("%s: the API server is behind resourceVersion %s; listing from storage", self.name, since)
                self._storage_list = True
                since = ""
                continue
            except WatchExpired:
                if token:
                    log.info("%s: list continue token expired; listing again from the start", self.name)
                    self.relists += 1
                elif since:
                    log.info("%s: the API server's cache cannot serve resourceVersion %s; listing from storage",
                             self.name, since)
                    self._storage_list = True
                else:
                    raise
                seen.clear()
                token = ""
                since = ""
                continue
            with gc_paused():
                body = orjson.loads(response.data)
                response.release_conn()
                items = body.get("items") or []
                metadata = body.get("metadata") or {}
                for raw in items:
                    key = self._apply(ADDED, raw, from_list=True)
                    if key is not None:
                        seen.add(key)
                del body, items
            token = metadata.get("continue") or ""
            if not token:
                break
        for key in [k for k in self.cache if k not in seen]:
            entry = self.cache.pop(key)
            self._dispatch(DELETED, entry.obj)
        self.last_resource_version = str(metadata.get("resourceVersion") or "")
        self._storage_list = False
        self.synced.set()
        if self._reported:
            log.info("%s: listing works again (%d objects)", self.name, len(self.cache))
            self._reported = ""

    # ---- watch: WatchStream's, in core.kube.watchstream (streaming lists too) ------------------

    # ---- cache ----------------------------------------------------------------------------------

    def _apply(self, event_type: str, raw: Any, from_list: bool = False) -> str | None:
        """Apply one object to the cache and tell the handlers; returns its key (None if unusable)."""
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            self.decode_errors += 1
            log.warning("%s: object without metadata.name skipped", self.name)
            return None
        key = object_key(meta)
        rv = str(meta.get("resourceVersion") or "")
        if not from_list and rv:
            self.last_resource_version = rv
        self.last_event_time = time.time()
        current = self.cache.get(key)
        if event_type == DELETED or (self.predicate is not None and not self.predicate(raw)):
            if current is not None:
                del self.cache[key]
                self._dispatch(DELETED, self._transform(raw, current.obj))
            return None
        if current is not None and current.resource_version == rv:
            return key  # unchanged (a relist of an object we already have)
        obj = self._transform(raw, None)
        if obj is None:
            return key if current is not None else None
        self.cache[key] = Entry(rv, obj)
        self._dispatch(MODIFIED if current is not None else ADDED, obj)
        return key

    def _transform(self, raw: Raw, fallback: T | None) -> Any:
        try:
            return self.transform(raw)
        except Exception:
            self.decode_errors += 1
            log.exception("%s: could not transform %s", self.name, object_key(raw["metadata"]))
            return fallback

    def _dispatch(self, event_type: str, obj: T) -> None:
        self.events[event_type] += 1
        for handler in self.handlers:
            try:
                handler(event_type, obj)
            except Exception:
                self.handler_errors += 1
                log.exception("%s: handler failed on a %s event", self.name, event_type)
