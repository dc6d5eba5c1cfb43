"""The viewer over HTTP: a Starlette app serving a JSON API, PNG images and one static page.

The three static files are read into memory when the app is made; no request names a file.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..workspace import Workspace, open_index
from .viewer import DEFAULT_REGIONS, MAX_UPLOAD_BYTES, BadRequest, NotFound, Viewer

__all__ = ["LOOPBACK_HOSTS", "create_app", "serve"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
logger = logging.getLogger(__name__)
STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
IMMUTABLE = "public, max-age=31536000, immutable"
PRIVATE = "private, max-age=3600"
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; "
        b"form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response; the CSP keeps the page from loading
    anything from another origin."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _error(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=status)

    return handler


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _read_upload(request: Request) -> bytes:
    """The request body, refused as soon as it passes :data:`MAX_UPLOAD_BYTES`."""
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
    allowed_hosts: tuple[str, ...] | list[str] = LOOPBACK_HOSTS,
    weights: str | Path | None = None,
) -> Starlette:
    """The viewer's ASGI app for a workspace or an index folder.

    Args:
        source: a :class:`~repinterp.workspace.Workspace`, or an index folder to open.
        n_regions: regions in the gallery (k-means, computed once in the background).
        seed: seed of the k-means.
        device: torch device when opening a folder; None for CPU.
        allowed_hosts: ``Host`` headers accepted (guards against DNS rebinding); ``("*",)``
            accepts any.
        weights: the model's weights file when opening a moved index folder.

    ``app.state.viewer`` is the :class:`~repinterp.web.viewer.Viewer` behind the routes.
    """
    if not isinstance(source, Workspace):
        source = open_index(source, device=device, progress=False, weights=weights)
    viewer = Viewer(source, n_regions=n_regions, seed=seed)

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

    def page(name: str) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            return Response(pages[name], media_type=STATIC[name])

        return endpoint

    def info(request: Request) -> JSONResponse:
        return JSONResponse(viewer.info())

    def regions(request: Request) -> JSONResponse:
        return JSONResponse(viewer.regions())

    def explain(request: Request) -> JSONResponse:
        query = request.query_params
        return JSONResponse(
            viewer.explanation(request.path_params["key"], query.get("offset"), query.get("limit"))
        )

    async def upload(request: Request) -> JSONResponse:
        data = await _read_upload(request)
        return JSONResponse(await run_in_threadpool(viewer.upload, data))

    def image(request: Request) -> Response:
        key, heat = request.path_params["key"], request.query_params.get("heat")
        data = viewer.png(key, heat)
        shared = all(name.startswith("r") for name in (key, heat) if name)
        cache = IMMUTABLE if shared else PRIVATE
        return Response(data, media_type="image/png", headers={"Cache-Control": cache})

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/", page("index.html")),
            *(Route(f"/static/{name}", page(name)) for name in STATIC if name != "index.html"),
            Route("/api/info", info),
            Route("/api/regions", regions),
            Route("/api/explain/{key}", explain),
            Route("/api/upload", upload, methods=["POST"]),
            Route("/api/image/{key}.png", image),
        ],
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
        ],
        exception_handlers={
            HTTPException: _http_error,
            NotFound: _error(404),
            BadRequest: _error(400),
        },
    )
    app.state.viewer = viewer
    return app


def serve(
    index_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    quiet: bool = False,
    *,
    n_regions: int = DEFAULT_REGIONS,
    seed: int = 0,
    device: str | None = None,
    weights: str | Path | None = None,
) -> None:
    """Serve the viewer of an index folder at ``http://host:port/`` until interrupted.

    The port is bound before the index is opened, so a busy port fails at once; port 0 picks a
    free one (the printed address says which). Connections made meanwhile wait.
    """
    import uvicorn

    loopback = host in LOOPBACK_HOSTS
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()
        if not quiet:
            print(f"opening {index_dir} …", flush=True)
        app = create_app(
            index_dir,
            n_regions=n_regions,
            seed=seed,
            device=device,
            allowed_hosts=LOOPBACK_HOSTS if loopback else ("*",),
            weights=weights,
        )
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{sock.getsockname()[1]}/"
        print(f"repinterp viewer: {url} (Ctrl+C to stop)", flush=True)
        if not loopback:
            print(f"warning: listening on {host}: anyone who can reach this machine can use it")
        config = uvicorn.Config(app, log_level="warning" if quiet else "info", access_log=False)
        try:
            uvicorn.Server(config).run(sockets=[sock])
        except KeyboardInterrupt:  # uvicorn re-raises the Ctrl+C it has handled
            pass
