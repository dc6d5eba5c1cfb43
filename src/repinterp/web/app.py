"""The viewer over HTTP: a Starlette app serving a JSON API, PNG images and one static page.

The static files are read into memory when the app is made; no request names a file. Every
request's ``Host`` must be on an allow-list (DNS rebinding), a request that changes state (an
upload) must come from the viewer's own page, not from another site's (CSRF), and a browser
must not send an API request from another site's page (a foreign ``<img>`` must not make the
viewer compute). Costly requests (comparisons, CAM heat maps, exports) wait their turn in a
bounded `ComputeQueue`; the page and the cheap routes need no
thread, so a queue of them never delays the page.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..workspace import Workspace, open_index
from .compare import CAMS
from .image_codec import MAX_UPLOAD_BYTES
from .limits import Busy, ComputeQueue
from .parameters import BadRequest, NotFound
from .viewer import DEFAULT_REGIONS, Changed, Viewer

__all__ = ["LOCAL_HOSTS", "create_app", "host_name"]

# Host names that always reach this machine's loopback: accepted by default.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
logger = logging.getLogger(__name__)
STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
IMMUTABLE = "public, max-age=31536000, immutable"
PRIVATE = "private, max-age=3600"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; "
        b"form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def host_name(value: str) -> str:
    """A host as a ``Host`` header names it, without its port, lower-case; an IPv6 address
    in brackets (``::1`` and ``[::1]:8000`` both give ``[::1]``)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    if value.count(":") > 1:  # a bare IPv6 address
        return f"[{value}]"
    return value.partition(":")[0]


class SecurityHeaders:
    """Adds `SECURITY_HEADERS` to every response; the CSP keeps the page from loading
    anything from another origin."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class OriginCheck:
    """Refuses (400) a request whose ``Host`` is not allowed, and (403) a state-changing request
    (any method but GET, HEAD, OPTIONS) sent by a page of another origin: its ``Origin`` is not
    the viewer's own, or the browser says ``Sec-Fetch-Site: cross-site`` or ``same-site``. An
    API request (``/api/...``, any method) is refused (403) on the latter too: another site's
    ``<img>`` or ``fetch`` must not make the viewer compute.

    Clients that are not browsers (curl, httpx) send neither header and are served; a link to
    the page from another site still opens it.

    Args:
        app: the app behind.
        allowed_hosts: host names accepted in ``Host`` (see `host_name`); ``"*"`` accepts
            any.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = {host_name(h) for h in allowed_hosts}

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if "*" not in self.allowed and host_name(host) not in self.allowed:
            return 400, f"Invalid host header: {host!r} is not one of this viewer's names"
        changes = scope["method"] not in SAFE_METHODS
        own = f"{scope.get('scheme', 'http')}://{host}".lower()
        origin = headers.get("origin")
        if changes and origin is not None and origin.lower() != own:
            return 403, f"cross-origin request refused: Origin {origin} is not this viewer ({own})"
        site = headers.get("sec-fetch-site")
        foreign = site is not None and site not in ("same-origin", "none")
        if foreign and (changes or scope["path"].startswith("/api/")):
            return 403, f"cross-origin request refused: Sec-Fetch-Site is {site}"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        await JSONResponse({"error": message}, status_code=status)(scope, receive, send)


def _error(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=status)

    return handler


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _disconnected(request: Request, exc: Exception) -> Response:
    """The client went away (or was cut off for stalling) mid-request: nothing to answer."""
    return Response(status_code=408)


async def _read_upload(request: Request) -> bytes:
    """The request body, refused as soon as it passes `MAX_UPLOAD_BYTES`."""
    if request.headers.get("content-type", "").startswith("multipart/"):
        raise BadRequest(
            "send the image file itself as the request body "
            "(e.g. curl --data-binary @digit.png), not a form"
        )
    too_large = f"the upload is larger than {MAX_UPLOAD_BYTES} bytes"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES:
        raise BadRequest(too_large)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_UPLOAD_BYTES:
            raise BadRequest(too_large)
    return bytes(body)


