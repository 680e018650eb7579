"""Who may call what: the bearer-token dependency of every write (and of the reads that show people's data),
and the check that no non-GET route escaped it.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import fastapi.routing
from fastapi import Depends, FastAPI, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from volcano_monitor.watchdog.config import Settings
from volcano_monitor.watchdog.views.schema import ErrorOut

_bearer = HTTPBearer(auto_error=False, description="The api_token setting, required by every non-GET endpoint.")


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "Missing or wrong bearer token."},
    403: {"model": ErrorOut, "description": "No api_token is configured: writes are refused."},
}


def token_guard(settings: Settings, *, reading: bool = False) -> Callable[[HTTPAuthorizationCredentials | None], None]:
    """The dependency every non-GET route carries (`api_token`), or with `reading` the GETs that show
    people's data (`api_read_token` or `api_token`). Compares bytes in constant time (hmac.compare_digest
    on str rejects non-ASCII, and a header is whatever the client sends)."""
    tokens = [settings.api_token, settings.api_read_token] if reading else [settings.api_token]
    expected = [token.get_secret_value().encode() for token in tokens if token and token.get_secret_value()]

    def require_token(credentials: Credentials) -> None:
        if not expected:
            raise HTTPException(403, "no api_read_token or api_token configured" if reading
                                else "no api_token configured")
        given = credentials.credentials.encode("utf-8", "surrogateescape") if credentials else b""
        matches = [hmac.compare_digest(given, secret) for secret in expected]  # every one: constant time
        if not given or not any(matches):
            raise HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})

    return require_token


@dataclass(frozen=True)
class RouteInfo:
    path: str
    methods: frozenset[str]
    dependencies: tuple[Callable[..., Any], ...]  # what the route's dependencies call, router-level ones included


def route_table(app: FastAPI) -> list[RouteInfo]:
    """Every route as it is served. Recent FastAPI keeps included routers as lazy entries and exposes the
    effective routes through `iter_route_contexts`; older FastAPI copied them into `app.routes`."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    out = []
    for route in iterate(app.routes) if iterate is not None else app.routes:
        dependant = getattr(route, "dependant", None)
        calls = tuple(d.call for d in dependant.dependencies if d.call is not None) if dependant is not None else ()
        out.append(RouteInfo(str(getattr(route, "path", "")), frozenset(getattr(route, "methods", None) or ()), calls))
    return out


def check_writes_guarded(app: FastAPI, guard: Callable[..., Any]) -> None:
    """Refuse an app in which some non-GET route does not depend on the token guard."""
    for route in route_table(app):
        if route.methods - {"GET", "HEAD"} and guard not in route.dependencies:
            raise RuntimeError(f"{sorted(route.methods)} {route.path} must be on the token-guarded router")
