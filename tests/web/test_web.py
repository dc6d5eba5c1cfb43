"""The web viewer's HTTP side, against a real uvicorn server on a free loopback port.

The app (a small index: the demo CNN, |Q| = 20, a few regions) is built once per session and
shared with ``test_web_browser.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.client
import io
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import uvicorn
from matplotlib import colormaps
from PIL import Image
from starlette.applications import Starlette

from repinterp.cli import serve as serve_command
from repinterp.cli.parser import build_parser
from repinterp.core.config import FitConfig
from repinterp.core.groups import polytope_key
from repinterp.core.heatmap import channel_means, heatmaps, normalize_maps
from repinterp.core.interpretation import METRIC_MEANINGS
from repinterp.core.regions import RegionSet, distinct_polytopes
from repinterp.core.strategy_set import StrategySet
from repinterp.display.colours import colorize, overlay
from repinterp.evaluation.baselines import ReusableCAM
from repinterp.evaluation.groupings import region_groups
from repinterp.evaluation.metrics import keep_top_pixels
from repinterp.store.index_folder import read_manifest
from repinterp.store.outputs import listed, lock
from repinterp.store.regions_file import REGIONS_FILE, load_regions
from repinterp.web import create_app, server_config
from repinterp.web.app import host_name
from repinterp.web.compare import METHODS
from repinterp.web.image_codec import MAX_UPLOAD_BYTES, MAX_UPLOAD_PIXELS, MIN_SIDE
from repinterp.web.viewer import DEFAULT_OPACITY, Viewer
from repinterp.workspace import BUNDLED_WEIGHTS, Workspace, fit_workspace, open_index

N_REGIONS = 8
REGIONS_TIMEOUT = 120


@functools.cache
def small_app() -> Starlette:
    """The viewer of a small MNIST index (regions start computing in the background)."""
    workspace = fit_workspace(
        "mnist_cnn",
        BUNDLED_WEIGHTS / "mnist_cnn.safetensors",
        "mnist5k",
        config=FitConfig(n_boundaries=20, progress=False),
    )
    return create_app(workspace, n_regions=N_REGIONS)


pytestmark = pytest.mark.usefixtures("one_thread")


@contextmanager
def running(app: Starlette, host: str = "127.0.0.1", **limits: float) -> Iterator[str]:
    """Serve ``app`` as ``repinterp serve`` does (``limits``: of :func:`server_config`), with
    uvicorn in a thread on a free port of ``host``; yield its base URL."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, 0))
    server = uvicorn.Server(server_config(app, quiet=True, **limits))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://{host_name(host)}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def png_bytes(pixels: torch.Tensor | np.ndarray) -> bytes:
    """A PNG of an H x W (grey) or H x W x 3 array in [0, 1]."""
    array = np.asarray(pixels, dtype=np.float32)
    buffer = io.BytesIO()
    Image.fromarray(np.rint(array * 255).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def as_uploaded(pixels: torch.Tensor) -> torch.Tensor:
    """``pixels`` as the server decodes them from :func:`png_bytes`: rounded to 8 bits."""
    return torch.round(pixels * 255) / 255


@pytest.fixture(scope="module")
def app() -> Starlette:
    return small_app()


@pytest.fixture(scope="module")
def viewer(app):
    return app.state.viewer


@pytest.fixture(scope="module")
def server(app) -> Iterator[str]:
    with running(app) as url:
        yield url


@pytest.fixture
def client(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as c:
        yield c


def raw_get(base: str, target: str) -> tuple[int, bytes]:
    """GET ``target`` exactly as written (no normalisation of ``..`` or ``%2F``)."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# ----------------------------------------------------------------------------- page
def test_page_loads_only_its_own_files(client):
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="/static/app.js"' in page.text
    assert '<link rel="stylesheet" href="/static/style.css"' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert '<link rel="icon" href="/static/favicon.svg"' in page.text
    files = {"app.js": "text/javascript", "style.css": "text/css", "favicon.svg": "image/svg+xml"}
    for name, kind in files.items():
        response = client.get(f"/static/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(kind)
    favicon = client.get("/favicon.ico")
    assert favicon.status_code == 200
    assert favicon.content == client.get("/static/favicon.svg").content
    for text in (
        page.text,
        client.get("/static/app.js").text,
        client.get("/static/style.css").text,
    ):
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert client.get("/static/index.html").status_code == 404


def test_info(client, viewer):
    info = client.get("/api/info").json()
    index = viewer.index
    assert info["n_reference"] == len(index) == 4000
    assert info["n_boundaries"] == len(index.boundaries) == 20
    assert info["class_names"] == [str(c) for c in range(10)]
    assert info["input_shape"] == [1, 28, 28]
    assert info["n_regions"] == N_REGIONS
    assert info["max_upload_bytes"] == MAX_UPLOAD_BYTES
    assert info["metric"] == "semantic"
    assert info["metric_meaning"] == METRIC_MEANINGS["semantic"]
    assert info["granularity"] == "class" and info["sub_labels"] is False
    assert info["granularity_text"] == "granularity class (the paper's RI)"


def test_other_host_headers_are_refused(client):
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", "[::2]:80", ""):
        response = client.get("/api/info", headers={"Host": host})
        assert response.status_code == 400, host
        assert "Invalid host header" in response.json()["error"]
    for host in ("localhost:1234", "127.0.0.1", "LOCALHOST", "[::1]:8000", "[::1]"):
        assert client.get("/api/info", headers={"Host": host}).status_code == 200, host


# ----------------------------------------------------------------------------- explanations
def test_reference_explanation_matches_the_engine(client, viewer):
    e = viewer.interpreter.explain_reference([7])[0]
    data = client.get("/api/explain/r7").json()
    assert data["key"] == "r7" and data["source"] == "reference" and data["reference"] == 7
    assert data["predicted_class"] == e.predicted_class
    assert data["label"] == int(viewer.labels[7])
    assert data["score"] == pytest.approx(e.score)
    assert data["boundaries"] == e.boundaries.tolist()
    assert data["delta"] == e.delta
    assert data["representativeness"] == e.representativeness == data["similar"]["total"] + 1
    assert data["similar"]["input_left_out"]
    assert data["has_heatmap"] and "heat=r7" in data["heatmap"]
    items = data["similar"]["items"]
    ranked = e.similar().tolist()
    assert ranked[0] == 7, "the input is its own most similar image"
    assert [item["reference"] for item in items] == ranked[1:13]
    distances = [item["distance"] for item in items]
    assert distances == sorted(distances)
    assert data["metric"] == "semantic", "the distance shown is the one its metric names"
    semantic = dict(zip(e.covered.tolist(), e.distances("semantic").tolist(), strict=True))
    assert distances == pytest.approx([semantic[item["reference"]] for item in items])
    assert [item["rank"] for item in items] == list(range(1, 13))
    logits = viewer.index.logits[items[1]["reference"]]
    assert items[1]["score"] == pytest.approx(float(logits.softmax(0)[e.predicted_class]))
    assert all(f"heat={data['key']}" in item["heatmap"] for item in items)


def test_paging(client, viewer):
    ranked = [i for i in viewer.interpreter.explain_reference([3])[0].similar().tolist() if i != 3]
    pages = [client.get(f"/api/explain/r3?offset={o}&limit=5").json() for o in (0, 5, 10)]
    assert [item["reference"] for p in pages for item in p["similar"]["items"]] == ranked[:15]
    assert pages[1]["similar"]["offset"] == 5 and pages[1]["similar"]["limit"] == 5
    last = client.get(f"/api/explain/r3?offset={len(ranked) - 2}&limit=5").json()
    assert [item["reference"] for item in last["similar"]["items"]] == ranked[-2:]
    assert last["similar"]["items"][-1]["rank"] == len(ranked)
    beyond = client.get(f"/api/explain/r3?offset={len(ranked) + 10}").json()
    assert beyond["similar"]["items"] == [] and beyond["similar"]["total"] == len(ranked)
    for query in ("offset=-1", "limit=0", "limit=61", "offset=abc", "limit=1.5", "offset=1e99"):
        response = client.get(f"/api/explain/r3?{query}")
        assert response.status_code == 400, query
        assert response.json()["error"]


@pytest.mark.parametrize(
    "key", ["r4000", "r99999999999", "r-1", "r01", "x7", "7", "u" + "A" * 16, "ushort", "r7.png"]
)
def test_bad_ids_are_404(client, key):
    for path in (f"/api/explain/{key}", f"/api/image/{key}.png", f"/api/image/r1.png?heat={key}"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]


def test_traversal_is_404_and_reads_nothing(server, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    relative = "../" * 12 + str(secret).lstrip("/")
    encoded = relative.replace("/", "%2F")
    targets = [
        f"/static/{relative}",
        f"/static/{encoded}",
        f"/{relative}",
        f"/api/image/{relative}.png",
        f"/api/image/{encoded}.png",
        f"/api/image/%2F{encoded}.png",
        f"/api/image/r1.png?heat={encoded}",
        f"/api/explain/{encoded}",
        "/static/..%2F..%2Fpyproject.toml",
        "/static/%2e%2e/%2e%2e/pyproject.toml",
        str(secret),
        f"//{secret}",
    ]
    opened: list[str] = []
    watching = True

    def audit(event: str, args: tuple) -> None:
        if watching and event == "open" and isinstance(args[0], str | bytes | Path):
            opened.append(str(args[0]))

    sys.addaudithook(audit)
    try:
        for target in targets:
            status, body = raw_get(server, target)
            assert status == 404, target
            assert b"top secret" not in body and b"[build-system]" not in body
    finally:
        watching = False
    assert not [path for path in opened if "secret" in path or "pyproject" in path]


# ----------------------------------------------------------------------------- images
def _decoded(response: httpx.Response) -> np.ndarray:
    """A PNG answer at its data's resolution (undoing the whole-factor nearest upscaling)."""
    array = np.asarray(Image.open(io.BytesIO(response.content)))
    factor = MIN_SIDE // 28
    return array[::factor, ::factor]


def test_images_are_sharp_cached_pngs(client, viewer):
    pixels = viewer.workspace.reference.pixels(7)[0]
    response = client.get("/api/image/r7.png")
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
    image = Image.open(io.BytesIO(response.content))
    factor = MIN_SIDE // 28
    assert image.size == (28 * factor, 28 * factor) and image.mode == "L"
    array = np.asarray(image)
    blocks = array.reshape(28, factor, 28, factor)
    assert (blocks == blocks[:, :1, :, :1]).all(), "upscaled by nearest neighbours"
    assert np.array_equal(array[::factor, ::factor], np.rint(pixels.numpy() * 255))

    heat = client.get("/api/image/r12.png?heat=r7")
    assert heat.status_code == 200 and heat.headers["cache-control"].startswith("public")
    drawn = Image.open(io.BytesIO(heat.content))
    assert drawn.size == image.size and drawn.mode == "RGB"
    assert client.get("/api/image/r12.png?heat=r7").content == heat.content


@pytest.mark.parametrize("cmap", [None, "inferno", "viridis", "jet"])
def test_heat_maps_are_the_engines_in_a_per_image_min_max_colormap(client, viewer, cmap):
    e = viewer.interpreter.explain_reference([7])[0]
    pixels = viewer.workspace.reference.pixels(12).unsqueeze(0)
    heat = e.heatmap(viewer.workspace.normalization(pixels))[0]
    expected = np.rint(colorize(normalize_maps(heat), cmap or "inferno") * 255)
    query = "" if cmap is None else f"&cmap={cmap}"
    drawn = _decoded(client.get(f"/api/image/r12.png?heat=r7{query}"))
    assert np.abs(drawn.astype(int) - expected).max() <= 1
    assert drawn.reshape(-1, 3).min(0).sum() < drawn.reshape(-1, 3).max(0).sum(), "not blank"


def test_the_contrastive_map_of_another_class_is_the_engines(client, viewer):
    e = viewer.interpreter.explain_reference([7])[0]
    other = (e.predicted_class + 1) % 10
    normalize = viewer.workspace.normalization
    seven = normalize(viewer.workspace.reference.pixels(7).unsqueeze(0))
    twelve = normalize(viewer.workspace.reference.pixels(12).unsqueeze(0))
    own = viewer.interpreter.contrastive_heatmap(seven, other)[0]  # on r7 itself
    expected = np.rint(colorize(normalize_maps(own), "inferno") * 255)
    drawn = _decoded(client.get(f"/api/image/r7.png?heat=r7&contrast={other}"))
    assert np.abs(drawn.astype(int) - expected).max() <= 1
    alphas = channel_means(viewer.interpreter.contrastive_boundaries(seven, other))
    reused = heatmaps(viewer.interpreter.features(twelve), alphas, (28, 28))[0]  # r7's, on r12
    expected = np.rint(colorize(normalize_maps(reused), "inferno") * 255)
    drawn = _decoded(client.get(f"/api/image/r12.png?heat=r7&contrast={other}"))
    assert np.abs(drawn.astype(int) - expected).max() <= 1
    for query, message in (
        (f"contrast={e.predicted_class}", "its map is its polytope's"),
        ("contrast=10", "contrast must lie in [0, 9], got 10"),
        ("contrast=x", "contrast must be a whole number"),
        (f"contrast={other}&method=gradcam", "give heat=KEY, no method"),
    ):
        response = client.get(f"/api/image/r7.png?heat=r7&{query}")
        assert response.status_code == 400 and message in response.json()["error"], query


def test_bad_image_options_are_400(client):
    for query, message in (("cmap=rainbow", "unknown colormap"), ("method=lime", "unknown method")):
        response = client.get(f"/api/image/r1.png?heat=r7&{query}")
        assert response.status_code == 400 and message in response.json()["error"], query


def test_overlay_blends_a_perceptual_colormap_by_default():
    image = torch.rand(1, 6, 5)
    heat = torch.rand(6, 5)
    colour = colorize(heat)
    assert np.allclose(colour, colormaps["inferno"](heat.numpy())[..., :3])
    for alpha in (0.0, 0.3, 1.0):
        blended = overlay(image, heat, alpha=alpha)
        grey = image[0].numpy()[..., None]
        assert np.allclose(blended, (1 - alpha) * grey + alpha * colour)
    assert np.allclose(overlay(image, heat, cmap="jet"), 0.5 * grey + 0.5 * colorize(heat, "jet"))
    with pytest.raises(ValueError, match="alpha must lie in"):
        overlay(image, heat, alpha=1.5)
    with pytest.raises(ValueError, match="unknown colormap 'nope'"):
        overlay(image, heat, cmap="nope")


# ----------------------------------------------------------------------------- uploads
def test_upload_png_is_explained_like_the_engine(client, viewer):
    pixels = viewer.workspace.data.unseen.pixels(0)
    start = time.perf_counter()
    response = client.post("/api/upload", content=png_bytes(pixels[0]))
    seconds = time.perf_counter() - start
    assert response.status_code == 200, response.text
    data = response.json()
    e = viewer.interpreter.explain(viewer.workspace.normalization(as_uploaded(pixels)))
    assert data["source"] == "upload" and data["key"].startswith("u") and data["label"] is None
    assert data["predicted_class"] == e.predicted_class
    assert data["boundaries"] == e.boundaries.tolist()
    assert [item["reference"] for item in data["similar"]["items"]] == e.similar(12).tolist()
    print(f"upload explained in {1000 * seconds:.0f} ms")
    assert seconds < 5

    key = data["key"]
    assert client.get(f"/api/explain/{key}?offset=12").json()["similar"]["offset"] == 12
    own = client.get(f"/api/image/{key}.png?heat={key}")
    assert own.status_code == 200 and own.headers["cache-control"].startswith("private")
    assert client.get(data["similar"]["items"][0]["heatmap"]).status_code == 200


def test_upload_large_rgb_jpeg_is_fitted_to_the_input(client):
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)).save(buffer, "JPEG")
    data = client.post("/api/upload", content=buffer.getvalue()).json()
    image = Image.open(io.BytesIO(client.get(data["image"]).content))
    assert image.size == (MIN_SIDE, MIN_SIDE)


