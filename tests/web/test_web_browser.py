"""The viewer in headless Chromium (Debian's ``chromium``, driven by Playwright), used as a person
would: the gallery of distinct polytopes, an image by id, heat maps (colour bar, opacity,
colormap, side by side), labelled numbers, similar images, compare, zoom and keyboard, paging,
uploads, errors next to their control, an unknown address, exports, dark mode, a traversal path.

Without a browser these tests say so and skip, except under ``CI=true`` where they fail.
Screenshots go to a temporary folder, and those of the landing page, an explanation, compare,
zoom and an error, at desktop and phone width, to ``/tmp/web-shots/``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from repinterp.core.config import FitConfig
from repinterp.core.interpretation import METRIC_MEANINGS
from repinterp.core.regions import RegionSet
from repinterp.store.regions_file import save_regions
from repinterp.strategies.granularity import StrategySet
from repinterp.web import create_app
from repinterp.workspace import fit_workspace, open_index

from .test_web import N_REGIONS, as_uploaded, png_bytes, running, saved_copy, small_app

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # headless Chromium

SHOTS = Path("/tmp/web-shots")
TIMEOUT_MS = 30_000
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
LOADED = "s => [...document.querySelectorAll(s)].every(i => i.complete && i.naturalWidth > 0)"
METHOD_NAMES = ["RI", "Grad-CAM", "Grad-CAM++", "Score-CAM"]

# Text nodes with a digit that are shown and have no tooltip (title) on themselves or above.
UNLABELLED_NUMBERS = """() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const bad = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!/[0-9]/.test(node.textContent)) continue;
    if (parent.closest("script, style, .hint, #legend")) continue;  // prose, not numbers
    if (!parent.checkVisibility() || parent.closest("option")) continue;
    const titled = parent.closest("[title]");
    if (!titled || !titled.title.trim()) bad.push(node.textContent.trim());
  }
  return bad;
}"""

# Shown images that have not loaded, or are one flat colour.
BLANK_IMAGES = """s => [...document.querySelectorAll(s)].filter(i => i.checkVisibility())
.filter(i => {
  if (!i.complete || i.naturalWidth === 0) return true;
  const canvas = document.createElement("canvas");
  canvas.width = i.naturalWidth; canvas.height = i.naturalHeight;
  const context = canvas.getContext("2d");
  context.drawImage(i, 0, 0);
  const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
  for (let k = 4; k < data.length; k += 4) {
    if (data[k] !== data[0] || data[k + 1] !== data[1] || data[k + 2] !== data[2]) return false;
  }
  return true;
}).map(i => i.src)"""

BOXES = "s => [...document.querySelectorAll(s)].map(b => [b.offsetWidth, b.offsetHeight])"


@dataclass
class Session:
    """A browser tab on the viewer, with every URL it requested and every script error."""

    page: Any
    base: str
    shots: Path
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def shot(self, name: str, keep: bool = False, full_page: bool = True) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=path, full_page=full_page)
        if keep:
            SHOTS.mkdir(exist_ok=True)
            shutil.copy(path, SHOTS / path.name)
        return path

    def explain_id(self, reference: int) -> None:
        self.page.fill("#ref-id", str(reference))
        self.page.click("#by-id button[type=submit]")
        self.page.wait_for_selector(f"#explanation[data-key=r{reference}]:not([hidden])")
        self.page.wait_for_function(LOADED, arg="#explanation img")


def _tab(browser, base: str, shots: Path, viewport: dict, **options: Any) -> tuple[Any, Session]:
    context = browser.new_context(viewport=viewport, base_url=base, **options)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    tab = Session(page, base, shots)
    page.on("request", lambda request: tab.requests.append(request.url))
    page.on("pageerror", lambda error: tab.errors.append(str(error)))
    page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    return context, tab


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running(small_app()) as base:
        yield base


@pytest.fixture(scope="module")
def session(browser, server, tmp_path_factory) -> Iterator[Session]:
    context, tab = _tab(browser, server, tmp_path_factory.mktemp("shots"), DESKTOP)
    tab.page.goto("/")
    yield tab
    context.close()


def _api(session: Session, path: str) -> dict[str, Any]:
    return session.page.request.get(path).json()


def _percent(x: float) -> str:
    return f"{100 * x:.2f}\xa0%"


def _regions_ready(session: Session) -> list[dict[str, Any]]:
    session.page.wait_for_selector(".region", timeout=120_000)
    session.page.wait_for_function(LOADED, arg="#gallery img")
    return _api(session, "/api/regions")["regions"]


# ----------------------------------------------------------------------------- gallery
def test_gallery_has_one_card_per_polytope_sorted_and_filtered_by_class(session):
    page = session.page
    cards = _regions_ready(session)
    assert "4000 reference images" in page.inner_text("#info")
    assert page.locator(".region").count() == len(cards)
    shown = page.eval_on_selector_all(".region", "cards => cards.map(c => c.dataset.key)")
    assert shown == [card["key"] for card in cards]
    polytopes = {(card["predicted_class"], tuple(card["boundaries"])) for card in cards}
    assert len(polytopes) == len(cards), "no two cards show the same P"
    first = page.locator(".region").first
    assert first.locator("h3").inner_text() == f"class {cards[0]['class_name']}"
    assert f"covers {cards[0]['representativeness']}" in first.inner_text()
    assert f"interprets {cards[0]['interpreted']}" in first.inner_text()
    assert first.locator(".covered .pic").count() == len(cards[0]["covered"])
    status = page.inner_text("#regions-status")
    finds = _api(session, "/api/regions")["finds"]  # what RI finds, in one sentence
    assert finds.startswith(f"{len(cards)} polytopes for ")
    assert status == (
        f"{len(cards)} distinct polytopes (cards) stand for {N_REGIONS} of the {N_REGIONS} "
        f"k-means regions and interpret 4000 of the 4000 reference images. {finds}."
    )

    by_class: dict[str, list[dict[str, Any]]] = {}
    for card in cards:
        by_class.setdefault(str(card["predicted_class"]), []).append(card)
    options = page.eval_on_selector_all("#class-filter option", "o => o.map(x => x.textContent)")
    assert options[0] == f"all ({len(cards)})"
    assert sum(int(o.split("(")[1].rstrip(")")) for o in options[1:]) == len(cards)
    chosen = max(by_class, key=lambda c: len(by_class[c]))
    page.select_option("#class-filter", chosen)
    headings = page.locator(".region h3").all_inner_texts()
    assert headings == [f"class {chosen}"] * len(by_class[chosen])
    regions = sum(len(card["regions"]) for card in by_class[chosen])
    interpreted = sum(card["interpreted"] for card in by_class[chosen])
    assert page.inner_text("#regions-status").startswith(
        f"{len(by_class[chosen])} distinct polytopes of class {chosen} (cards) stand for "
        f"{regions} of the {N_REGIONS} k-means regions and interpret {interpreted} of the 4000"
    )
    page.select_option("#class-filter", "")
    page.select_option("#sort", "class")
    classes = [int(h.split()[1]) for h in page.locator(".region h3").all_inner_texts()]
    assert classes == sorted(classes)
    page.select_option("#sort", "representativeness")
    session.shot("landing", keep=True)

    first.locator("h3 a").click()
    page.wait_for_selector(f"#explanation[data-key={cards[0]['key']}]:not([hidden])")
    assert page.inner_text("#title") == f"Reference image {cards[0]['reference']}"


# ----------------------------------------------------------------------------- explanation
def test_the_input_can_show_the_contrastive_map_of_another_class(session):
    page = session.page
    session.explain_id(7)
    data = _api(session, "/api/explain/r7")
    c = data["predicted_class"]
    options = page.eval_on_selector_all("#contrast option", "o => o.map(x => x.value)")
    assert options == [""] + [str(k) for k in range(10) if k != c]  # every other class
    other = (c + 1) % 10
    page.select_option("#contrast", str(other))
    page.wait_for_function(LOADED, arg="#input-pictures img")
    source = page.locator("#input-pictures img.heat").get_attribute("src")
    assert "heat=r7" in source and f"contrast={other}" in source
    assert page.evaluate(BLANK_IMAGES, "#input-pictures img") == []
    caption = page.locator("#input-pictures .pic").get_attribute("aria-label")
    assert f"why {c} rather than {other}" in caption
    assert "beyond the paper" in page.locator("#contrast").get_attribute("title")
    page.select_option("#contrast", "")
    assert "contrast=" not in page.locator("#input-pictures img.heat").get_attribute("src")


def test_image_by_id_with_heat_maps_similar_images_and_paging(session):
    page = session.page
    session.explain_id(7)
    data = _api(session, "/api/explain/r7")
    assert page.inner_text("#title") == "Reference image 7"
    assert page.inner_text("[data-fact=class]") == data["class_name"]
    assert page.inner_text("[data-fact=score]") == _percent(data["score"])
    assert page.inner_text("[data-fact=delta]") == str(data["delta"])
    assert page.inner_text("[data-fact=boundaries]") == f"{len(data['boundaries'])} of 20"
    rep = page.inner_text("[data-fact=representativeness]")
    assert rep == f"{data['representativeness']} of 4000 reference images"
    total = data["similar"]["total"]
    assert total == data["representativeness"] - 1
    assert page.inner_text("#range") == f"(1–12 of {total})"
    assert "The input itself (Dist 0) is left out." in page.inner_text("#similar-hint")
    assert "heat=r7" in page.locator("#input-pictures img.heat").get_attribute("src")
    heat = page.locator("#similar img.heat")
    assert heat.count() == 12
    assert all("heat=r7" in heat.nth(i).get_attribute("src") for i in range(12))
    captions = page.locator("#similar figcaption a").all_inner_texts()
    items = data["similar"]["items"]
    assert captions == [f"#{item['rank']} ref {item['reference']}" for item in items]
    assert "#1 ref 7" not in captions
    first = page.locator("#similar figcaption").first.inner_text().splitlines()
    assert first[1:] == [
        f"Dist {items[0]['distance']:.2f}",
        f"score {_percent(items[0]['score'])}",
        f"label {items[0]['label']}",
    ]
    assert page.evaluate("() => document.querySelector('#similar img').naturalWidth") == 112
    session.shot("explanation", keep=True, full_page=False)

    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('#range').textContent.startsWith('(13')")
    assert page.locator("#similar figcaption a").first.inner_text().startswith("#13 ")
    page.click("#prev")
    page.wait_for_function("() => document.querySelector('#range').textContent.startsWith('(1–')")
    assert page.is_disabled("#prev")


def test_heat_maps_colour_bar_opacity_colormap_and_side_by_side(session):
    page = session.page
    session.explain_id(7)
    bar = page.eval_on_selector("#colorbar .bar", "b => getComputedStyle(b).backgroundImage")
    assert bar.startswith("linear-gradient") and "rgb(0, 0, 4)" in bar, "inferno, 0 first"
    caption = page.inner_text("#colorbar figcaption")
    assert "0 = coldest pixel" in caption and "per-image min-max" in caption
    assert "1 = hottest" in caption
    heat = "#input-pictures img.heat"
    assert page.eval_on_selector(heat, "i => getComputedStyle(i).opacity") == "0.55"
    page.fill("#opacity", "30")
    assert page.eval_on_selector(heat, "i => getComputedStyle(i).opacity") == "0.3"
    assert page.inner_text("#opacity-value") == "30 %"

    page.select_option("#cmap", "viridis")
    assert "cmap=viridis" in page.get_attribute(heat, "src")
    page.wait_for_function(LOADED, arg="#explanation img")
    bar = page.eval_on_selector("#colorbar .bar", "b => getComputedStyle(b).backgroundImage")
    assert "rgb(68, 1, 84)" in bar, "viridis starts dark purple"

    page.check("input[name=view][value=side]")
    base = page.locator("#input-pictures img.base").bounding_box()
    beside = page.locator(heat).bounding_box()
    assert beside["x"] >= base["x"] + base["width"] and beside["y"] == base["y"]
    assert page.eval_on_selector(heat, "i => getComputedStyle(i).opacity") == "1"
    session.shot("side-by-side")
    page.check("input[name=view][value=image]")
    assert not page.locator(heat).is_visible()
    page.keyboard.press("h")
    assert page.locator(heat).is_visible(), "h: back to the last heat-map view"
    assert page.is_checked("input[name=view][value=side]")
    page.check("input[name=view][value=overlay]")
    page.fill("#opacity", "55")
    page.select_option("#cmap", "inferno")


def test_every_number_has_a_label_and_no_image_is_blank(session):
    page = session.page
    _regions_ready(session)
    session.explain_id(7)
    page.click("#compare-button")
    page.wait_for_function("() => !document.querySelector('.compare-row.loading')", timeout=120_000)
    page.wait_for_function(LOADED, arg="img")
    assert page.evaluate(UNLABELLED_NUMBERS) == []
    assert page.evaluate(BLANK_IMAGES, "img") == []
    page.locator("#similar .pic").first.click()
    page.wait_for_function(LOADED, arg="#zoom img")
    assert page.evaluate(UNLABELLED_NUMBERS) == []
    page.keyboard.press("Escape")
    glossary = page.inner_text("#glossary")
    for name in ("score", "masked", "Dist (semantic)", "τ(x)", "|P(x)|", "representativeness |R|"):
        assert f"{name}\n" in glossary, name
    assert METRIC_MEANINGS["semantic"] in glossary, "the distance shown, named by its metric"
    assert "most similar first by Dist (semantic)" in page.inner_text("#similar-hint")


def test_placeholders_have_the_final_size_while_images_load(browser, server, tmp_path):
    sizes = {}
    for held in (False, True):
        context, tab = _tab(browser, server, tmp_path, DESKTOP)
        if held:  # image requests never answered: every picture stays a placeholder
            tab.page.route("**/api/image/**", lambda route: None)
        tab.page.goto("/#r7")
        tab.page.wait_for_selector("#explanation:not([hidden])")
        tab.page.wait_for_selector(".region", timeout=120_000)
        if not held:
            tab.page.wait_for_function(LOADED, arg="img")
        else:
            assert tab.page.locator(".pic.loading").count() == tab.page.locator(".pic").count()
        sizes[held] = tab.page.evaluate(BOXES, ".pic")
        context.close()
    assert sizes[True] == sizes[False]
    assert all(width > 0 and height > 0 for width, height in sizes[True])


# ----------------------------------------------------------------------------- zoom, keyboard
def test_zoom(session):
    page = session.page
    session.explain_id(7)
    target = page.locator("#similar .pic").nth(1)
    key = target.get_attribute("data-key")
    target.click()
    page.wait_for_selector("#zoom[open]")
    page.wait_for_function(LOADED, arg="#zoom img")
    box = page.locator("#zoom-picture .pic").bounding_box()
    assert box["width"] >= 400, "zoomed in"
    assert "heat=r7" in page.get_attribute("#zoom-picture img.heat", "src")
    assert page.inner_text("#zoom-caption") == f"#2: reference image {key[1:]} (2 of 12)"
    assert page.inner_text("#zoom-numbers").startswith("Dist ")
    session.shot("zoom", keep=True, full_page=False)
    page.click("#zoom-toggle")
    assert not page.locator("#zoom-picture img.heat").is_visible()
    page.click("#zoom-toggle")
    page.keyboard.press("Escape")
    page.locator("#zoom").wait_for(state="hidden")

    target.click()
    page.click("#zoom-explain")
    page.wait_for_selector(f"#explanation[data-key={key}]")
    assert page.inner_text("#title") == f"Reference image {key[1:]}"
    assert not page.locator("#zoom").get_attribute("open")


def test_tab_reaches_every_zoomable_image_enter_opens_arrows_step(session):
    page = session.page
    _regions_ready(session)
    session.explain_id(7)
    zoomable = page.eval_on_selector_all(".pic.zoomable", "p => p.map(x => x.dataset.caption)")
    page.focus("#ref-id")
    reached = set()
    for _ in range(len(zoomable) + 40):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("() => document.activeElement.dataset.caption ?? null"))
    assert set(zoomable) <= reached

    page.focus("#similar .pic >> nth=0")
    page.keyboard.press("Enter")
    page.wait_for_selector("#zoom[open]")
    captions = page.eval_on_selector_all("#similar .pic", "p => p.map(x => x.dataset.caption)")
    assert page.inner_text("#zoom-caption").startswith(captions[0])
    page.keyboard.press("ArrowRight")
    assert page.inner_text("#zoom-caption").startswith(captions[1])
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")  # the first stays the first
    assert page.inner_text("#zoom-caption").startswith(captions[0])
    assert page.is_disabled("#zoom-prev")
    page.keyboard.press("Escape")
    page.locator("#zoom").wait_for(state="hidden")
    assert page.evaluate("() => document.activeElement.dataset.caption") == captions[0]


# ----------------------------------------------------------------------------- compare, export
def test_compare_shows_four_methods_with_masked_scores(session):
    page = session.page
    session.explain_id(11)
    assert not [url for url in session.requests if "/api/compare/r11" in url], "not on load"
    page.click("#compare-button")
    page.wait_for_function("() => !document.querySelector('.compare-row.loading')", timeout=120_000)
    page.wait_for_function(LOADED, arg="#compare img")
    rows = page.locator(".compare-row")
    assert rows.count() == 4
    names = page.locator(".compare-row h4").all_inner_texts()
    assert [name.split("·")[0].strip() for name in names] == METHOD_NAMES
    for i, method in enumerate(["ri", "gradcam", "gradcampp", "scorecam"]):
        data = _api(session, f"/api/compare/r11?method={method}&k=4")
        row = rows.nth(i)
        mean = _percent(data["mean_masked_score"])
        assert f"mean masked {mean}" in row.locator("h4").inner_text()
        cells = row.locator("figcaption").all_inner_texts()
        assert len(cells) == 5 == len(data["items"])
        for cell, item in zip(cells, data["items"], strict=True):
            assert cell.splitlines()[-1] == f"masked {_percent(item['masked_score'])}"
        heat = row.locator("img.heat").first.get_attribute("src")
        assert "heat=r11" in heat and (method == "ri" or f"method={method}" in heat)
    page.evaluate("() => document.querySelector('#compare').scrollIntoView()")
    session.shot("compare", keep=True, full_page=False)
    page.click("#compare-button")
    assert page.is_hidden("#compare")


def test_export_png_and_json(session, tmp_path):
    page = session.page
    session.explain_id(7)
    with page.expect_download() as download:
        page.click("#export-json")
    path = tmp_path / "r7.json"
    download.value.save_as(path)
    assert download.value.suggested_filename == "repinterp-r7.json"
    assert json.loads(path.read_text()) == _api(session, "/api/export/r7.json")
    assert page.input_value("#opacity") == str(_api(session, "/api/info")["default_opacity"])
    page.fill("#opacity", "30")
    page.select_option("#cmap", "viridis")
    with page.expect_download() as download, page.expect_request("**/api/export/**") as sent:
        page.click("#export-png")
    download.value.save_as(tmp_path / "r7.png")
    assert (tmp_path / "r7.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sent.value.url.endswith("/api/export/r7.png?opacity=30&cmap=viridis")  # as shown
    page.fill("#opacity", "55")
    page.select_option("#cmap", "inferno")


# ----------------------------------------------------------------------------- uploads, errors
def test_upload_is_explained_and_drawn(session):
    page = session.page
    session.explain_id(3)
    viewer = small_app().state.viewer
    pixels = viewer.workspace.data.unseen.pixels(1)
    digit = {"name": "digit.png", "mimeType": "image/png", "buffer": png_bytes(pixels[0])}
    page.set_input_files("#upload", files=[digit])
    page.wait_for_function("() => document.querySelector('#explanation').dataset.key[0] === 'u'")
    page.wait_for_function(LOADED, arg="#explanation img")
    assert page.inner_text("#title") == "Uploaded image"
    e = viewer.interpreter.explain(viewer.workspace.normalization(as_uploaded(pixels)))
    assert page.inner_text("[data-fact=class]") == str(e.predicted_class)
    assert page.locator("[data-fact=label]").count() == 0
    assert page.locator("#similar .pic").count() == min(12, e.representativeness)
    assert page.is_hidden("#upload-error")
    session.shot("upload", keep=True)


def _next_to(page, message: str, control: str) -> None:
    """The error ``message`` is shown, and close to (within 120 px below) ``control``."""
    error = page.locator(f".error:not([hidden]):has-text('{message}')")
    error.wait_for()
    assert page.locator(".error:not([hidden])").count() == 1
    below = error.bounding_box()["y"] - page.locator(control).bounding_box()["y"]
    assert 0 < below < 120, below


def test_errors_appear_next_to_their_control_and_go_away(session):
    page = session.page
    session.explain_id(11)
    broken = {"name": "broken.png", "mimeType": "image/png", "buffer": b"not an image at all"}
    page.set_input_files("#upload", files=[broken])
    _next_to(page, "upload failed: the upload is not a PNG or JPEG image", "#upload")
    page.evaluate("() => window.scrollTo(0, 0)")
    session.shot("error", keep=True, full_page=False)
    session.explain_id(12)
    assert page.locator(".error:not([hidden])").count() == 0

    page.fill("#ref-id", "4000")
    page.click("#by-id button[type=submit]")
    _next_to(page, "choose a reference image from 0 to 3999", "#ref-id")
    page.click("#random")
    page.wait_for_function("() => !document.querySelector('.error:not([hidden])')")

    page.route("**/api/export/**", lambda route: route.fulfill(status=500, body="{}"))
    page.click("#export-json")
    _next_to(page, "export failed: 500", "#export-json")
    page.unroute("**/api/export/**")
    page.select_option("#sort", "class")
    assert page.locator(".error:not([hidden])").count() == 0
    page.select_option("#sort", "representativeness")


def test_an_unknown_address_says_not_found(session):
    page = session.page
    session.explain_id(7)
    page.goto(session.base + "/#r99999")
    page.wait_for_selector("#not-found:not([hidden])")
    assert page.is_hidden("#explanation")
    text = page.inner_text("#not-found-message")
    assert text == "Nothing at #r99999: no reference image 99999: the index has 4000."
    page.evaluate("() => { location.hash = 'r5'; }")
    page.wait_for_selector("#explanation[data-key=r5]:not([hidden])")
    assert page.is_hidden("#not-found")


def test_dark_mode_follows_the_system_and_the_favicon_loads(browser, server, tmp_path):
    colours = {}
    for scheme in ("light", "dark"):
        context, tab = _tab(browser, server, tmp_path, PHONE, color_scheme=scheme)
        tab.page.goto("/")
        colours[scheme] = tab.page.evaluate("() => getComputedStyle(document.body).color")
        background = tab.page.evaluate(
            "() => getComputedStyle(document.documentElement).backgroundColor"
        )
        channels = [int(c) for c in background.removeprefix("rgb(").rstrip(")").split(",")]
        assert (sum(channels) < 150) == (scheme == "dark"), background
        icon = tab.page.get_attribute("link[rel=icon]", "href")
        assert tab.page.request.get(icon).status == 200
        assert tab.page.request.get("/favicon.ico").status == 200
        context.close()
    assert colours["light"] != colours["dark"]


def test_phone_width_screenshots(browser, server, tmp_path):
    context, tab = _tab(browser, server, tmp_path, PHONE, color_scheme="dark")
    page = tab.page
    page.goto("/")
    _regions_ready(tab)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    tab.shot("landing-phone", keep=True, full_page=False)
    tab.explain_id(7)
    tab.shot("explanation-phone", keep=True, full_page=False)
    page.click("#compare-button")
    page.wait_for_function("() => !document.querySelector('.compare-row.loading')", timeout=120_000)
    page.wait_for_function(LOADED, arg="#compare img")
    page.evaluate("() => document.querySelector('#compare').scrollIntoView()")
    tab.shot("compare-phone", keep=True, full_page=False)
    page.locator("#similar .pic").first.click()
    page.wait_for_function(LOADED, arg="#zoom img")
    tab.shot("zoom-phone", keep=True, full_page=False)
    page.keyboard.press("Escape")
    page.set_input_files(
        "#upload", files=[{"name": "b.png", "mimeType": "image/png", "buffer": b"x"}]
    )
    page.wait_for_selector("#upload-error:not([hidden])")
    page.evaluate("() => window.scrollTo(0, 0)")
    tab.shot("error-phone", keep=True, full_page=False)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    context.close()
    expected = "Failed to load resource: the server responded with a status of 400"
    assert [error for error in tab.errors if not error.startswith(expected)] == []


@pytest.fixture(scope="module")
def long_lists(tmp_path_factory) -> Iterator[str]:
    """A viewer whose 40 regions are the inputs of 3 polytopes of 3 classes (k-means regions
    kept in the index folder, here chosen): 3 cards, each with 13 or 14 regions."""
    folder = saved_copy(small_app().state.viewer.workspace, tmp_path_factory.mktemp("long"))
    workspace = open_index(folder, progress=False)
    ri = workspace.interpreter
    predictions = ri.index.predictions
    firsts = [int((predictions == c).nonzero()[0]) for c in predictions.unique()[:3].tolist()]
    inputs = torch.tensor(firsts).repeat_interleave(torch.tensor([14, 13, 13]))
    save_regions(RegionSet.from_centres(ri, ri.reference_features[inputs], inputs), folder, 0)
    with running(create_app(workspace, n_regions=len(inputs))) as base:
        yield base


# How far the page is wider than the window (horizontal scroll if > 0), and the parts of the
# gallery's cards wider than their box or sticking out of their card.
OVERFLOW = """() => {
  const page = document.documentElement;
  const parts = [...document.querySelectorAll(".region, .region > *, .region .num")];
  const out = parts.filter(e => {
    const card = e.closest(".region").getBoundingClientRect(), box = e.getBoundingClientRect();
    return e.scrollWidth > e.clientWidth + 1 || box.left < card.left || box.right > card.right;
  });
  return {wider: page.scrollWidth - page.clientWidth, out: out.map(e => e.outerHTML.slice(0, 60))};
}"""


def test_long_region_lists_fit_their_cards_at_phone_and_desktop_width(
    browser, long_lists, tmp_path
):
    for viewport in (PHONE, DESKTOP):
        context, tab = _tab(browser, long_lists, tmp_path, viewport)
        tab.page.goto("/")
        cards = _regions_ready(tab)
        assert sorted(len(card["regions"]) for card in cards) == [13, 13, 14]
        for view in ("overlay", "side"):
            tab.page.check(f"input[name=view][value={view}]")
            found = tab.page.evaluate(OVERFLOW)
            assert found["wider"] <= 0 and found["out"] == [], (viewport, view, found)
            tab.shot(f"long-lists-{viewport['width']}-{view}", keep=True)
        context.close()


@pytest.fixture(scope="module")
def sub_labelled() -> Iterator[str]:
    """A viewer of mnist-super (its digits the sub-labels) fitted at granularity strategy."""
    config = FitConfig(n_boundaries=20, granularity=StrategySet(), progress=False)
    workspace = fit_workspace("mnist_super_cnn", None, "mnist-super", config=config)
    with running(create_app(workspace, n_regions=N_REGIONS)) as base:
        yield base


SUB_LABELS = """() => [...document.querySelectorAll(".region:not(.strategy)")].map(card => {
  const sub = card.querySelector(".sub-labels");
  return sub && {text: sub.querySelector("b").textContent, title: sub.title,
    parts: [...sub.querySelectorAll(".composition span")].map(s => s.offsetWidth),
    bar: sub.querySelector(".composition").clientWidth};
})"""


def test_cards_show_their_sub_labels_and_the_header_the_granularity(
    browser, sub_labelled, server, tmp_path
):
    """On mnist-super each card shows the digits of the images it interprets, in words and as
    a bar cut in proportion, within its card at desktop and phone width; the header says the
    index's granularity with its settings. Without sub-labels (mnist5k), no card and no legend
    mentions them, and the header says the paper's granularity."""
    for viewport in (DESKTOP, PHONE):
        context, tab = _tab(browser, sub_labelled, tmp_path, viewport)
        page = tab.page
        page.goto("/")
        cards = _regions_ready(tab)
        info = _api(tab, "/api/info")
        assert info["granularity"] == "strategy" and info["sub_labels"] is True
        assert info["granularity_text"].startswith("granularity strategy (")
        assert page.inner_text("#info").endswith(f" · {info['granularity_text']}")
        shown = page.evaluate(SUB_LABELS)
        assert len(shown) == len(cards)
        for card, sub in zip(cards, shown, strict=True):
            counts = card["sub_labels"]
            assert sub["text"] == ", ".join(f"{c['name']}: {c['count']}" for c in counts)
            assert sub["title"].startswith("sub-labels: what the reference images")
            assert sum(c["count"] for c in counts) == card["interpreted"]
            widths = [sub["bar"] * c["count"] / card["interpreted"] for c in counts]
            assert all(abs(a - b) <= 1.5 for a, b in zip(sub["parts"], widths, strict=True)), (
                sub,
                widths,
            )
        found = page.evaluate(OVERFLOW)
        assert found["wider"] <= 0 and found["out"] == [], (viewport, found)
        assert "sub-labels" in page.inner_text("#glossary")
        assert page.evaluate(UNLABELLED_NUMBERS) == []  # each count is named by its tooltip
        tab.shot(f"granularity-{viewport['width']}", keep=True, full_page=False)
        page.evaluate("() => document.querySelector('#gallery').scrollIntoView()")
        tab.shot(f"sub-labels-{viewport['width']}", keep=True, full_page=False)
        context.close()
        assert tab.errors == []
    context, tab = _tab(browser, server, tmp_path, DESKTOP)
    tab.page.goto("/")
    _regions_ready(tab)
    assert tab.page.inner_text("#info").endswith(" · granularity class (the paper's RI)")
    assert tab.page.locator(".sub-labels").count() == 0
    assert "sub-labels" not in tab.page.inner_text("#glossary")
    context.close()


