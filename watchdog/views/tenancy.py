"""Each team sees its own (`auth.mode: kubernetes`): the FastAPI dependency that turns a request into the
set of namespaces its caller may see, for the UI and every read of the API.

Who the caller is: a bearer token, reviewed with TokenReview; or, when the request's peer address is one of
`auth.trusted_proxies`, the user and groups an authenticating proxy (oauth2-proxy) put in
`auth.user_header` / `auth.groups_header`. From any other address those headers are ignored: anyone can send
them. What it may see: every namespace if SubjectAccessReview allows it to `list` Volcano jobs cluster-wide;
else each namespace the watchdog knows (the ledger's and the alerts', kept `cache_ttl_seconds`) for which
the per-namespace review allows it; the namespaces are those of every cluster in the database, and a caller's
scope applies on top of whatever `?cluster=` selects (a namespace's name means the same team in every cluster).
Answers are cached (core/kube/reviews.py), and so is each caller's set.

Failures answer one line and leak nothing: 401 for a missing, unknown, malformed or expired token (the same
words for each, so a token cannot be probed), 503 when the API server cannot review. With `auth.mode:
token` the dependency returns "every namespace" and asks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, HTTPException, Request
from sqlalchemy import Engine, distinct, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from volcano_monitor.core.kube.reviews import Identity, Reviews, ReviewUnavailable, Scope, TtlCache
from volcano_monitor.watchdog.state.db.models import Alert, JobRun
from volcano_monitor.watchdog.state.db.scope import fleet
from volcano_monitor.watchdog.views.auth_settings import AuthSettings
from volcano_monitor.watchdog.views.guard import route_table

log = logging.getLogger(__name__)

UNAUTHENTICATED = "a valid bearer token (or a trusted proxy's user header) is required"
UNAVAILABLE = "the Kubernetes API server could not review the caller; try again shortly"
REVIEWS_AT_ONCE = 8  # SubjectAccessReviews in flight for one caller's first look (the API server is shared)
CLUSTER_WIDE = "this page needs permission to list Volcano jobs in every namespace"
# Reads that stay open in every mode: probes, Prometheus' scrape (protect it with a NetworkPolicy, as the
# exporter's), the OpenAPI document and its pages (they describe routes, not data).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc",
                        "/openapi.json"})


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class Tenancy:
    """The caller's scope, as a dependency (`scope`), and `cluster_wide` for what cannot be split by namespace."""

    def __init__(self, settings: AuthSettings, reviews: Reviews | None = None, engine: Engine | None = None,
                 live_namespaces: Callable[[], Iterable[str]] = tuple) -> None:
        if settings.mode == "kubernetes" and reviews is None:
            raise ValueError("auth.mode kubernetes needs the API server's reviews")
        self.settings, self.reviews, self.engine, self.live_namespaces = settings, reviews, engine, live_namespaces
        self.scopes: TtlCache[Identity, Scope] = TtlCache(settings.cache_ttl_seconds, size=1000)
        self.known: TtlCache[str, frozenset[str]] = TtlCache(settings.cache_ttl_seconds, size=1)

    @property
    def on(self) -> bool:
        return self.settings.mode == "kubernetes"

    def caller(self, request: Request) -> Identity:
        """Who sent the request; 401 / 503 as HTTPException."""
        assert self.reviews is not None
        peer = request.client.host if request.client else None
        user = request.headers.get(self.settings.user_header, "").strip()
        if user and self.settings.trusted(peer):
            groups = [g.strip() for value in request.headers.getlist(self.settings.groups_header)
                      for g in value.split(",")]
            return Identity.of(user, groups)
        token = _bearer(request)
        if token is None:
            raise HTTPException(401, UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"})
        try:
            who = self.reviews.authenticate(token)
        except ReviewUnavailable as exc:
            log.warning("TokenReview failed: %s", exc)  # names no token
            raise HTTPException(503, UNAVAILABLE) from None
        if who is None:
            raise HTTPException(401, UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"})
        return who

    def namespaces(self) -> frozenset[str]:
        """The namespaces the watchdog knows: the cluster index's live ones, the ledger's and the alerts'."""
        found, known = self.known.get("")
        if found and known is not None:
            return known
        names = {n for n in self.live_namespaces() if n}
        if self.engine is not None:
            try:
                with Session(self.engine) as session:
                    for column in (JobRun.namespace, Alert.namespace):  # of every cluster: lists read the fleet
                        names.update(n for n in session.scalars(fleet(select(distinct(column)))) if n)
            except SQLAlchemyError as exc:
                log.warning("known namespaces: database error %s", type(exc).__name__)
                raise HTTPException(503, "database unavailable") from None
        known = frozenset(names)
        self.known.put("", known)
        return known

    def scope_of(self, who: Identity) -> Scope:
        found, scope = self.scopes.get(who)
        if found:
            return scope
        reviews = self.reviews
        assert reviews is not None
        try:
            if reviews.allowed(who, ""):
                scope = None
            else:  # a first look at many namespaces: a few reviews at a time, not one after another
                names = sorted(self.namespaces())
                with ThreadPoolExecutor(max_workers=max(1, min(REVIEWS_AT_ONCE, len(names)))) as pool:
                    answers = list(pool.map(lambda name: reviews.allowed(who, name), names))
                scope = frozenset(name for name, yes in zip(names, answers, strict=True) if yes)
        except ReviewUnavailable as exc:
            log.warning("SubjectAccessReview failed: %s", exc)
            raise HTTPException(503, UNAVAILABLE) from None
        self.scopes.put(who, scope)
        return scope

    def scope(self, request: Request) -> Scope:
        """The FastAPI dependency of every read: None (every namespace) or the namespaces the caller may list."""
        if not self.on:
            return None
        return self.scope_of(self.caller(request))

    def cluster_wide(self, request: Request) -> None:
        """The dependency of reads that cannot be split by namespace (queue capability plans): 403 unless the
        caller may list jobs in every namespace."""
        if self.scope(request) is not None:
            raise HTTPException(403, CLUSTER_WIDE)


def token_mode() -> Tenancy:
    """Today's behaviour: every read open (apart from api_read_token's)."""
    return Tenancy(AuthSettings())


def check_reads_scoped(app: FastAPI, tenancy: Tenancy, open_paths: frozenset[str] = OPEN_PATHS) -> None:
    """Refuse an app in which some GET route does not depend on the tenancy (its scope or cluster_wide), so a
    read added later cannot show every namespace by accident. `open_paths`: probes, /metrics, the docs."""
    for route in route_table(app):
        if route.methods & {"GET"} and route.path not in open_paths and not (
                {tenancy.scope, tenancy.cluster_wide} & set(route.dependencies)):
            raise RuntimeError(f"GET {route.path} must depend on the tenancy's scope")
