"""What a notebook shows for an ``Interpretation`` and a ``RegionSet`` (``_repr_html_``): the
input and its similar images as inline PNGs whose pixels are the images', the reused heat maps
with a colour bar, every number named, and, where the pixels cannot be reached, what can be
drawn and one line saying how to draw the rest."""

from __future__ import annotations

import base64
import html
import io
import re

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import TensorDataset

from repinterp import RepresentativeInterpreter, display
from repinterp.core.groups import polytope_key
from repinterp.core.heatmap import normalize_maps
from repinterp.core.interpretation import METRIC_MEANINGS
from repinterp.core.regions import RegionSet, distinct_polytopes
from repinterp.core.views import render
from repinterp.data.datasets import ImageSet, Normalization
from repinterp.display.colours import overlay
from repinterp.display.html import COLOUR_BAR_HEIGHT, COLOUR_BAR_WIDTH, displayable

from ..networks import fit_random, random_setup

pytestmark = pytest.mark.usefixtures("one_thread")

PNG = '<img src="data:image/png;base64,'
NAMES = ["zero", "one", "two", "<three>"]


def _pictures(page: str) -> list[tuple[str, np.ndarray]]:
    """Every inline PNG of ``page``: ``(alt text, pixels as uint8)``, in order."""
    found = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]*)"', page)
    return [
        (alt, np.asarray(Image.open(io.BytesIO(base64.b64decode(data))))) for data, alt in found
    ]


def _uint8(image: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(image * 255), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def fitted():
    """An interpreter fitted (with its feature maps) on 200 images, and the images."""
    return fit_random(200, 20, keep_features=True, class_names=NAMES)


def test_the_strip_shows_the_input_and_its_similar_images_with_their_heat_maps(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[3])
    assert e.image is not None and torch.equal(e.image, images[3])
    page = e._repr_html_()
    top = e.similar(8)
    assert 1 < len(top) <= 8
    pictures = _pictures(page)
    # input and each similar image: its pixels, then its heat map over them, the rows named
    assert [alt for alt, _ in pictures] == ["image", "heat map"] * (1 + len(top))
    assert 'aria-label="colour bar: inferno"' in page
    header = re.search(r'<div class="ri-rows".*?</div></div>', page).group(0)
    assert re.findall(r">([^<>]+)</div>", header) == ["image", "P(x)&#x27;s heat map over it"]
    shown = torch.cat([images[3:4], images[top]])
    pixels, scaled = displayable(shown)
    assert scaled  # the images are normalised inputs, not [0, 1] pixels
    maps = e.heatmap(shown).cpu()
    for n in range(len(shown)):
        assert np.array_equal(pictures[2 * n][1], _uint8(pixels[n, 0].numpy()))
        # drawn as the viewer and the report draw it: the map min-max scaled for its colours
        expected = _uint8(overlay(pixels[n], normalize_maps(maps[n]), 0.5, "inferno"))
        assert np.abs(pictures[2 * n + 1][1].astype(int) - expected).max() <= 1
    assert maps.amax((1, 2)).min() < 0.99  # the numbers, a mean of min-max maps, are not
    assert "min-max scaled" in page
    assert "the mean of its boundaries&#x27; min-max maps, the paper&#x27;s §5.1" in page


def test_every_number_is_named_and_each_distance_names_its_metric(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[10])
    for metric in ("semantic", "euclidean"):
        page = e.show(k=5, metric=metric).html
        name = f"{e.predicted_class} ({html.escape(NAMES[e.predicted_class])})"
        assert f"<b>predicted class</b> {name}" in page
        assert f"<b>score</b> {e.score:.3f}" in page
        assert f"<b>delta</b> {e.delta}" in page
        assert f"<b>representativeness</b> {e.representativeness} of 200" in page
        assert f"<b>|P|</b> {e.boundary_ids.numel()}" in page
        distances = dict(zip(e.covered.tolist(), e.distances(metric).tolist(), strict=True))
        for rank, row in enumerate(e.similar(5, metric).tolist()):
            assert f"#{rank + 1}: reference {row}<br>{metric} distance {distances[row]:.4g}" in page
        assert html.escape(METRIC_MEANINGS[metric]) in page
        assert "0 (coldest)" in page and "1 (hottest)" in page
    assert "<three>" not in e.show().html  # class names are escaped


def test_a_loaded_interpreter_draws_the_heat_maps_and_says_how_to_draw_the_images(
    fitted, tmp_path
) -> None:
    ri, images = fitted
    ri.save(tmp_path / "index")
    loaded = RepresentativeInterpreter.load(tmp_path / "index", ri.model)
    assert loaded.reference is None
    e = loaded.explain(images[3])
    k = min(8, e.representativeness)
    page = e._repr_html_()
    # the input is known; the reference images are not, but their kept feature maps give the
    # heat maps, drawn alone
    assert [alt for alt, _ in _pictures(page)].count("heat map") == 1 + k
    assert page.count('alt="image"') == 1
    assert page.count(">image not held</div>") == k  # the rows still line up
    assert "e.show(reference)" in page
    full = e.show(reference=images).html
    assert full.count('alt="image"') == 1 + k and "e.show(reference)" not in full
    assert full == ri.explain(images[3]).show().html
    with pytest.raises(ValueError, match="holds 199 images; the index was fitted on 200"):
        e.show(reference=images[:199])


def test_without_feature_maps_or_images_the_numbers_are_still_shown(tmp_path) -> None:
    ri, images = fit_random(200, 20)
    ri.save(tmp_path / "index")
    e = RepresentativeInterpreter.load(tmp_path / "index", ri.model).explain_reference([7])[0]
    page = e._repr_html_()
    assert PNG not in page
    assert f"<b>representativeness</b> {e.representativeness} of 200" in page
    assert "e.show(image=x) draws it and its heat map" in page
    assert "draws the images and their heat maps" in page
    drawn = e.show(reference=images, image=images[7]).html
    assert drawn.count(PNG) == 2 * (1 + min(8, e.representativeness))


def test_a_dataset_reference_set_is_drawn_from_the_dataset() -> None:
    model, images = random_setup(n=120)
    labels = torch.arange(120) % 4
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=10, progress=False)
    ri.fit(TensorDataset(images, labels))
    e = ri.explain(images[0])
    rows = e.similar(8)
    pictures = [p for alt, p in _pictures(e._repr_html_()) if alt == "image"]
    pixels, _ = displayable(images[rows])
    assert len(pictures) == 1 + len(rows)
    for picture, expected in zip(pictures[1:], pixels, strict=True):
        assert np.array_equal(picture, _uint8(expected[0].numpy()))