@pytest.fixture(scope="module")
def own_folder(tmp_path_factory) -> Iterator[str]:
    """A viewer of an image folder of 60 shapes images as a user lays them out:
    ``class/sub-group/file`` (the sub-groups its sub-labels), a third with long file names."""
    import numpy as np
    from PIL import Image

    from repinterp.data.datasets import load_dataset

    root = tmp_path_factory.mktemp("own") / "pictures"
    shapes = load_dataset("shapes").reference
    for i in range(60):
        sub = shapes.concept_names[int(shapes.concepts[i])]
        folder = root / shapes.class_names[int(shapes.labels[i])] / sub
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{sub}_{i:03d}" if i % 3 else f"{sub}_a_rather_long_file_name_{i:03d}"
        pixels = (shapes.pixels(i).permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{name}.png")
    config = FitConfig(n_boundaries=10, progress=False)
    workspace = fit_workspace("shapes_cnn", None, f"imagefolder:{root}", config=config)
    with running(create_app(workspace, n_regions=3)) as base:
        yield base


# Card parts wider than their box or sticking out of their card.
CARD_OVERFLOW = """() => [...document.querySelectorAll(".card, .card figcaption > *")].filter(e => {
  const card = e.closest(".card").getBoundingClientRect(), box = e.getBoundingClientRect();
  return e.scrollWidth > e.clientWidth + 1 || box.right > card.right + 0.5;
}).map(e => e.textContent.slice(0, 60))"""

TOP = "s => document.querySelector(s).getBoundingClientRect().top"
BOTTOM = "s => document.querySelector(s).getBoundingClientRect().bottom"


def test_a_bookmarked_image_of_an_own_folder_lands_below_the_bar_its_names_in_their_cards(
    browser, own_folder, tmp_path
):
    """A bookmarked ``#r10`` scrolls the explanation's title just below the sticky heat-map
    bar, with the image chooser above it hidden under the bar, not cut by it; long file names
    wrap inside their cards at desktop and phone width; the folder's sub-folders are the
    gallery's sub-labels."""
    for viewport in (DESKTOP, PHONE):
        context, tab = _tab(browser, own_folder, tmp_path, viewport)
        page = tab.page
        page.goto("/#r10")
        page.wait_for_selector("#explanation[data-key=r10]:not([hidden])")
        page.wait_for_function(LOADED, arg="#explanation img")
        title, bar = page.evaluate(TOP, "#title"), page.evaluate(BOTTOM, "#heat-controls")
        if viewport is DESKTOP:  # the bar is sticky on wide screens only
            assert bar <= title <= bar + 24 and page.evaluate(BOTTOM, "#choose") <= bar
        else:
            assert 0 <= title <= 24
        tab.shot(f"bookmark-{viewport['width']}", keep=True, full_page=False)
        assert "rather_long_file_name" in page.inner_text("#similar")
        assert page.evaluate(CARD_OVERFLOW) == []
        assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport["width"]
        page.evaluate("() => document.querySelector('#similar').scrollIntoView()")
        tab.shot(f"own-cards-{viewport['width']}", keep=True, full_page=False)
        _regions_ready(tab)
        shown = page.inner_text("#gallery .sub-labels")
        assert "circle or ring/ring:" in shown or "circle or ring/circle:" in shown, shown
        context.close()
        assert tab.errors == []


# ----------------------------------------------------------------------------- safety
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
    expected = "Failed to load resource: the server responded with a status of "
    deliberate = ("400", "404", "500")  # the broken upload, r99999, the failed export
    assert [e for e in session.errors if not e.startswith(expected)] == []
    statuses = {e.removeprefix(expected)[:3] for e in session.errors}
    assert statuses <= set(deliberate)
