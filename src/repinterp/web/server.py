"""Serving the viewer with uvicorn, with limits on what a client can hold.

uvicorn times out idle keep-alive connections, but waits forever for a request that never
finishes arriving (headers or body sent a byte at a time, or not at all), and accepts any number
of connections. :class:`GuardedH11Protocol` closes a connection whose request is not complete
``request_timeout`` seconds after it began (answering 408 when it still can), and answers 503
and closes any connection beyond ``max_connections``.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterable
from pathlib import Path

import h11
import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol

from .app import LOCAL_HOSTS, create_app, host_name
from .viewer import DEFAULT_REGIONS

__all__ = [
    "MAX_CONNECTIONS",
    "REQUEST_TIMEOUT",
    "GuardedH11Protocol",
    "allowed_names",
    "serve",
    "server_config",
]

REQUEST_TIMEOUT = 20.0
MAX_CONNECTIONS = 128
KEEP_ALIVE = 5
MAX_HEADER_BYTES = 16 * 1024
_RECEIVING = (h11.IDLE, h11.SEND_BODY)  # the client's states while a request is arriving


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's arrival and a connection cap
    (the class attributes; :func:`server_config` sets them)."""

    request_timeout: float = REQUEST_TIMEOUT
    max_connections: int = MAX_CONNECTIONS

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        super().connection_made(transport)
        self._deadline = None
        if len(self.connections) > self.max_connections:
            self._refuse(503, f"more than {self.max_connections} connections: try again later")
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self.conn.their_state in _RECEIVING:
            self._arm()  # a new request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in _RECEIVING:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.request_timeout, self._stalled)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _stalled(self) -> None:
        self._deadline = None
        timeout = f"{self.request_timeout:g}"
        self._refuse(408, f"the request was not complete {timeout} s after it began")

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with a JSON error, unless a response has begun, and close."""
        if self.transport.is_closing():
            return
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            body = json.dumps({"error": message}).encode()
            reason = {408: "Request Timeout", 503: "Service Unavailable"}[status]
            self.transport.write(
                f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
        self.transport.close()


def server_config(
    app: Starlette,
    quiet: bool = False,
    request_timeout: float = REQUEST_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> uvicorn.Config:
    """A uvicorn configuration for the viewer's app, with :class:`GuardedH11Protocol`.

    Args:
        app: the app (see :func:`repinterp.web.create_app`).
        quiet: log warnings only.
        request_timeout: seconds a request (headers and body) may take to arrive.
        max_connections: connections held at once; more are answered 503 and closed.
    """
    protocol = type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"request_timeout": request_timeout, "max_connections": max_connections},
    )
    return uvicorn.Config(
        app,
        http=protocol,
        ws="none",
        log_level="warning" if quiet else "info",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


def allowed_names(host: str, extra: Iterable[str] = ()) -> list[str]:
    """The host names a server bound to ``host`` accepts in ``Host``: ``host`` itself,
    :data:`~repinterp.web.app.LOCAL_HOSTS` and ``extra`` (IPv6 addresses in brackets)."""
    return list(dict.fromkeys([host_name(host), *LOCAL_HOSTS, *map(host_name, extra)]))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    index_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    quiet: bool = False,
    *,
    n_regions: int = DEFAULT_REGIONS,
    seed: int = 0,
    device: str | None = None,
    allowed_hosts: Iterable[str] = (),
    weights: str | Path | None = None,
) -> None:
    """Serve the viewer of an index folder at ``http://host:port/`` until interrupted.

    The port is bound before the index is opened, so a busy port fails at once; port 0 picks a
    free one (the printed address says which). Connections made meanwhile wait. Requests must
    name the server (``Host``) as ``host``, ``localhost``, ``127.0.0.1``, ``[::1]`` or one of
    ``allowed_hosts``. ``weights`` is the model's weights file when the index folder was moved.

    Raises:
        ValueError: a port outside [0, 65535].
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"port must lie in [0, 65535], got {port}")
    names = allowed_names(host, allowed_hosts)
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
            allowed_hosts=names,
            weights=weights,
        )
        url = f"http://{host_name(host)}:{sock.getsockname()[1]}/"
        print(f"repinterp viewer: {url} (Ctrl+C to stop)", flush=True)
        if not _is_loopback(host):
            print(
                f"warning: listening on {host}: anyone who can reach this machine can use it; "
                f"requests must name it {', '.join(names)} (--allowed-host adds a name)",
                flush=True,
            )
        try:
            uvicorn.Server(server_config(app, quiet)).run(sockets=[sock])
        except KeyboardInterrupt:  # uvicorn re-raises the Ctrl+C it has handled
            pass