def create_app(
    source: Workspace | str | Path,
    *,
    n_regions: int = DEFAULT_REGIONS,
    seed: int = 0,
    device: str | None = None,
    allowed_hosts: Iterable[str] = LOCAL_HOSTS,
    weights: str | Path | None = None,
) -> Starlette:
    """The viewer's ASGI app for a workspace or an index folder.

    Args:
        source: a [`Workspace`][repinterp.workspace.Workspace], or an index folder to open.
        n_regions: k-means regions behind the gallery (computed once in the background).
        seed: seed of the k-means.
        device: torch device when opening a folder; None for CPU.
        allowed_hosts: host names accepted in the ``Host`` header (guards against DNS
            rebinding), with or without a port; ``("*",)`` accepts any.
        weights: the model's weights file when opening a moved index folder.

    ``app.state.viewer`` is the `Viewer` behind the routes,
    ``app.state.compute`` the `ComputeQueue` of costly requests.
    """
    if not isinstance(source, Workspace):
        source = open_index(source, device=device, progress=False, weights=weights)
    viewer = Viewer(source, n_regions=n_regions, seed=seed)
    compute = ComputeQueue(model=viewer.interpreter.model)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        # The k-means thread must not outlive the interpreter: native code running during
        # interpreter shutdown can crash the process.
        if not viewer.wait_for_regions(0):
            logger.warning("waiting for the regions (k-means) to be computed before stopping")
        await run_in_threadpool(viewer.wait_for_regions)

    static = resources.files(__package__) / "static"
    pages = {name: (static / name).read_bytes() for name in STATIC}

    # The page and the cheap routes are async: they need no worker thread, so they are served
    # however many requests wait for one.
    def page(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return Response(pages[name], media_type=STATIC[name])

        return endpoint

    async def info(request: Request) -> JSONResponse:
        return JSONResponse(viewer.info())

    async def regions(request: Request) -> JSONResponse:
        return JSONResponse(viewer.regions())

    def explain(request: Request) -> JSONResponse:
        query = request.query_params
        return JSONResponse(
            viewer.explanation(request.path_params["key"], query.get("offset"), query.get("limit"))
        )

    async def upload(request: Request) -> JSONResponse:
        data = await _read_upload(request)
        return JSONResponse(await run_in_threadpool(viewer.upload, data))

    async def image(request: Request) -> Response:
        key, query = request.path_params["key"], request.query_params
        heat, method = query.get("heat"), query.get("method")
        options = (query.get("cmap"), query.get("contrast"))
        draw = functools.partial(viewer.png, key, heat, method, *options)
        if heat and method in CAMS:  # a CAM's weights on ``heat`` may have to be computed
            data = await compute.run(request.receive, draw)
        else:
            data = await run_in_threadpool(draw)
        shared = all(name.startswith("r") for name in (key, heat) if name)
        cache = IMMUTABLE if shared else PRIVATE
        return Response(data, media_type="image/png", headers={"Cache-Control": cache})

    async def compare(request: Request) -> JSONResponse:
        query = request.query_params
        work = functools.partial(
            viewer.compare, request.path_params["key"], query.get("method"), query.get("k")
        )
        return JSONResponse(await compute.run(request.receive, work))

    def export(kind: str, media_type: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            key, query = request.path_params["key"], request.query_params
            name = f"repinterp-{key}.{kind}"
            work = functools.partial(
                viewer.export, key, kind, query.get("opacity"), query.get("cmap")
            )
            return Response(
                await compute.run(request.receive, work),
                media_type=media_type,
                headers={"Content-Disposition": f'attachment; filename="{name}"'},
            )

        return endpoint

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/", page("index.html")),
            *(Route(f"/static/{name}", page(name)) for name in STATIC if name != "index.html"),
            Route("/favicon.ico", page("favicon.svg")),
            Route("/api/info", info),
            Route("/api/regions", regions),
            Route("/api/explain/{key}", explain),
            Route("/api/upload", upload, methods=["POST"]),
            Route("/api/image/{key}.png", image),
            Route("/api/compare/{key}", compare),
            Route("/api/export/{key}.png", export("png", "image/png")),
            Route("/api/export/{key}.json", export("json", "application/json")),
        ],
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(OriginCheck, allowed_hosts=allowed_hosts),
        ],
        exception_handlers={
            HTTPException: _http_error,
            NotFound: _error(404),
            BadRequest: _error(400),
            Changed: _error(409),
            Busy: _error(503),
            ClientDisconnect: _disconnected,
        },
    )
    app.state.viewer = viewer
    app.state.compute = compute
    return app
