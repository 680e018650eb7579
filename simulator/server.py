"""A Kubernetes-API-compatible HTTP server over `Store`, good enough for the official Python
client and kubectl: discovery, list (limit/continue, selectors), watch (resourceVersion,
bookmarks, timeouts, 410), get/create/update/patch/delete, status subresources, Table printing,
and fault injection (`/sim/faults`) for tests of the clients' resilience. This module holds the
routes; watch streams are served by simulator.watch (ApiServer derives from its WatchStreams).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import orjson
from aiohttp import web

from volcano_monitor.simulator import discovery
from volcano_monitor.simulator.authn import Authn, add_review_routes
from volcano_monitor.simulator.request import Faults, Target
from volcano_monitor.simulator.resources import find_type
from volcano_monitor.simulator.selectors import Predicate, combine, field_selector, label_selector
from volcano_monitor.simulator.store import JSON_PATCH, MERGE_PATCH, ApiError, Store
from volcano_monitor.simulator.tables import table, wants_table
from volcano_monitor.simulator.watch import WatchStreams

JSON = "application/json"


def _status_response(error: ApiError) -> web.Response:
    return web.Response(status=error.code, body=orjson.dumps(error.status()), content_type=JSON)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type=JSON)


class ApiServer(WatchStreams):
    def __init__(self, store: Store, faults: Faults | None = None, bookmark_interval: float = 5.0,
                 metrics_source: Any = None) -> None:
        self.store = store
        self.faults = faults or Faults()
        self.bookmark_interval = bookmark_interval
        self.metrics_source = metrics_source  # object with prometheus_metrics() -> bytes
        self.active_watches = 0
        self.requests_total = 0
        # What lists cost a real API server: a page read from etcd, or one answer from its watch cache.
        self.list_pages_from_storage = 0
        self.lists_from_cache = 0
        self.streamed_lists = 0  # watches with sendInitialEvents (served from the watch cache too)
        self.authn = Authn()  # TokenReview / SubjectAccessReview users and rules (simulator.authn)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        def static(document: Any) -> Any:
            async def handler(_: web.Request) -> web.Response:
                return _json(document) if not isinstance(document, str) else web.Response(text=document)

            return handler

        app.router.add_get("/version", static(discovery.VERSION))
        for probe in ("/healthz", "/readyz", "/livez"):
            app.router.add_get(probe, static("ok"))
        app.router.add_get("/api", static(discovery.api_versions()))
        app.router.add_get("/apis", static(discovery.api_group_list(self.store.buckets)))
        app.router.add_get("/sim/faults", self._get_faults)
        app.router.add_post("/sim/faults", self._set_faults)
        app.router.add_get("/metrics", self._metrics)
        add_review_routes(app, self)
        app.router.add_route("*", "/api/{tail:.*}", self._dispatch)
        app.router.add_route("*", "/apis/{tail:.*}", self._dispatch)
        return app

    # ---- control endpoints ----------------------------------------------------------------------

    async def _get_faults(self, _: web.Request) -> web.Response:
        return _json(asdict(self.faults) | {"active_watches": self.active_watches, "resource_version": self.store.rv,
                                            "lists_from_cache": self.lists_from_cache,
                                            "list_pages_from_storage": self.list_pages_from_storage,
                                            "streamed_lists": self.streamed_lists})

    async def _set_faults(self, request: web.Request) -> web.Response:
        """Body keys: any Faults field, plus `drop_watches: true` and `expire: true`."""
        try:
            body = orjson.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("body must be an object")
            if body.pop("drop_watches", False):
                self.drop_watches()
            if body.pop("expire", False):
                self.store.compact()
            for key, value in body.items():
                if key not in Faults.__dataclass_fields__:
                    raise ValueError(f"unknown fault {key!r}")
                setattr(self.faults, key, value)
        except (ValueError, orjson.JSONDecodeError) as exc:
            return _status_response(ApiError(400, "BadRequest", str(exc)))
        return await self._get_faults(request)

    def drop_watches(self) -> None:
        self.faults.drop_generation += 1
        for bucket in self.store.buckets.values():  # wake every watcher so it notices
            changed, bucket.changed = bucket.changed, asyncio.Event()
            changed.set()

    async def _metrics(self, _: web.Request) -> web.Response:
        body = self.metrics_source.prometheus_metrics() if self.metrics_source is not None else b""
        return web.Response(body=body, content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    # ---- routing ------------------------------------------------------------------------------

    def _resolve(self, path: str) -> Target | web.Response:
        parts = [p for p in path.split("/") if p]
        if parts == ["api"]:  # `/api/`, as CoreApi asks
            return _json(discovery.api_versions())
        if parts == ["apis"]:
            return _json(discovery.api_group_list(self.store.buckets))
        if parts[0] == "api":
            if len(parts) < 2:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 2:
                return _json(discovery.api_group(parts[1], self.store.buckets))
            if len(parts) < 3:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            return _json(discovery.resource_list(group, version, self.store.buckets))
        watch = rest[0] == "watch"
        if watch:
            rest = rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        plural, name = rest[0], (rest[1] if len(rest) > 1 else None)
        subresource = rest[2] if len(rest) > 2 else ""
        rtype = find_type(group, version, plural)
        if rtype is None or rtype not in self.store.buckets or len(rest) > 3:  # a kind this release lacks: 404
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rtype.namespaced and namespace is not None:
            raise ApiError(404, "NotFound", f"{plural} is not namespaced")
        if subresource and not (subresource == "status" and rtype.has_status):
            raise ApiError(404, "NotFound", f"the server could not find the subresource {subresource!r}")
        return Target(rtype, namespace, name, subresource, watch)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests_total += 1
        try:
            target = self._resolve(request.path)
            if isinstance(target, web.Response):
                return target
            plural = target.rtype.plural
            if self.faults.delay_seconds > 0:
                await asyncio.sleep(self.faults.delay_seconds)
            if plural in self.faults.forbidden:
                raise ApiError(403, "Forbidden", f'{plural} is forbidden: User "system:serviceaccount:'
                               'volcano-monitor:volcano-monitor" cannot list resource '
                               f'"{plural}" in API group "{target.rtype.group}" at the cluster scope')
            code = self.faults.take_error(plural)
            if code is not None:
                raise ApiError(code, "InternalError", "injected fault: internal error")
            return await self._handle(request, target)
        except ApiError as error:
            return _status_response(error)

    async def _handle(self, request: web.Request, t: Target) -> web.StreamResponse:
        method = request.method
        query = request.query
        ns = t.namespace or ""
        if method == "GET":
            if t.name is None:
                if t.watch or query.get("watch") in ("1", "true", "True"):
                    return await self._watch(request, t)
                return self._list(request, t)
            obj = self.store.get(t.rtype, ns, t.name)
            if obj is None:
                raise self.store.not_found(t.rtype, t.name)
            if wants_table(request):
                return _json(table(t.rtype, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion")}))
            return _json(obj)
        if "create" not in t.rtype.verbs:
            raise ApiError(405, "MethodNotAllowed", f"{t.rtype.plural} is read-only")
        if method == "DELETE":
            if t.name is None:
                return self._delete_collection(request, t)
            return _json(self.store.delete(t.rtype, ns, t.name))
        body = await self._read_json(request)
        if method == "POST" and t.name is None:
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body must be a JSON object")
            return _json(self.store.create(t.rtype, body, ns), 201)
        if t.name is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} needs an object name")
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body must be a JSON object")
            body_name = (body.get("metadata") or {}).get("name")
            if body_name not in (None, t.name):
                raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
            body.setdefault("metadata", {})["name"] = t.name
            return _json(self.store.update(t.rtype, body, ns, t.subresource))
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", MERGE_PATCH).split(";")[0].strip()
            if content_type == JSON:
                content_type = MERGE_PATCH if isinstance(body, dict) else JSON_PATCH
            return _json(self.store.patch(t.rtype, ns, t.name, body, content_type, t.subresource))
        raise ApiError(405, "MethodNotAllowed", f"method {method} is not allowed")

    @staticmethod
    async def _read_json(request: web.Request) -> Any:
        try:
            return orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {exc}") from exc

    def _predicate(self, request: web.Request, t: Target) -> Predicate | None:
        namespace_match: Predicate | None = None
        if t.rtype.namespaced and t.namespace is not None:
            wanted = t.namespace
            namespace_match = lambda obj: obj["metadata"].get("namespace") == wanted  # noqa: E731
        return combine(namespace_match, label_selector(request.query.get("labelSelector")),
                       field_selector(request.query.get("fieldSelector")))

    def _list(self, request: web.Request, t: Target) -> web.Response:
        query = request.query
        try:
            limit = int(query.get("limit", "0") or 0)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", "limit must be an integer") from exc
        token = query.get("continue")
        since, match = query.get("resourceVersion", ""), query.get("resourceVersionMatch", "")
        if token and since:
            raise ApiError(400, "BadRequest", "specifying resource version is not allowed when using continue")
        if match and not since:
            raise ApiError(400, "BadRequest", "resourceVersionMatch is forbidden unless resourceVersion is provided")
        if match not in ("", "NotOlderThan", "Exact"):
            raise ApiError(400, "BadRequest", f"unsupported resourceVersionMatch {match!r}")
        if since and match != "Exact":
            # Kubernetes v1.32's watch cache: "0" (any) or NotOlderThan, whole list in one answer (limit ignored).
            if not since.isdigit():
                raise ApiError(400, "BadRequest", f"invalid resourceVersion {since!r}")
            if int(since) > self.store.rv:
                raise ApiError(504, "Timeout", f"Too large resource version: {since}, current: {self.store.rv}")
            self.lists_from_cache += 1
            limit = 0
        else:
            self.list_pages_from_storage += 1
        if token:
            snap_token, _, offset_text = token.partition(":")
            snap = self.store.snapshot(snap_token)
            offset = int(offset_text or 0)
            items, rv = snap.items, snap.rv
        else:
            predicate = self._predicate(request, t)
            items = self.store.items(t.rtype, t.namespace)
            if predicate is not None:
                items = [s for s in items if predicate(s.obj)]
            items.sort(key=lambda s: (s.obj["metadata"].get("namespace", ""), s.obj["metadata"]["name"]))
            offset, rv = 0, self.store.rv
            snap_token = ""
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        page = items[offset:offset + limit] if limit > 0 else items[offset:]
        if limit > 0 and offset + limit < len(items):
            if not snap_token:
                snap_token = self.store.open_snapshot(items)
            meta["continue"] = f"{snap_token}:{offset + limit}"
            meta["remainingItemCount"] = len(items) - offset - limit
        if wants_table(request):
            return _json(table(t.rtype, [s.obj for s in page], meta))
        head = orjson.dumps({"kind": t.rtype.kind + "List", "apiVersion": t.rtype.api_version, "metadata": meta})
        body = head[:-1] + b',"items":[' + b",".join(s.raw for s in page) + b"]}"
        return web.Response(body=body, content_type=JSON)

    def _delete_collection(self, request: web.Request, t: Target) -> web.Response:
        predicate = self._predicate(request, t)
        deleted = []
        for stored in self.store.items(t.rtype, t.namespace):
            if predicate is None or predicate(stored.obj):
                meta = stored.obj["metadata"]
                deleted.append(self.store.delete(t.rtype, meta.get("namespace", ""), meta["name"]))
        return _json({"kind": t.rtype.kind + "List", "apiVersion": t.rtype.api_version,
                      "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})