def test_an_empty_polytope_shows_its_message_and_no_heat_map() -> None:
    model, images = random_setup(n=100)
    with torch.no_grad():
        model[-1].bias[0] += 1e4  # every image is predicted class 0: D(x) is empty
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=5, progress=False).fit(images)
    e = ri.explain(images[1])
    assert not e.has_heatmap
    page = e._repr_html_()
    assert html.escape(e.message) in page
    assert "heat map" not in [alt for alt, _ in _pictures(page)]
    assert "ri-colour-bar" not in page and page.count('alt="image"') == 1 + 8


def test_a_region_set_shows_one_card_per_distinct_polytope(fitted) -> None:
    ri, _ = fitted
    regions = ri.regions(n_regions=12, seed=0)
    polytopes = distinct_polytopes(regions)
    page = regions._repr_html_()
    assert page.count('class="ri-tile"') == len(polytopes) < len(regions)
    assert f"{len(polytopes)} distinct polytopes" in repr(regions)
    assert page.count('alt="image"') == page.count('alt="heat map"') == len(polytopes)
    interpreted = [int(n) for n in re.findall(r"interprets (\d+)", page)]
    assert interpreted == [p.interpreted for p in polytopes] and sum(interpreted) == 200
    for p in polytopes:
        regions_line = f"regions {len(p.regions)}: {', '.join(map(str, p.regions))}"
        assert f"{regions_line}<br>interprets {p.interpreted}" in page
        assert f"input: reference {p.inputs[0]}" in page


def test_regions_sharing_a_polytope_are_one_card(fitted) -> None:
    ri, _ = fitted
    inputs = torch.tensor([5, 7, 5, 20, 7])
    features = ri.reference_features
    explanations = ri.explain_reference(inputs)
    assert polytope_key(explanations[1]) != polytope_key(explanations[3])
    regions = RegionSet(ri, inputs, explanations, features[inputs].clone())
    polytopes = distinct_polytopes(regions)
    assert sorted(p.regions for p in polytopes) == [[0, 2], [1, 4], [3]]
    assert sum(p.interpreted for p in polytopes) == 200
    assert regions._repr_html_().count('class="ri-tile"') == 3


