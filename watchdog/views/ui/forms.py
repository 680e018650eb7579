"""Who may see and do what in the web UI, with the API's tokens and the API's semantics.

Writes (resolve an alert, add a silence) are HTML forms with a token field. `FormTokenRoute` moves that
field into `Authorization: Bearer`, replacing whatever the browser sends on its own (a cached Basic
login of a reader must not authorize a write, nor may another site's form without the token), so the
route's dependency is the API's own `require_token` and `check_writes_guarded` sees it. A refusal is an
HTML page with the API's status code.

Pages that show people's data (notifications, silences, capability plans) ask for the read token the
way a browser can without JavaScript: HTTP Basic, any user name, the token as password (or a Bearer
header, as for /api/v1/notifications); it is checked by the API's reading guard.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qs

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials

from volcano_monitor.watchdog.views.ui.html import esc, page

REALM = 'Basic realm="volcano-watchdog (user: anything, password: api_read_token)", charset="UTF-8"'


def error_page(status: int, detail: object, headers: dict[str, str] | None = None) -> HTMLResponse:
    body = f'<div class="err">{esc(detail)}</div><p><a href="/">home</a></p>'
    return HTMLResponse(page(f"{status}: refused" if status in (401, 403) else f"{status}", body),
                        status_code=status, headers=headers)


def form_of(body: bytes) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body, first value of each field (JsonBodies has relabelled
    it JSON by now, so it is parsed here rather than by FastAPI)."""
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=50)
    return {name: values[0] for name, values in fields.items()}


class FormTokenRoute(APIRoute):
    """A UI form route: the `token` field becomes the bearer token; HTTP errors become HTML pages."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def with_form_token(request: Request) -> Response:
            body = await request.body()
            token = form_of(body).get("token", "").strip()
            headers = [(k, v) for k, v in request.scope["headers"] if k != b"authorization"]
            if token:
                headers.append((b"authorization", b"Bearer " + token.encode("utf-8", "surrogateescape")))

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            try:
                return await handle(Request(dict(request.scope, headers=headers), receive))
            except HTTPException as exc:
                return error_page(exc.status_code, exc.detail, {"Cache-Control": "no-store"})

        return with_form_token


def credentials_of(request: Request) -> HTTPAuthorizationCredentials | None:
    """The token a reader sent: Basic's password or a Bearer token."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return HTTPAuthorizationCredentials(scheme="Bearer", credentials=value.strip())
    if scheme.lower() == "basic" and value:
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8", "surrogateescape")
        except (binascii.Error, ValueError):
            return None
        return HTTPAuthorizationCredentials(scheme="Bearer", credentials=decoded.partition(":")[2])
    return None


def refused_reader(request: Request, guard: Callable[[HTTPAuthorizationCredentials | None], None]) -> Response | None:
    """None when the request carries the read token (or the write token); else the page saying so:
    401 with a Basic challenge (the browser asks), 403 when no token is configured at all."""
    try:
        guard(credentials_of(request))
    except HTTPException as exc:
        headers = {"WWW-Authenticate": REALM} if exc.status_code == 401 else None
        detail = (f"{exc.detail}: this page shows people's data; log in with any user name and the "
                  "api_read_token (or api_token) as password")
        return error_page(exc.status_code, detail, headers)
    return None
