"""Request body limits per route, enforced as the bytes arrive, before any route reads them.

A declared Content-Length over the cap is refused before a byte is read, any other body the
moment it passes the cap: 413 with `Connection: close`, so nothing past the cap is buffered.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_SPEC_BYTES = 256 * 1024  # POST /api/v1/jobs: a job spec
MAX_LOGIN_BYTES = 4096  # POST /login: the login form
DEFAULT_BODY_BYTES = 4096  # every other route (none of them reads a body)
BODY_LIMITS = {("POST", "/api/v1/jobs"): MAX_SPEC_BYTES, ("POST", "/login"): MAX_LOGIN_BYTES}


class BodyTooLarge(Exception):
    """A request body passed its route's cap while it was being read."""


class BodyLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = BODY_LIMITS.get((scope["method"], scope["path"].rstrip("/") or "/"),
                                DEFAULT_BODY_BYTES)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(send, limit)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:  # a route that answered before reading all of it: nothing to add
                return
            await _too_large(send, limit)


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"detail": f"the request body is over {limit} bytes, the most this "
                                 "route takes"}).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
