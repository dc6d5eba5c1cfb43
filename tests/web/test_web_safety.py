"""The viewer's guarantees against a hostile network and a changing disk: Host allow-lists (also
on IPv6 and on all interfaces), cross-origin state changes refused, stalled connections cut
off, too many connections refused, and an index re-fitted under a running server.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import numpy as np
import pytest

from repinterp import RepresentativeInterpreter
from repinterp.cli.parser import build_parser
from repinterp.web import create_app, serve
from repinterp.web.server import allowed_names

from .test_web import png_bytes, running, small_app

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def workspace():
    # A workspace of this module's own (small_app is cached and shared with test_web): the refit
    # test saves it into a folder that it then overwrites.
    return small_app.__wrapped__().state.viewer.workspace


# ----------------------------------------------------------------------------- Host
def test_allowed_names_of_a_server():
    assert allowed_names("127.0.0.1") == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_names("::1") == ["[::1]", "127.0.0.1", "localhost"]
    assert allowed_names("0.0.0.0", ["Viewer.LAN", "::2", "10.0.0.5:8080"]) == [
        "0.0.0.0",
        "127.0.0.1",
        "localhost",
        "[::1]",
        "viewer.lan",
        "[::2]",
        "10.0.0.5",
    ]
    args = build_parser().parse_args(
        ["serve", "--index", "i", "--allowed-host", "a.lan", "--allowed-host", "b"]
    )
    assert args.allowed_host == ["a.lan", "b"]
    assert build_parser().parse_args(["serve", "--index", "i"]).allowed_host == []


def test_all_interfaces_keep_a_host_allow_list(workspace):
    app = create_app(workspace, n_regions=1, allowed_hosts=allowed_names("0.0.0.0", ["my.lan"]))
    with running(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        for host in ("evil.com", "evil.com:80", "my.lan.evil.com", "10.1.2.3"):
            assert client.get("/api/info", headers={"Host": host}).status_code == 400, host
        for host in ("my.lan:8000", "0.0.0.0:8000", "localhost", "[::1]:1"):
            assert client.get("/api/info", headers={"Host": host}).status_code == 200, host
    assert app.state.viewer.wait_for_regions(60)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_ipv6_loopback_serves_the_page(workspace):
    app = create_app(workspace, n_regions=1, allowed_hosts=allowed_names("::1"))
    with running(app, host="::1") as base:
        assert base.startswith("http://[::1]:")
        page = httpx.get(base + "/", timeout=30)
        assert page.status_code == 200 and "repinterp viewer" in page.text
        assert httpx.get(base + "/api/info", timeout=30).json()["n_reference"] == 4000
        spoofed = httpx.get(base + "/api/info", headers={"Host": "evil.example"}, timeout=30)
        assert spoofed.status_code == 400
    assert app.state.viewer.wait_for_regions(60)


def test_serve_refuses_a_port_out_of_range(tmp_path):
    for port in (70000, -1):
        with pytest.raises(ValueError, match=rf"^port must lie in \[0, 65535\], got {port}$"):
            serve(tmp_path / "no-such-index", port=port)


# ----------------------------------------------------------------------------- Origin
def test_cross_origin_state_changes_are_refused():
    app = small_app()
    viewer = app.state.viewer
    body = png_bytes(np.eye(28))
    with running(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        before = dict(viewer._uploads)
        refused = [
            {"Origin": "http://evil.example", "Content-Type": "text/plain"},
            {"Origin": "null", "Content-Type": "text/plain"},
            {"Origin": base.replace("127.0.0.1", "localhost")},
            {"Origin": base + ".evil.example"},
            {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
            {"Sec-Fetch-Site": "same-site"},
        ]
        for headers in refused:
            response = client.post("/api/upload", content=body, headers=headers)
            assert response.status_code == 403, headers
            assert response.json()["error"].startswith("cross-origin request refused")
        assert viewer._uploads == before, "a refused request changed nothing"
        for headers in ({"Origin": base}, {"Sec-Fetch-Site": "same-origin"}, {}):
            assert client.post("/api/upload", content=body, headers=headers).status_code == 200
        reading = client.get("/api/info", headers={"Origin": "http://evil.example"})
        assert reading.status_code == 200 and "access-control-allow-origin" not in reading.headers


# ----------------------------------------------------------------------------- connections
def _read_all(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection (``b"reset"`` if it resets
    it: a closed socket with unread data); raises on ``timeout``."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        return data or b"reset"
    return data


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (headers and a ``Content-Length`` body) from a kept-alive socket."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return data


def test_stalled_and_surplus_connections_are_closed():
    timeout, cap = 1.0, 12
    with running(small_app(), request_timeout=timeout, max_connections=cap) as base:
        port = int(base.rsplit(":", 1)[1])
        start = time.monotonic()
        stalled: list[tuple[str, socket.socket]] = []
        for n in range(30):
            sock = socket.create_connection(("127.0.0.1", port))
            kind = ("silent", "headers", "body")[n % 3]
            if kind == "headers":
                sock.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow:")
            elif kind == "body":
                sock.sendall(
                    b"POST /api/upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Length: 1000\r\n\r\n" + b"x" * 10
                )
            stalled.append((kind, sock))
            time.sleep(0.01)
        answers = []
        for kind, sock in stalled:
            with sock:
                answer = _read_all(sock, timeout + 5)
            answers.append(answer.split(b"\r\n", 1)[0])
            if answer.startswith(b"HTTP/1.1 408"):
                assert b"not complete 1 s after it began" in answer, kind
        assert time.monotonic() - start < timeout + 4, "every stalled connection was closed"
        assert answers[:cap] == [b"HTTP/1.1 408 Request Timeout"] * cap
        assert set(answers[cap:]) <= {b"HTTP/1.1 503 Service Unavailable", b"reset"}

        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            time.sleep(timeout / 3)  # slow, but complete in time
            sock.sendall(b"\r\n")
            assert _read_response(sock).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /api/info HTTP/1.1\r\n")  # the next request on it stalls
            assert b"HTTP/1.1 408" in _read_all(sock, timeout + 5)
        assert httpx.get(base + "/api/info", timeout=30).status_code == 200


# ----------------------------------------------------------------------------- re-fit
def test_a_refit_under_a_running_server_changes_nothing_it_serves(workspace, tmp_path):
    folder = tmp_path / "index"
    workspace.interpreter.save(folder)
    app = create_app(folder, n_regions=2)
    viewer = app.state.viewer
    assert viewer.wait_for_regions(60)
    model = workspace.interpreter.model
    images = workspace.normalization(workspace.reference_pixels(range(300)))
    other = RepresentativeInterpreter(model, "features.7", n_boundaries=5, progress=False)
    with running(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        before = client.get("/api/explain/r3000").json()
        other.fit(images, keep_features=True).save(folder)  # replaces the folder: 300 images
        assert json.loads((folder / "manifest.json").read_text())["n_reference"] == 300
        for key in ("r3000", "r3999", "r17"):
            response = client.get(f"/api/explain/{key}")
            assert response.status_code == 200, response.text
            e = workspace.interpreter.explain_reference([int(key[1:])])[0]
            data = response.json()
            assert data["boundaries"] == e.boundaries.tolist()
            assert data["representativeness"] == e.representativeness
            heat = client.get(f"/api/image/r12.png?heat={key}")
            assert heat.status_code == 200
        assert client.get("/api/explain/r3000").json() == before
