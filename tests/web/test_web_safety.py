"""The viewer's guarantees against a hostile network and a changing disk: Host allow-lists (also
on IPv6 and on all interfaces), cross-origin state changes refused, stalled connections cut
off, too many connections refused, and an index re-fitted under a running server.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image

from repinterp import RepresentativeInterpreter
from repinterp.cli.parser import build_parser
from repinterp.core.config import FitConfig
from repinterp.data.datasets import ImageFormat
from repinterp.web import create_app, image_codec, serve
from repinterp.web.limits import Busy, ByteBudget
from repinterp.web.server import allowed_names
from repinterp.workspace import fit_workspace

from ..commandline import assert_one_line_error, run
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
        before = dict(viewer.images._uploads)
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
        assert viewer.images._uploads == before, "a refused request changed nothing"
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
        assert answers[cap:] == [b"HTTP/1.1 503 Service Unavailable"] * (30 - cap)

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


def _connect(port: int, request: bytes = b"", receive_buffer: int | None = None) -> socket.socket:
    """A loopback connection to ``port`` that has sent ``request``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def _get(path: str, close: bool = False) -> bytes:
    connection = "Connection: close\r\n" if close else ""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{connection}\r\n".encode()


def test_slow_readers_are_cut_off_and_surplus_connections_get_503():
    timeout, cap = 1.0, 6
    limits = {"request_timeout": timeout, "write_timeout": timeout, "max_connections": cap}
    with running(small_app(), **limits) as base:
        port = int(base.rsplit(":", 1)[1])
        # Pipelined requests for 200 x 25 KB, never read: more than the socket buffers hold.
        readers = [_connect(port, _get("/static/app.js") * 200, 4096) for _ in range(cap)]
        time.sleep(0.2)
        start = time.monotonic()
        try:
            for _ in range(3):  # the cap is full: answered, not reset
                with _connect(port) as sock:
                    for part in (b"GET /api/info HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n\r\n"):
                        time.sleep(0.1)  # sent after the answer came: still read, not reset
                        sock.sendall(part)
                    answer = _read_all(sock, 10)
                assert answer.startswith(b"HTTP/1.1 503 Service Unavailable"), answer[:40]
                assert b"more than 6 connections" in answer
            while (status := httpx.get(base + "/api/info", timeout=10).status_code) != 200:
                assert status == 503 and time.monotonic() - start < timeout + 5, status
                time.sleep(0.1)
        finally:
            for sock in readers:
                sock.close()
        print(f"slow readers cut off after {time.monotonic() - start:.1f} s")
        assert time.monotonic() - start > timeout / 2, "served only once they were cut off"


# ----------------------------------------------------------------------------- other sites
def test_api_requests_from_other_sites_are_refused():
    app = small_app()
    with running(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        paths = [
            "/api/image/r12.png?heat=r7&method=scorecam",
            "/api/compare/r7?method=scorecam",
            "/api/export/r7.png",
            "/api/explain/r7",
            "/api/info",
        ]
        for site in ("cross-site", "same-site"):
            for path in paths:
                response = client.get(path, headers={"Sec-Fetch-Site": site})
                assert response.status_code == 403, (site, path)
                assert response.json()["error"] == (
                    f"cross-origin request refused: Sec-Fetch-Site is {site}"
                )
        for site in ("same-origin", "none"):
            response = client.get("/api/image/r12.png?heat=r7", headers={"Sec-Fetch-Site": site})
            assert response.status_code == 200, site
        # a link from another site still opens the page
        assert client.get("/", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200


# ----------------------------------------------------------------------------- costly requests
def _status(sock: socket.socket) -> bytes:
    with sock:
        return _read_all(sock, 30).split(b"\r\n", 1)[0]


def test_costly_requests_wait_in_a_bounded_queue_and_never_delay_the_page(monkeypatch):
    app = small_app()
    queue = app.state.compute
    monkeypatch.setattr(queue, "length", 3)
    ran: list[str] = []

    def slow_compare(key: str, method: str | None, k: str | None = None) -> dict:
        ran.append(key)
        time.sleep(0.4)
        return {"key": key}

    monkeypatch.setattr(app.state.viewer, "compare", slow_compare)
    with running(app) as base:
        port = int(base.rsplit(":", 1)[1])

        def compare(n: int) -> socket.socket:
            return _connect(port, _get(f"/api/compare/r{n}", close=True))

        flood = [compare(n) for n in range(50)]
        time.sleep(0.2)
        start = time.monotonic()
        assert httpx.get(base + "/", timeout=30).status_code == 200
        page = time.monotonic() - start
        statuses = [_status(sock) for sock in flood]
        assert statuses.count(b"HTTP/1.1 200 OK") == 1 + 3, "one computing, three waiting"
        assert statuses.count(b"HTTP/1.1 503 Service Unavailable") == 50 - 4
        assert len(ran) == 4
        print(f"page served in {1000 * page:.0f} ms under 50 compares")
        assert page < 1.0

        # a client that goes away before its turn leaves the queue: its compare never runs
        busy = compare(1000)
        time.sleep(0.1)
        compare(1001).close()
        assert _status(busy) == b"HTTP/1.1 200 OK"
        time.sleep(0.5)
        assert ran[4:] == ["r1000"]

        # a request whose turn does not come in time is refused
        monkeypatch.setattr(queue, "timeout", 0.1)
        busy = compare(1002)
        time.sleep(0.1)
        late = httpx.get(base + "/api/compare/r1003", timeout=30)
        assert late.status_code == 503 and "busy for 0.1 s" in late.json()["error"]
        assert _status(busy) == b"HTTP/1.1 200 OK"
    assert ran[5:] == ["r1002"] and queue.waiting == 0


def test_a_compare_whose_client_leaves_stops_at_the_next_forward_pass():
    app = small_app()
    model = app.state.viewer.interpreter.model
    calls: list[str] = []
    hooks_before = len(model._forward_pre_hooks)

    def slow(module, args) -> None:  # runs before the queue's own hook, so counts each pass
        calls.append(threading.current_thread().name)
        time.sleep(0.25)

    handle = model.register_forward_pre_hook(slow)
    try:
        with running(app) as base:
            port = int(base.rsplit(":", 1)[1])
            leaving = _connect(port, _get("/api/compare/r3?method=scorecam&k=2", close=True))
            time.sleep(0.35)  # in the second of the compare's 4 passes (each >= 0.25 s)
            leaving.close()
            time.sleep(1.5)
            stopped = len(calls)
            time.sleep(1.0)
            assert len(calls) == stopped, "the pass went on after its client left"
            assert len(model._forward_pre_hooks) == hooks_before + 1  # the queue's hook is gone
            # the queue is free, and a compare that stays is computed in full
            calls.clear()
            answer = httpx.get(base + "/api/compare/r4?method=scorecam&k=2", timeout=120)
            assert answer.status_code == 200 and answer.json()["items"][0]["key"] == "r4"
            full = len(calls)
        print(f"forward passes: {stopped} before stopping, {full} for a whole compare")
        assert stopped < full
    finally:
        handle.remove()


# ----------------------------------------------------------------------------- uploads
def test_uploads_decoded_at_once_are_bounded_in_bytes(monkeypatch):
    largest = image_codec.MAX_UPLOAD_PIXELS * image_codec.DECODE_BYTES_PER_PIXEL
    assert image_codec.DECODING.total >= largest, "the largest upload accepted fits"
    viewer = small_app().state.viewer
    cost = 28 * 28 * image_codec.DECODE_BYTES_PER_PIXEL
    budget = ByteBudget(2 * cost)
    monkeypatch.setattr(image_codec, "DECODING", budget)
    decoding, most = [0], [0]
    lock = threading.Lock()
    load = image_codec.load_image_file

    def slow_load(*args, **kwargs):
        with lock:
            decoding[0] += 1
            most[0] = max(most[0], decoding[0])
            assert budget.held <= budget.total
        time.sleep(0.1)
        with lock:
            decoding[0] -= 1
        return load(*args, **kwargs)

    monkeypatch.setattr(image_codec, "load_image_file", slow_load)
    body = png_bytes(np.eye(28))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: viewer.upload(body), range(8)))
    assert most[0] == 2, "two 28 x 28 uploads decoded at a time"
    assert all(answer["source"] == "upload" for answer in answers)
    assert budget.held == 0

    monkeypatch.setattr(budget, "timeout", 0.05)  # others held the bytes too long
    with ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(lambda _: _outcome(viewer.upload, body), range(3)))
    assert outcomes.count("Busy") >= 1 and "dict" in outcomes