def test_a_true_label_is_shown_beside_a_mispredicted_similar_image() -> None:
    model, images = random_setup(n=200)
    predicted = model(images).argmax(1)
    options = {"n_boundaries": 20, "progress": False}
    first = RepresentativeInterpreter(model, "relu2", **options).fit(images)
    e = first.explain(images[3])
    wrong, right = e.similar(2).tolist()
    labels = predicted.clone()
    labels[wrong] = (predicted[wrong] + 1) % 4  # the model mispredicts this one
    ri = RepresentativeInterpreter(model, "relu2", **options)
    ri.fit(TensorDataset(images, labels), class_names=NAMES, keep_features=True)
    e = ri.explain(images[3])
    assert e.similar(2).tolist() == [wrong, right]  # labels do not change the index

    def name(c: torch.Tensor) -> str:
        return f"{int(c)} ({html.escape(NAMES[int(c)])})"

    given = (labels[3] + 1) % 4
    page = e.show(label=int(given)).html
    score = ri.index.logits[wrong].softmax(0).max()
    distance = e.distances()[e.covered == wrong].item()
    assert (
        f"#1: reference {wrong}<br>semantic distance {distance:.4g}<br>score {score:.3f}<br>"
        f'predicted {name(predicted[wrong])}<br><span class="ri-mispredicted" '
        f'style="color:#c00000;font-weight:bold">label {name(labels[wrong])}: mispredicted</span>'
    ) in page
    assert f"predicted {name(predicted[right])}<br>label {name(labels[right])}</figcaption>" in page
    # the input's own label, given, is beside its prediction, marked too
    assert f"<b>label</b> {name(given)}" in page
    assert f'font-weight:bold">label {name(given)}: mispredicted</span>' in page
    assert "in red, marked &#x27;mispredicted&#x27;" in page  # the legend says so
    # a region card says its input's label
    regions = ri.regions(n_regions=8, seed=0)
    cards = regions.show().html
    for p in distinct_polytopes(regions):
        row = p.inputs[0]
        line = f"label {name(labels[row])}"
        if labels[row] != predicted[row]:
            line = f"{line}: mispredicted"
        assert f"predicted {name(predicted[row])}<br>" in cards and line in cards


@pytest.mark.slow
def test_the_colour_bar_keeps_its_size_under_a_theme_that_sizes_images(fitted, browser) -> None:
    ri, images = fitted
    theme = "<style>img {height: auto; max-width: 100%} span {height: auto}</style>"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    body = ri.explain(images[3])._repr_html_()
    page.set_content(f"<!doctype html><html><head>{theme}</head><body>{body}</body></html>")
    size = "b => [b.getBoundingClientRect().width, b.getBoundingClientRect().height]"
    bar = page.eval_on_selector(".ri-colour-bar > *", size)
    page.close()
    assert bar == [COLOUR_BAR_WIDTH, COLOUR_BAR_HEIGHT] == [192, 10]


def test_region_cards_show_their_sub_label_composition_when_it_is_known() -> None:
    """Fitted on an `ImageSet` with sub-concepts (hand-made: each image's sub-label is its
    index mod 3), each card says how many of the images it interprets have each sub-label,
    most first, with a bar; without sub-labels the cards are as before; the granularity is
    named."""
    model, images = random_setup(n=200)
    concepts = torch.arange(200) % 3
    labelled = ImageSet(
        images,
        model(images).argmax(1),
        NAMES,
        Normalization((0.0,), (1.0,)),
        concepts=concepts,
        concept_names=["a", "b", "<c>"],
    )
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=20, progress=False)
    ri.fit(labelled, keep_features=True)
    regions = ri.regions(n_regions=8, seed=0)
    polytopes = distinct_polytopes(regions)
    page = regions.show().html
    assert page.count('class="ri-sub-labels"') == len(polytopes) > 1
    for p in polytopes:
        assert len(p.members) == p.interpreted
        counts = torch.bincount(concepts[p.members], minlength=3).tolist()
        order = sorted(range(3), key=lambda c: (-counts[c], c))
        text = ", ".join(f"{['a', 'b', '&lt;c&gt;'][c]}: {counts[c]}" for c in order if counts[c])
        assert f'sub-labels {text}<div role="img"' in page
    assert "<b>granularity</b> class (the paper&#x27;s RI)" in page
    assert "sub-labels: what the images it interprets are made of" in page
    # given explicitly, on a set without them; refused when not one per image
    plain = RepresentativeInterpreter(model, "relu2", n_boundaries=20, progress=False)
    plain.fit(images, keep_features=True)
    bare = plain.regions(n_regions=8, seed=0)
    assert "ri-sub-labels" not in bare.show().html and "sub-labels:" not in bare.show().html
    given = bare.show(sub_labels=concepts.tolist(), sub_label_names=["a", "b", "c"]).html
    assert given.count('class="ri-sub-labels"') == len(distinct_polytopes(bare))
    with pytest.raises(ValueError, match=r"sub_labels must be 200 integers, one per reference"):
        bare.show(sub_labels=concepts[:10])


def test_a_view_is_found_by_the_objects_type_and_none_is_refused(fitted) -> None:
    ri, images = fitted
    e = ri.explain(images[3])
    assert display.show(e, images, k=2).html == e.show(images, k=2).html
    assert display.show(e, images, k=2).html != e.show(images, k=3).html
    with pytest.raises(LookupError) as raised:
        render(images)
    assert str(raised.value) == (
        "no view shows a Tensor: import repinterp.display to register them"
    )
