"""The viewer in headless Chromium (Debian's ``chromium``, driven by Playwright), used as a person
would: the gallery, an image by id, heat maps and similar images, zoom, paging, uploads, a
traversal path and a broken upload.

Without a browser these tests say so and skip, except under ``CI=true`` where they fail.
Screenshots go to a temporary folder, and a few to ``/tmp/web-shots/``.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.test_web import (
    as_uploaded,
    png_bytes,
    running,
    small_app,
)

pytestmark = pytest.mark.usefixtures("one_thread")

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path("/tmp/web-shots")
TIMEOUT_MS = 30_000
LOADED = "s => [...document.querySelectorAll(s)].every(i => i.complete && i.naturalWidth > 0)"


def _unavailable(reason: str) -> None:
    message = f"BROWSER TESTS NOT RUN: {reason}; `make browser` installs Chromium"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true requires them)")
    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as exc:
        _unavailable(f"the playwright package is missing ({exc})")
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except Error as exc:
            _unavailable(f"{CHROMIUM} does not start: {exc.message.splitlines()[0]}")
        yield chromium
        chromium.close()


@dataclass
class Session:
    """A browser tab on the viewer, with every URL it requested and every script error."""

    page: Any
    base: str
    shots: Path
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def shot(self, name: str, keep: bool = False) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=path, full_page=True)
        if keep:
            SHOTS.mkdir(exist_ok=True)
            shutil.copy(path, SHOTS / path.name)
        return path

    def explain_id(self, reference: int) -> None:
        self.page.fill("#ref-id", str(reference))
        self.page.click("#by-id button[type=submit]")
        self.page.wait_for_selector(f"#explanation[data-key=r{reference}]:not([hidden])")
        self.page.wait_for_function(LOADED, arg="#explanation img")


@pytest.fixture(scope="module")
def session(browser, tmp_path_factory) -> Iterator[Session]:
    with running(small_app()) as base:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=base)
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        tab = Session(page, base, tmp_path_factory.mktemp("shots"))
        page.on("request", lambda request: tab.requests.append(request.url))
        page.on("pageerror", lambda error: tab.errors.append(str(error)))
        page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
        page.goto("/")
        yield tab
        context.close()


def _api(session: Session, path: str) -> dict[str, Any]:
    return session.page.request.get(path).json()


def test_gallery_of_regions(session):
    page = session.page
    page.wait_for_selector(".region", timeout=120_000)
    assert "4000 reference images" in page.inner_text("#info")
    cards = _api(session, "/api/regions")["regions"]
    assert page.locator(".region").count() == len(cards)
    page.wait_for_function(LOADED, arg="#gallery img")
    first = page.locator(".region").first
    assert first.locator("h3").inner_text() == f"class {cards[0]['class_name']}"
    assert f"covers {cards[0]['representativeness']}" in first.inner_text()
    assert first.locator(".covered img").count() == len(cards[0]["covered"])
    session.shot("gallery", keep=True)

    first.locator("h3 a").click()
    page.wait_for_selector(f"#explanation[data-key={cards[0]['key']}]:not([hidden])")
    assert page.inner_text("#title") == f"Reference image {cards[0]['reference']}"


def test_image_by_id_with_heat_maps_similar_images_and_paging(session):
    page = session.page
    session.explain_id(7)
    data = _api(session, "/api/explain/r7")
    assert page.inner_text("#title") == "Reference image 7"
    assert page.inner_text("[data-fact=class]") == data["class_name"]
    assert page.inner_text("[data-fact=delta]") == str(data["delta"])
    assert page.inner_text("[data-fact=boundaries]") == f"{len(data['boundaries'])} of 20"
    rep = page.inner_text("[data-fact=representativeness]")
    assert rep.startswith(f"{data['representativeness']} of 4000")
    total = data["similar"]["total"]
    assert page.inner_text("#range") == f"(1–12 of {total})"
    input_image = page.locator("#input-pictures img")
    assert "heat=r7" in input_image.get_attribute("src")
    similar = page.locator("#similar img")
    assert similar.count() == 12
    assert all("heat=r7" in similar.nth(i).get_attribute("src") for i in range(12))
    captions = page.locator("#similar figcaption a").all_inner_texts()
    items = data["similar"]["items"]
    assert captions == [f"#{item['rank']} ref {item['reference']}" for item in items]
    assert page.evaluate("() => document.querySelector('#similar img').naturalWidth") == 112
    session.shot("explanation", keep=True)

    page.check("input[name=view][value=image]")
    assert "heat=" not in input_image.get_attribute("src")
    assert "heat=" not in similar.nth(3).get_attribute("src")
    page.wait_for_function(LOADED, arg="#explanation img")
    session.shot("explanation-images")
    page.keyboard.press("h")
    assert "heat=r7" in input_image.get_attribute("src")

    page.click("#next")
    page.wait_for_function("() => document.querySelector('#range').textContent.startsWith('(13')")
    assert page.locator("#similar figcaption a").first.inner_text().startswith("#13 ")
    page.click("#prev")
    page.wait_for_function("() => document.querySelector('#range').textContent.startsWith('(1–')")
    assert page.is_disabled("#prev")


def test_zoom(session):
    page = session.page
    session.explain_id(7)
    target = page.locator("#similar img").nth(1)
    key = target.get_attribute("data-key")
    target.click()
    page.wait_for_selector("#zoom[open]")
    page.wait_for_function(LOADED, arg="#zoom-image")
    box = page.locator("#zoom-image").bounding_box()
    assert box["width"] >= 400, "zoomed in"
    assert "heat=r7" in page.locator("#zoom-image").get_attribute("src")
    session.shot("zoom", keep=True)
    page.click("#zoom-toggle")
    assert "heat=" not in page.locator("#zoom-image").get_attribute("src")
    page.click("#zoom-toggle")
    page.keyboard.press("Escape")
    page.locator("#zoom").wait_for(state="hidden")

    target.click()
    page.click("#zoom-explain")
    page.wait_for_selector(f"#explanation[data-key={key}]")
    assert page.inner_text("#title") == f"Reference image {key[1:]}"
    assert not page.locator("#zoom").get_attribute("open")


def test_upload_is_explained_and_drawn_quickly(session):
    page = session.page
    session.explain_id(3)
    viewer = small_app().state.viewer
    pixels = viewer.workspace.data.unseen.pixels(1)
    digit = {"name": "digit.png", "mimeType": "image/png", "buffer": png_bytes(pixels[0])}
    start = time.perf_counter()
    page.set_input_files("#upload", files=[digit])
    page.wait_for_function("() => document.querySelector('#explanation').dataset.key[0] === 'u'")
    page.wait_for_function(LOADED, arg="#explanation img")
    seconds = time.perf_counter() - start
    print(f"upload explained and drawn in {1000 * seconds:.0f} ms")
    assert seconds < 5
    assert page.inner_text("#title") == "Uploaded image"
    e = viewer.interpreter.explain(viewer.workspace.normalization(as_uploaded(pixels)))
    assert page.inner_text("[data-fact=class]") == str(e.predicted_class)
    assert page.locator("[data-fact=label]").count() == 0
    assert page.locator("#similar img").count() == min(12, e.representativeness)
    assert page.is_hidden("#error")
    session.shot("upload", keep=True)


def test_broken_upload_shows_a_message_and_the_page_keeps_working(session):
    page = session.page
    broken = {"name": "broken.png", "mimeType": "image/png", "buffer": b"not an image at all"}
    page.set_input_files("#upload", files=[broken])
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#error") == "upload failed: the upload is not a PNG or JPEG image"
    session.shot("broken-upload")
    session.explain_id(11)
    assert page.is_hidden("#error")


def test_traversal_paths_are_404(session):
    page = session.page
    for path in ("/api/image/..%2F..%2F..%2Fetc%2Fpasswd.png", "/static/../../../etc/passwd"):
        response = page.goto(session.base + path)
        assert response.status == 404, path
        assert "root:" not in page.content()
    page.goto("/")


def test_nothing_loads_from_elsewhere_and_no_script_errors(session):
    assert session.requests
    assert all(url.startswith(session.base + "/") for url in session.requests)
    expected = "Failed to load resource: the server responded with a status of 4"
    assert [error for error in session.errors if not error.startswith(expected)] == []
