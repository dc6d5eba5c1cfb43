"""Serving the viewer with uvicorn, with limits on what a client can hold.

uvicorn times out idle keep-alive connections, but waits forever for a request that never
finishes arriving (headers or body sent a byte at a time, or not at all) and for a client that
never reads what it is sent (pipelined requests whose responses are never read), and accepts any
number of connections. `GuardedH11Protocol` closes a connection whose request is not
complete ``request_timeout`` seconds after it began (answering 408 when it still can), cuts off
one whose client has left data unread for ``write_timeout`` seconds, and answers 503 to any
connection beyond ``max_connections``. A refused connection is closed gracefully: its answer,
then end of file, while what the client still sends is read and dropped for ``LINGER`` seconds,
so that the client reads the answer instead of a reset.
"""

from __future__ import annotations

import errno
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
    "WRITE_TIMEOUT",
    "GuardedH11Protocol",
    "allowed_names",
    "serve",
    "server_config",
]

REQUEST_TIMEOUT = 20.0
WRITE_TIMEOUT = 20.0
MAX_CONNECTIONS = 128
KEEP_ALIVE = 5
LINGER = 2.0
MAX_HEADER_BYTES = 16 * 1024
_RECEIVING = (h11.IDLE, h11.SEND_BODY)  # the client's states while a request is arriving
_BIND_ERRORS = {
    errno.EADDRINUSE: "the port is in use (another server?)",
    errno.EADDRNOTAVAIL: "not an address of this machine",
}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's arrival, one on the client's
    reading and a connection cap (the class attributes; `server_config` sets them)."""

    request_timeout: float = REQUEST_TIMEOUT
    write_timeout: float = WRITE_TIMEOUT
    max_connections: int = MAX_CONNECTIONS
    refused: bool = False  # answered and closing: not counted against the cap

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        super().connection_made(transport)
        self._deadline = self._unread = None
        # Every byte the kernel has not taken pauses writing, so the protocol hears of it.
        transport.set_write_buffer_limits(high=0)
        held = sum(not getattr(connection, "refused", False) for connection in self.connections)
        if held > self.max_connections:
            self._refuse(503, f"more than {self.max_connections} connections: try again later")
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # read and dropped until the connection closes
        if self._deadline is None and self.conn.their_state in _RECEIVING:
            self._arm()  # a new request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in _RECEIVING:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.resume_writing()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._unread is None:
            self._unread = self.loop.call_later(self.write_timeout, self._not_reading)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None

    def _not_reading(self) -> None:
        """The client left what it was sent unread for ``write_timeout`` s: cut it off."""
        self._unread = None
        self.transport.abort()

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
        """Answer ``status`` with a JSON error, unless a response has begun, then end of file;
        what the client still sends is dropped, and the connection closes ``LINGER`` s later."""
        if self.transport.is_closing():
            return
        self.refused = True
        self._disarm()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app hears of it; what it answers is dropped
            self.cycle.message_event.set()
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            body = json.dumps({"error": message}).encode()
            reason = {408: "Request Timeout", 503: "Service Unavailable"}[status]
            self.transport.write(
                f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
        self.transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(LINGER, self.transport.close)


def server_config(
    app: Starlette,
    quiet: bool = False,
    request_timeout: float = REQUEST_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    write_timeout: float = WRITE_TIMEOUT,
) -> uvicorn.Config:
    """A uvicorn configuration for the viewer's app, with `GuardedH11Protocol`.

    Args:
        app: the app (see `create_app`).
        quiet: log warnings only.
        request_timeout: seconds a request (headers and body) may take to arrive.
        max_connections: connections held at once; more are answered 503 and closed.
        write_timeout: seconds the client may leave what it was sent unread before its
            connection is cut off.
    """
    limits = {
        "request_timeout": request_timeout,
        "max_connections": max_connections,
        "write_timeout": write_timeout,
    }
    protocol = type("GuardedH11Protocol", (GuardedH11Protocol,), limits)
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
    `LOCAL_HOSTS` and ``extra`` (IPv6 addresses in brackets)."""
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
    free one (the printed address says which). Connections made meanwhile wait. ``host`` is a
    name or an address (an IPv6 one with or without brackets). Requests must name the server
    (``Host``) as ``host``, ``localhost``, ``127.0.0.1``, ``[::1]`` or one of ``allowed_hosts``.
    ``weights`` is the model's weights file when the index folder was moved.

    Raises:
        ValueError: a port outside [0, 65535], or one that cannot be listened on at ``host``
            (in use, an unknown host, an address of another machine).
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"port must lie in [0, 65535], got {port}")
    host = host.removeprefix("[").removesuffix("]") if host.startswith("[") else host
    names = allowed_names(host, allowed_hosts)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen()
        except OSError as exc:  # socket.gaierror (an unknown host) is one too
            reason = _BIND_ERRORS.get(exc.errno or 0, exc.strerror or str(exc))
            raise ValueError(f"cannot listen on {host_name(host)}:{port}: {reason}") from None
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