def _png_of_size(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (width, height)).save(buffer, "PNG")
    return buffer.getvalue()


def test_broken_uploads_are_400_and_the_server_keeps_serving(client, monkeypatch):
    good = png_bytes(np.zeros((28, 28)))
    noisy = png_bytes(np.random.default_rng(0).random((28, 28)))
    gif = io.BytesIO()
    Image.new("L", (28, 28)).save(gif, "GIF")
    cases = {
        "empty": (b"", "empty"),
        "garbage": (b"definitely not an image", "not a PNG or JPEG"),
        "gif": (gif.getvalue(), "not a PNG or JPEG"),
        "truncated": (noisy[: len(noisy) * 3 // 4], "cannot be decoded"),
        "too many bytes": (b"\x89PNG" + bytes(MAX_UPLOAD_BYTES), "larger than"),
        "too many pixels": (_png_of_size(5000, MAX_UPLOAD_PIXELS // 5000 + 1), "pixels"),
    }
    for name, (body, message) in cases.items():
        response = client.post("/api/upload", content=body)
        assert response.status_code == 400, name
        assert message in response.json()["error"], name
    form = client.post("/api/upload", files={"image": ("digit.png", good, "image/png")})
    assert form.status_code == 400 and "--data-binary" in form.json()["error"]

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # Pillow's bomb guard, as an error
    bomb = client.post("/api/upload", content=good)
    assert bomb.status_code == 400 and "decompression bomb" in bomb.json()["error"]
    monkeypatch.undo()

    assert client.get("/api/info").status_code == 200
    assert client.post("/api/upload", content=good).status_code == 200


def test_uploads_are_kept_in_a_bounded_store(client, viewer, monkeypatch):
    monkeypatch.setattr(viewer.images, "max_uploads", 2)
    digit = png_bytes(viewer.workspace.data.unseen.pixels(1)[0])
    first = client.post("/api/upload", content=digit).json()
    key = first["key"]
    drawn = [first["image"], first["heatmap"], first["similar"]["items"][0]["heatmap"]]
    drawn += [f"/api/image/{key}.png?heat={key}&method=gradcam"]
    assert all(client.get(url).status_code == 200 for url in drawn), "now in the image cache"
    keys = [key] + [
        client.post("/api/upload", content=png_bytes(np.full((28, 28), v))).json()["key"]
        for v in (0.5, 1.0)
    ]
    assert len(set(keys)) == 3
    assert client.get(f"/api/explain/{keys[0]}").status_code == 404
    assert client.get(f"/api/explain/{keys[2]}").status_code == 200
    for url in drawn:  # forgotten: not served from the cache either
        response = client.get(url)
        assert response.status_code == 404 and "forgotten" in response.json()["error"], url


# ----------------------------------------------------------------------------- regions
def _ready_regions(client: httpx.Client) -> dict:
    deadline = time.monotonic() + REGIONS_TIMEOUT
    while (data := client.get("/api/regions").json())["status"] == "computing":
        assert time.monotonic() < deadline, "regions were not ready in time"
        time.sleep(0.5)
    assert data["status"] == "ready", data["message"]
    return data


def test_regions_gallery_has_one_card_per_polytope_and_its_counts_add_up(client, viewer):
    data = _ready_regions(client)
    cards = data["regions"]
    assert data["n_regions"] == N_REGIONS and data["n_reference"] == 4000
    assert 1 <= len(cards) <= N_REGIONS
    assert sorted(v for card in cards for v in card["regions"]) == list(range(N_REGIONS))
    assert sum(card["interpreted"] for card in cards) == 4000
    sizes = [card["representativeness"] for card in cards]
    assert sizes == sorted(sizes, reverse=True)
    regions = viewer.interpreter.regions(n_regions=N_REGIONS, seed=0)
    keys = set()
    for card in cards:
        e = viewer.interpreter.explain_reference([card["reference"]])[0]
        keys.add(polytope_key(e))
        assert card["inputs"] == [int(regions.inputs[v]) for v in card["regions"]]
        assert {polytope_key(regions.regions[v]) for v in card["regions"]} == {polytope_key(e)}
        assert card["boundaries"] == sorted(e.boundaries.tolist())
        assert card["representativeness"] == e.representativeness
        assert card["predicted_class"] == e.predicted_class
        assert card["class_name"] == str(e.predicted_class)
        assert 1 <= len(card["covered"]) <= 4
        covered = [item["reference"] for item in card["covered"]]
        assert covered == [i for i in e.similar().tolist() if i != card["reference"]][:4]
        assert all(f"heat={card['key']}" in item["heatmap"] for item in card["covered"])
    assert len(keys) == len(cards), "two cards show the same polytope"
    interpreted = regions.assign(
        viewer.workspace.normalization(viewer.workspace.reference_pixels(range(4000)))
    ).region
    for card in cards:
        assert card["interpreted"] == sum(int((interpreted == v).sum()) for v in card["regions"])
    assert data["finds"] == region_groups(regions, interpreted).sentence()
    assert data["finds"].startswith(f"{len(cards)} polytopes for ")
    assert all(card["sub_labels"] is None for card in cards)  # mnist5k has no sub-labels


def test_region_cards_show_the_sub_label_composition_of_the_images_they_interpret(viewer):
    """The same index, its reference set given hand-made sub-labels (index mod 3, named):
    each card counts the sub-labels of the reference images its regions interpret."""
    data = viewer.workspace.data
    concepts = torch.arange(len(data.reference)) % 3
    names = ["a", "b", "c"]
    labelled = dataclasses.replace(data.reference, concepts=concepts, concept_names=names)
    recipe = viewer.workspace.recipe
    workspace = Workspace(viewer.interpreter, data._replace(reference=labelled), recipe)
    gallery = Viewer(workspace, n_regions=N_REGIONS)
    assert gallery.wait_for_regions(REGIONS_TIMEOUT)
    assert gallery.info()["sub_labels"] is True
    cards = gallery.regions()["regions"]
    region = viewer.interpreter.regions(n_regions=N_REGIONS, seed=0).reference_assignment().region
    for card in cards:
        mine = torch.isin(region.cpu(), torch.tensor(card["regions"]))
        counts = torch.bincount(concepts[mine], minlength=3).tolist()
        order = sorted((c for c in range(3) if counts[c]), key=lambda c: (-counts[c], c))
        assert [(c["sub_label"], c["name"], c["count"]) for c in card["sub_labels"]] == [
            (c, names[c], counts[c]) for c in order
        ]
        assert sum(c["count"] for c in card["sub_labels"]) == card["interpreted"]
        assert all(re.fullmatch(r"#[0-9a-f]{6}", c["colour"]) for c in card["sub_labels"])


def test_regions_with_the_same_polytope_are_one_card(viewer):
    ri = viewer.interpreter
    inputs = torch.tensor([5, 7, 5, 11, 7])
    features = ri.reference_features
    regions = RegionSet(ri, inputs, ri.explain_reference(inputs), features[inputs].clone())
    polytopes = distinct_polytopes(regions)
    assert sorted(p.regions for p in polytopes) == [[0, 2], [1, 4], [3]]
    assert {tuple(p.inputs) for p in polytopes} == {(5, 5), (7, 7), (11,)}
    assert sum(p.interpreted for p in polytopes) == len(features)


def test_a_gallery_without_regions_says_why(viewer):
    gallery = Viewer(viewer.workspace, n_regions=0)
    assert gallery.wait_for_regions(30)
    data = gallery.regions()
    assert data["status"] == "unavailable" and data["regions"] == []
    assert "n_regions must lie in" in data["message"]


def test_a_strategy_index_shows_its_strategies_in_the_audits_order(viewer):
    """The panel of a ``granularity="strategy"`` index: one card per strategy, each class's in
    the audit's order, its input the member nearest its centre, its numbers the engine's; the
    paper's index has none."""
    assert viewer.wait_for_regions(REGIONS_TIMEOUT) and viewer.regions()["strategies"] == []
    workspace = fit_workspace(
        "digits_cnn",
        BUNDLED_WEIGHTS / "digits_cnn.safetensors",
        "digits",
        config=FitConfig(n_boundaries=10, progress=False, decisions=StrategySet()),
    )
    gallery = Viewer(workspace, n_regions=N_REGIONS)
    assert gallery.wait_for_regions(REGIONS_TIMEOUT)
    panel = gallery.regions()["strategies"]
    engine = workspace.interpreter.strategies(workspace.reference)
    assert [card["strategy"] for card in panel] == [s.id for s in engine]
    for card, strategy in zip(panel, engine, strict=True):
        assert card["reference"] == strategy.input == int(strategy.members[0])
        assert (card["rank"], card["flagged"]) == (strategy.audit.rank, strategy.audit.flagged)
        assert card["size"] == len(strategy.members) and card["reasons"] == strategy.audit.reasons
        assert [m["reference"] for m in card["members"]] == strategy.members[1:5].tolist()


# ----------------------------------------------------------------------------- regions kept
def saved_copy(workspace: Workspace, folder: Path) -> Path:
    """``workspace``'s index saved in ``folder`` (a new workspace object saves it: the shared
    one keeps no folder)."""
    Workspace(workspace.interpreter, workspace.data, workspace.recipe).save(folder)
    return folder


@pytest.fixture(scope="module")
def index_folder(viewer, tmp_path_factory) -> Path:
    """The small index saved in a folder, without regions."""
    return saved_copy(viewer.workspace, tmp_path_factory.mktemp("kept") / "index")


def _cards(data: dict) -> list[tuple]:
    """What the gallery shows of each card, without the viewer's URLs."""
    assert data["status"] == "ready", data["message"]
    fields = ("key", "regions", "inputs", "interpreted", "boundaries", "representativeness")
    return [tuple(str(card[f]) for f in fields) for card in data["regions"]]


def _opened(folder: Path) -> Workspace:
    """The index at ``folder``, opened without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return open_index(folder, progress=False)


def _counting_k_means(monkeypatch) -> list[int]:
    """Count the k-means runs (``RegionSet.build``), by their ``n_regions``."""
    runs: list[int] = []
    build = RegionSet.build.__func__

    def counted(cls, interpreter, n_regions=None, seed=0):
        runs.append(n_regions)
        return build(cls, interpreter, n_regions, seed)

    monkeypatch.setattr(RegionSet, "build", classmethod(counted))
    return runs


def test_regions_are_kept_in_the_index_folder_and_read_back_without_k_means(
    viewer, index_folder, tmp_path, monkeypatch
):
    folder = tmp_path / "index"
    shutil.copytree(index_folder, folder)
    files = {name: (folder / name).read_bytes() for name in ("index.safetensors", "features.npy")}
    first = Viewer(_opened(folder), n_regions=N_REGIONS)
    assert first.wait_for_regions(REGIONS_TIMEOUT) and viewer.wait_for_regions(REGIONS_TIMEOUT)
    assert _cards(first.regions()) == _cards(viewer.regions())  # k-means, as without a folder
    data = (folder / REGIONS_FILE).read_bytes()
    assert read_manifest(folder)["sha256"][REGIONS_FILE] == hashlib.sha256(data).hexdigest()
    assert REGIONS_FILE in listed(folder)  # the marker lists it: the project's file
    assert {name: (folder / name).read_bytes() for name in files} == files

    runs = _counting_k_means(monkeypatch)
    start = time.perf_counter()
    second = Viewer(_opened(folder), n_regions=N_REGIONS)
    assert second.wait_for_regions(REGIONS_TIMEOUT)
    print(f"kept regions read and their cards ready in {time.perf_counter() - start:.2f} s")
    assert runs == [] and _cards(second.regions()) == _cards(first.regions())
    assert (folder / REGIONS_FILE).read_bytes() == data  # read, not written again


@pytest.mark.slow
def test_a_damaged_changed_or_other_regions_file_is_never_used(
    index_folder, tmp_path, monkeypatch, caplog
):
    folder = tmp_path / "index"
    shutil.copytree(index_folder, folder)
    caplog.set_level(logging.WARNING, logger="repinterp.web.gallery")
    runs = _counting_k_means(monkeypatch)
    viewers = []

    def serve(workspace: Workspace, n_regions: int = 2) -> list[tuple]:
        viewers.append(Viewer(workspace, n_regions=n_regions))
        assert viewers[-1].wait_for_regions(REGIONS_TIMEOUT)
        return _cards(viewers[-1].regions())

    cards = serve(_opened(folder))  # computed and kept
    data = bytearray((folder / REGIONS_FILE).read_bytes())
    data[-1] ^= 1
    (folder / REGIONS_FILE).write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="regions.safetensors is damaged.*computed again"):
        damaged = open_index(folder, progress=False)  # left out of the index's files
    assert serve(damaged) == cards and runs == [2, 2]  # computed again ...
    assert load_regions(_opened(folder).interpreter, 2, 0) is not None  # ... and replaced

    changed = _opened(folder)
    (folder / REGIONS_FILE).write_bytes(bytes(data))  # after the index was opened
    assert serve(changed) == cards and runs == [2, 2, 2]
    assert "regions.safetensors changed since the index was loaded" in caplog.text

    assert len(serve(_opened(folder), n_regions=3)) >= 1 and runs[-1] == 3  # other settings
    assert load_regions(_opened(folder).interpreter, 3, 0) is not None  # kept in its place

    with lock(folder):  # another command writes to the folder: shown, not kept, and said
        assert serve(_opened(folder)) == cards and runs[-1] == 2
    assert "the regions are not kept in" in caplog.text
    assert "another repinterp command is writing to" in caplog.text
    assert load_regions(_opened(folder).interpreter, 2, 0) is None


# ----------------------------------------------------------------------------- command line
def test_serve_command_line():
    args = build_parser().parse_args(["serve", "--index", "idx"])
    assert (args.host, args.port, args.regions) == ("127.0.0.1", 8000, 20)
    assert args.func is serve_command.run


@pytest.mark.slow
def test_serve_prints_its_address_serves_and_stops_on_ctrl_c(viewer, tmp_path_factory):
    index = tmp_path_factory.mktemp("serve") / "index"
    viewer.interpreter.save(index)
    command = [sys.executable, "-m", "repinterp", "serve", "--index", str(index), "--port", "0"]
    env = os.environ | {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*command, "--regions", "2", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 120)
        line = process.stdout.readline() if ready else ""
        address = re.fullmatch(
            r"repinterp viewer: (http://127\.0\.0\.1:\d+/) \(Ctrl\+C to stop\)\n", line
        )
        assert address, f"no address printed: {line!r}"
        assert httpx.get(address[1] + "api/info", timeout=30).json()["n_reference"] == 4000
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# ----------------------------------------------------------------------------- compare, export
def _masked(viewer, pixels: torch.Tensor, maps: torch.Tensor, target: int) -> list[float]:
    """Scores of ``target`` on the images with only their 20 % hottest pixels kept, computed
    here from the metric and the model alone."""
    masked, keep = keep_top_pixels(pixels, maps, 0.2)
    assert int(keep[0].sum()) == round(0.2 * 28 * 28)
    model = viewer.interpreter.model
    with torch.no_grad():
        return model(viewer.workspace.normalization(masked)).softmax(1)[:, target].tolist()


@pytest.mark.parametrize("method", ["ri", "gradcam", "gradcampp", "scorecam"])
def test_compare_reuses_each_methods_weights_on_the_same_similar_images(client, viewer, method):
    data = client.get(f"/api/compare/r7?method={method}&k=3").json()
    e = viewer.interpreter.explain_reference([7])[0]
    similar = [i for i in e.similar().tolist() if i != 7][:3]
    assert [item["reference"] for item in data["items"]] == [7, *similar]
    assert [item["rank"] for item in data["items"]] == [0, 1, 2, 3]
    assert data["name"] == METHODS[method] and data["kept_fraction"] == 0.2
    pixels = viewer.workspace.reference_pixels([7, *similar])
    inputs = viewer.workspace.normalization(pixels)
    if method == "ri":
        maps = e.heatmap(inputs)
    else:
        cam = ReusableCAM(METHODS[method], viewer.interpreter.model, "features.7")
        cam.fit(inputs[:1], [e.predicted_class])
        maps = cam.heatmaps(inputs, [0, 0, 0, 0])
    expected = _masked(viewer, pixels, maps, e.predicted_class)
    masked = [item["masked_score"] for item in data["items"]]
    assert masked == pytest.approx(expected, abs=1e-5)
    assert data["mean_masked_score"] == pytest.approx(sum(expected) / 4, abs=1e-5)
    for item, image_map in zip(data["items"], maps, strict=True):
        query = "" if method == "ri" else f"method={method}"
        assert query in item["heatmap"] and "heat=r7" in item["heatmap"]
        drawn = _decoded(client.get(item["heatmap"]))
        colour = np.rint(colorize(normalize_maps(image_map)) * 255)
        assert np.abs(drawn.astype(int) - colour).max() <= 1, item["key"]
    assert client.get(f"/api/compare/r7?method={method}&k=3").json()["items"] == data["items"]


def test_compare_of_an_upload_and_bad_requests(client):
    upload = client.post("/api/upload", content=png_bytes(np.eye(28))).json()
    data = client.get(f"/api/compare/{upload['key']}?method=gradcam").json()
    assert data["items"][0]["key"] == upload["key"] and data["items"][0]["reference"] is None
    assert len(data["items"]) == 1 + min(4, upload["similar"]["total"])
    for query, status in (("method=lime", 400), ("method=ri&k=0", 400), ("method=ri&k=9", 400)):
        response = client.get(f"/api/compare/r7?{query}")
        assert response.status_code == status and response.json()["error"], query
    assert client.get("/api/compare/r4000?method=ri").status_code == 404


def test_export_is_the_case_study_png_and_its_numbers(client, viewer):
    png = client.get("/api/export/r7.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.headers["content-disposition"] == 'attachment; filename="repinterp-r7.png"'
    with Image.open(io.BytesIO(png.content)) as figure:
        assert figure.format == "PNG" and figure.width >= 1000
    data = client.get("/api/export/r7.json").json()
    e = viewer.interpreter.explain_reference([7])[0]
    similar = [i for i in e.similar().tolist() if i != 7][:8]
    assert [item["reference"] for item in data["similar"]] == similar
    assert data["similar_total"] == e.representativeness - 1
    assert data["boundaries"] == e.boundaries.tolist() and data["key"] == "r7"
    pixels = viewer.workspace.reference_pixels([7, *similar])
    maps = e.heatmap(viewer.workspace.normalization(pixels))
    expected = _masked(viewer, pixels, maps, e.predicted_class)
    got = [data["input_masked_score"], *(item["masked_score"] for item in data["similar"])]
    assert got == pytest.approx(expected, abs=1e-5)
    assert client.get("/api/export/r4000.json").status_code == 404


def test_the_exported_figure_is_drawn_as_the_page_shows_it(client, viewer, monkeypatch):
    """The page's opacity and colours (sent with the request; the page's default opacity is
    the export's), and the labelled distances of the similar images."""
    drawn = []
    monkeypatch.setattr(
        "repinterp.web.exports.save_case_study_figure",
        lambda study, path, title, cmap, alpha: drawn.append((study, cmap, alpha)),
    )
    assert client.get("/api/info").json()["default_opacity"] == DEFAULT_OPACITY == 55
    assert client.get("/api/export/r7.png").status_code == 200
    assert client.get("/api/export/r7.png?opacity=30&cmap=viridis").status_code == 200
    assert [(cmap, alpha) for _, cmap, alpha in drawn] == [("inferno", 0.55), ("viridis", 0.3)]
    study = drawn[0][0]
    entry = viewer.explanation("r7", limit="8")["similar"]["items"]
    assert study.metric == "semantic"
    assert study.distances == pytest.approx([item["distance"] for item in entry])
    assert study.titles[1:] == [item["name"] for item in entry]  # in rank order
    assert [item["name"] for item in entry] == [f"reference:{item['reference']}" for item in entry]
    for query in ("opacity=101", "opacity=-5", "opacity=half", "cmap=rainbow"):
        response = client.get(f"/api/export/r7.png?{query}")
        assert response.status_code == 400 and response.json()["error"], query


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_viewer_on_cuda_answers_like_on_cpu(viewer):
    workspace = fit_workspace(
        "mnist_cnn",
        BUNDLED_WEIGHTS / "mnist_cnn.safetensors",
        "mnist5k",
        config=FitConfig(n_boundaries=20, progress=False),
        device="cuda",
    )
    gpu = Viewer(workspace, n_regions=2)
    for method in METHODS:
        on_gpu, on_cpu = gpu.compare("r7", method), viewer.compare("r7", method)
        shown = [[item["reference"] for item in c["items"]] for c in (on_gpu, on_cpu)]
        assert shown[0] == shown[1], method
        assert on_gpu["mean_masked_score"] == pytest.approx(on_cpu["mean_masked_score"], abs=1e-3)
        drawn = np.asarray(Image.open(io.BytesIO(gpu.png("r12", "r7", method)))).astype(int)
        expected = np.asarray(Image.open(io.BytesIO(viewer.png("r12", "r7", method))))
        assert np.abs(drawn - expected).mean() < 2, method
    assert gpu.export("r7", "png")[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(gpu.export("r7", "json"))["key"] == "r7"
    assert gpu.upload(png_bytes(np.eye(28)))["source"] == "upload"
    assert gpu.wait_for_regions(120) and gpu.regions()["status"] == "ready"


def test_a_script_that_builds_the_viewer_and_exits_at_once_exits_cleanly(index_folder, tmp_path):
    """The regions thread is still running torch (its gallery's cards) when such a script ends:
    it is stopped and joined at exit, not killed mid-way (``terminate called without an active
    exception``, exit 134)."""
    folder = shutil.copytree(index_folder, tmp_path / "index")
    assert Viewer(_opened(folder), n_regions=3).wait_for_regions(REGIONS_TIMEOUT)  # kept there
    script = (
        "from repinterp.web import create_app\n"
        "from repinterp.workspace import open_index\n"
        f"app = create_app(open_index({str(folder)!r}, progress=False), n_regions=3)\n"
        "assert app.state.viewer.regions()['status'] == 'computing'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}  # torch's pool
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "terminate called" not in done.stderr


def test_a_notebook_over_an_opened_index_draws_the_similar_images(index_folder) -> None:
    workspace = _opened(index_folder)
    ri = workspace.interpreter
    e = ri.explain(workspace.reference[3][0])
    k = min(8, e.representativeness)
    page = e.show(k=k).html
    assert "image not held" not in page
    assert page.count('alt="image"') == 1 + k
    assert page == e.show(k=k, reference=workspace.reference).html
