"""The ASGI app of `perdure serve`: the API, the dashboard's files, login, /metrics."""

from __future__ import annotations

import sys
import traceback
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST

import perdure
from perdure.core.spec import JobSpec
from perdure.serve.api import router
from perdure.serve.auth import COOKIE, SESSION_SECONDS, cross_site
from perdure.serve.context import ServeContext
from perdure.serve.guard import STATIC, Guard, login_page
from perdure.serve.limits import BodyLimit


def create_app(ctx: ServeContext) -> FastAPI:
    app = FastAPI(title="perdure", version=getattr(perdure, "__version__", "0"),
                  description="Jobs, events, logs, commands and nodes of a perdure state dir. "
                              "Authenticate with `Authorization: Bearer <token>` (the token is "
                              "in <state dir>/api-token).",
                  docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.ctx = ctx
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_exception_handler(Exception, _internal_error)
    _pages(app, ctx)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(BodyLimit)  # inside the guard: its 413 gets the same headers
    app.add_middleware(Guard, auth=ctx.auth)
    return app


def _pages(app: FastAPI, ctx: ServeContext) -> None:
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        return FileResponse(STATIC / "icon.svg", media_type="image/svg+xml")

    @app.get("/login", include_in_schema=False)
    def login_form() -> Response:
        return Response(login_page(), media_type="text/html; charset=utf-8")

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        why = cross_site({**request.headers, "x-perdure-csrf": "1"},
                         request.headers.get("host", ""))
        body = await request.body()  # at most MAX_LOGIN_BYTES: BodyLimit saw to it
        if why is not None:
            return Response(login_page("This login did not come from this page."), 403,
                            media_type="text/html; charset=utf-8")
        given = parse_qs(body.decode(errors="replace")).get("token", [""])[0].strip()
        if not ctx.auth.token_ok(given):
            return Response(login_page("Wrong token. It is in the api-token file of the "
                                       "state dir."), 401, media_type="text/html; charset=utf-8")
        page = RedirectResponse("/", status_code=303)
        page.set_cookie(COOKIE, ctx.auth.new_session(), max_age=SESSION_SECONDS,
                        httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
        return page

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        # ended in the server: deleting the browser's cookie alone would leave it valid
        ctx.auth.end_session(request.cookies.get(COOKIE, ""))
        page = RedirectResponse("/login", status_code=303)
        page.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return page

    @app.get("/metrics", summary="Prometheus metrics (text format)",
             responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}})
    def metrics() -> Response:
        return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    """A bug of ours: the trace goes to the server's stderr, never into the response."""
    traceback.print_exception(exc, file=sys.stderr)
    return JSONResponse({"detail": "internal error; the server's log has the details"}, 500)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the job spec's (POST /jobs reads its body itself: YAML or JSON)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                             description=app.description)
        spec = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(spec.pop("$defs", {}))
        components["JobSpec"] = spec
        app.openapi_schema = schema
    return app.openapi_schema
