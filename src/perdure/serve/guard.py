"""The ASGI layer in front of every route: authentication, cross-site checks, and headers
(a strict Content-Security-Policy; never cached: it shows live state)."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from perdure.serve.auth import Auth, cross_site

STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # no-referrer makes form posts "Origin: null"
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
# Reachable without a credential: the login form and what it needs to render.
PUBLIC = {("GET", "/login"), ("POST", "/login"), ("GET", "/static/style.css"),
          ("GET", "/static/icon.svg"), ("GET", "/favicon.ico")}
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
UNAUTHORIZED = ("authentication required: send `Authorization: Bearer <token>` (the token is "
                "in <state dir>/api-token) or log in at /login")


def login_page(message: str = "") -> bytes:
    """The login form; `message` is one of ours (never user input), shown above the form."""
    page = (STATIC / "login.html").read_text()
    text = f'<p class="login-error" role="alert">{message}</p>' if message else ""
    return page.replace("<!--message-->", text).encode()


class Guard:
    """Refuses unauthenticated requests (401) and cross-site state changes (403)."""

    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app, self.auth = app, auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        conn = HTTPConnection(scope)
        method, path = scope["method"], scope["path"]
        if (method if method != "HEAD" else "GET", path) in PUBLIC:
            await self.app(scope, receive, send)
            return
        who = self.auth.identify(conn.headers, conn.cookies)
        if who is None:
            await _refuse_unauthenticated(conn, send)
            return
        if who == "cookie" and method not in SAFE_METHODS:
            why = cross_site(conn.headers, conn.headers.get("host", ""))
            if why is not None:
                await _reply(send, 403, json.dumps({"detail": why}).encode(), "application/json")
                return
        await self.app(scope, receive, send)


async def _refuse_unauthenticated(conn: HTTPConnection, send: Send) -> None:
    wants_page = conn.scope["method"] == "GET" and "text/html" in conn.headers.get("accept", "")
    if wants_page:  # a browser: the login form, still with status 401
        await _reply(send, 401, login_page(), "text/html; charset=utf-8")
        return
    await _reply(send, 401, json.dumps({"detail": UNAUTHORIZED}).encode(), "application/json",
                 [(b"www-authenticate", b'Bearer realm="perdure"')])


async def _reply(send: Send, status: int, body: bytes, content_type: str,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", content_type.encode()),
               (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _with_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {k.lower() for k, _ in message.get("headers", [])}
            message["headers"] = [*message.get("headers", []),
                                  *((k, v) for k, v in HEADERS if k not in names)]
        await send(message)
    return wrapped