def _outcome(function, *args) -> str:
    try:
        return type(function(*args)).__name__
    except Busy as exc:
        return type(exc).__name__


# ----------------------------------------------------------------------------- changed files
def test_a_reference_image_edited_under_a_running_viewer_is_refused_not_shown(tmp_path):
    root = tmp_path / "pictures"
    rng = np.random.default_rng(0)
    for c, name in enumerate(("red", "green", "blue")):
        (root / name).mkdir(parents=True)
        for i in range(4):
            pixels = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
            pixels[..., c] = 255
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    workspace = fit_workspace(
        "shapes_cnn",
        None,
        f"imagefolder:{root}",
        config=FitConfig(n_boundaries=5, progress=False),
        image_format=ImageFormat(32),
    )
    app = create_app(workspace, n_regions=1)
    names = workspace.reference.image_names
    with running(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        shown = client.get("/api/image/r0.png")
        assert shown.status_code == 200 and client.get("/api/explain/r1").status_code == 200
        for i in (0, 1, 2):
            Image.new("RGB", (24, 24), "white").save(root / names[i])
        (root / names[3]).unlink()
        for path in ("/api/explain/r2", "/api/image/r2.png", "/api/image/r0.png?heat=r1"):
            response = client.get(path)
            assert response.status_code == 409, path
            assert response.json()["error"].startswith(
                f"reference image {2 if 'r2' in path else 0} ({names[2 if 'r2' in path else 0]})"
                " changed on disk since the index was fitted"
            ), path
        assert client.get("/api/image/r3.png").status_code == 409, "a removed file"
        assert client.get("/api/image/r0.png").content == shown.content, "as it was drawn"
        assert client.get(f"/api/explain/r{len(names) - 1}").status_code == 200
    assert app.state.viewer.wait_for_regions(60)


# ----------------------------------------------------------------------------- command line
def test_serve_says_in_one_line_where_it_cannot_listen(tmp_path, capsys):
    index = str(tmp_path / "no-such-index")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = [
            ("127.0.0.1", port, f"cannot listen on 127.0.0.1:{port}: the port is in use"),
            ("bogus.invalid", 0, "cannot listen on bogus.invalid:0: "),
            ("8.8.8.8", 0, "cannot listen on 8.8.8.8:0: not an address of this machine"),
        ]
        for host, number, message in cases:
            argv = ["serve", "--index", index, "--host", host, "--port", str(number)]
            code, out, err = run(argv, capsys)
            assert_one_line_error(code, err, message)
            assert out == "", "nothing was opened"
    if _ipv6_loopback():  # an IPv6 address in brackets is understood: it fails at the index
        argv = ["serve", "--index", index, "--host", "[::1]", "--port", "0"]
        code, out, err = run(argv, capsys)
        assert_one_line_error(code, err, "is not a repinterp index")
        assert out == f"opening {index} …\n"
