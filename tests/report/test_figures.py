"""The case-study figure and the static HTML report: what a reader needs to read them."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.text import Text
from PIL import Image

from repinterp.core.interpretation import METRIC_MEANINGS
from repinterp.evaluation.metrics import keep_top_pixels
from repinterp.report import CaseStudy, case_study, save_case_study_figure, write_report
from repinterp.report.figures import FRACTION, class_scores, legend
from repinterp.report.html import GLOSSARY, colorbar_css

from ..networks import fit_random


def _study(heat: bool, n: int = 4) -> CaseStudy:
    generator = torch.Generator().manual_seed(0)
    pixels = torch.rand(4, 1, 28, 28, generator=generator)
    maps = torch.rand(4, 28, 28, generator=generator) * 0.3  # not min-max: the figure scales
    return CaseStudy(
        pixels=pixels[:n],
        titles=["input", "#1 ref 5", "#2 ref 9", "#3 ref 2"][:n],
        scores=[0.99, 0.98, 0.5, 0.25][:n],
        heatmaps=maps[:n] if heat else None,
        masked_scores=[0.9, 0.8, 0.1, 0.05][:n] if heat else None,
        class_name="7",
    )


def _colours(png: bytes) -> set[tuple[int, int, int]]:
    array = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return set(map(tuple, array.reshape(-1, 3).tolist()))


def _has(colours: set[tuple[int, int, int]], rgb: np.ndarray, tolerance: int = 2) -> bool:
    target = np.rint(np.asarray(rgb[:3]) * 255)
    return any(np.abs(np.array(c) - target).max() <= tolerance for c in colours)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_legend_is_not_cut_at_the_right_edge(n: int) -> None:
    buffer = io.BytesIO()
    save_case_study_figure(_study(heat=True, n=n), buffer, "unseen-3")
    pixels = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("L"))
    assert (pixels[:, -4:] > 250).all()  # nothing is drawn up to the right edge


@pytest.mark.parametrize("cmap", ["inferno", "viridis"])
def test_figure_has_a_colour_bar_and_per_image_scaled_maps(cmap):
    buffer = io.BytesIO()
    save_case_study_figure(_study(heat=True), buffer, "unseen-3", cmap=cmap)
    with Image.open(io.BytesIO(buffer.getvalue())) as figure:
        assert figure.format == "PNG" and figure.width == 640  # 1.2 in a column, 100 dpi
        grey = np.asarray(figure.convert("L"))
    drawn = (grey < 250).any(1).nonzero()[0]
    assert grey.shape[0] - 20 < drawn[-1] < grey.shape[0] - 4  # the legend ends the figure
    colours = _colours(buffer.getvalue())
    # each map is min-max scaled for display, so both ends of the colormap are drawn
    assert _has(colours, colormaps[cmap](0.0)) and _has(colours, colormaps[cmap](1.0))
    other = "viridis" if cmap == "inferno" else "inferno"
    assert not _has(colours, colormaps[other](1.0), tolerance=0)


def test_figure_without_a_heat_map_has_one_row():
    with_maps, without = io.BytesIO(), io.BytesIO()
    save_case_study_figure(_study(heat=True), with_maps, "a")
    save_case_study_figure(_study(heat=False), without, "a")
    height = {
        name: Image.open(io.BytesIO(b.getvalue())).height
        for name, b in (("with", with_maps), ("without", without))
    }
    assert height["without"] < height["with"] / 2
    assert not _has(_colours(without.getvalue()), colormaps["inferno"](1.0))


def _entry(name: str, predicted: int, message: str | None = None) -> dict:
    summary = {
        "predicted_class": predicted,
        "class_name": f"c{predicted}",
        "score": 0.5,
        "representativeness": 12,
        "boundaries": [3, 1],
        "delta": 1,
        "message": message,
    }
    return {"name": name, "figure": f"{name}.png", "json": f"{name}.json", "summary": summary}


def test_report_groups_by_class_with_contents_legend_and_colour_bar(tmp_path):
    entries = [_entry("b<i>", 3, "delta > 0"), _entry("a", 1), _entry("c", 3)]
    path = tmp_path / "index.html"
    write_report(path, "Title & co", "intro <text>", entries)
    page = path.read_text()
    assert "<meta name='viewport' content='width=device-width, initial-scale=1'>" in page
    assert "<title>Title &amp; co</title>" in page and "intro &lt;text&gt;" in page
    headings = re.findall(r"<h2 id='([^']+)'>([^<]+)</h2>", page)
    assert headings == [("class-c1", "Class c1"), ("class-c3", "Class c3")]
    toc = page[page.index("<nav") : page.index("</nav>")]
    assert toc.count("<li>") == 2
    for anchor in ("#class-c1", "#class-c3", "#a", "#b-i-", "#c"):
        assert f"href='{anchor}'" in toc
    entry_headings = re.findall(r"<h3 id='([^']+)'>", page)
    assert entry_headings == ["a", "b-i-", "c"]
    assert "b&lt;i&gt;: predicted c3" in page and "<p class='note'>delta &gt; 0</p>" in page
    assert f"style='background: {colorbar_css()}'" in page
    assert colorbar_css().startswith("linear-gradient(to right, #000004")
    assert "0 = coldest pixel" in page and "per-image min-max" in page
    for name, text in GLOSSARY:
        assert f"<dt>{name}</dt><dd>{text.replace(chr(39), '&#x27;')}</dd>" in page
    for tip in ("score", "|P(x)|", "τ(x) (delta)", "representativeness |R|"):
        assert re.search(f"<abbr title='[^']+'>{re.escape(tip)}</abbr>", page), tip
    assert "src='a.png'" in page
    assert "sub-labels" not in page and "<p class='granularity'>" not in page  # neither given


def test_a_polytope_card_shows_its_sub_label_composition_and_the_granularity(tmp_path):
    """A card whose sub-labels are known (a hand-made composition) shows its counts, most
    first, over a bar; a card without them shows nothing more; the granularity is under the
    title, both named in the legend."""
    known = _entry("p1", 4)
    known["summary"] |= {"regions": [0, 2], "interprets": 33}
    known["summary"]["sub_labels"] = [
        {"sub_label": 4, "name": "4", "count": 31, "colour": "#9467bd"},
        {"sub_label": 9, "name": "9", "count": 2, "colour": "#17becf"},
    ]
    other = _entry("p2", 1)
    other["summary"] |= {"regions": [1], "interprets": 5}
    path = tmp_path / "index.html"
    granularity = "granularity strategy (3 strategies in 2 classes, beyond the paper)"
    write_report(path, "regions", "intro", [known, other], granularity)
    page = path.read_text()
    assert f"<h1>regions</h1><p class='granularity'>{granularity}</p>" in page
    assert page.count('class="ri-sub-labels"') == 1
    card = page[page.index("<h3 id='p1'>") :]  # class 4's, after class 1's
    assert 'sub-labels 4: 31, 9: 2<div role="img"' in card
    assert "width:93.94%;background:#9467bd" in card and "width:6.06%;background:#17becf" in card
    assert "<dt>sub-labels</dt>" in page and "<dt>granularity</dt>" in page
    assert "sub-labels" not in page[page.index("<h3 id='p2'>") : page.index("<h3 id='p1'>")]


def _drawn_texts(monkeypatch, study: CaseStudy) -> list[Text]:
    """The texts of the figure of ``study``, drawn (their extents known)."""
    texts: list[Text] = []
    text = Figure.text

    def recorded(self, *args, **kwargs):
        texts.append(text(self, *args, **kwargs))
        return texts[-1]

    monkeypatch.setattr(Figure, "text", recorded)
    save_case_study_figure(study, io.BytesIO(), "unseen-3")
    return texts


def test_the_figure_labels_each_distance_with_its_metric(monkeypatch) -> None:
    study = replace(_study(heat=True), metric="euclidean", distances=[0.0, 1.5, 2.25])
    labels = [text.get_text() for text in _drawn_texts(monkeypatch, study)]
    first_row = [text for text in labels if text.startswith("score ")]
    assert first_row == [
        "score 0.990",
        "score 0.980\neuclidean 0.00",
        "score 0.500\neuclidean 1.50",
        "score 0.250\neuclidean 2.25",
    ]
    lines = legend("7", metric="euclidean")
    assert (
        f"euclidean: the distance of a similar image to the input, {METRIC_MEANINGS['euclidean']}"
        in lines[1]
    )
    assert not any(metric in " ".join(legend("7")) for metric in METRIC_MEANINGS)
    with pytest.raises(ValueError, match="go together"):
        replace(_study(heat=True), distances=[0.0, 1.5, 2.25])
    with pytest.raises(ValueError, match="one distance per similar image"):
        replace(_study(heat=True), metric="semantic", distances=[0.0])


def test_case_study_takes_the_distances_by_the_metric_asked(one_thread) -> None:
    ri, _ = fit_random(120, 12, keep_features=True)
    pixels = torch.rand(4, 1, 12, 12, generator=torch.Generator().manual_seed(1))
    e = ri.explain(pixels[0])
    titles = ["input", "a", "b", "c"]
    for metric in ("semantic", "euclidean"):
        refs = e.similar(3, metric).tolist()
        study = case_study(e, pixels, titles, lambda x: x, "c", references=refs, metric=metric)
        assert study.metric == metric
        expected = e.distances(metric)[torch.searchsorted(e.covered, torch.tensor(refs))]
        assert study.distances == pytest.approx(expected.tolist())
    assert case_study(e, pixels, titles, lambda x: x, "c").distances is None
    outside = sorted(set(range(120)) - set(e.covered.tolist()))[:3]
    with pytest.raises(ValueError, match="not covered"):
        case_study(e, pixels, titles, lambda x: x, "c", references=outside)


@pytest.mark.parametrize("n", [1, 4, 9])
def test_no_text_of_the_figure_overlaps_another_or_leaves_it(monkeypatch, n: int) -> None:
    generator = torch.Generator().manual_seed(2)
    study = CaseStudy(
        pixels=torch.rand(n, 3, 96, 96, generator=generator),
        titles=["input"] + [f"#{j} ref {10_000 + j}" for j in range(1, n)],
        scores=[0.5] * n,
        heatmaps=torch.rand(n, 96, 96, generator=generator),
        masked_scores=[0.0] * n,
        class_name="triangle_or_star",
        metric="euclidean",
        distances=[123.45] * (n - 1),
        masked_classes=["circle_or_ring"] * n,
    )
    texts = _drawn_texts(monkeypatch, study)
    assert len(texts) == 3 * n + 3 + 4 + 1 + 1  # captions, row names, colour bar, title, legend
    figure = texts[0].get_figure()
    boxes = [text.get_window_extent(figure.canvas.get_renderer()) for text in texts]
    for text, box in zip(texts, boxes, strict=True):
        assert 0 <= box.x0 and box.x1 <= figure.bbox.width, text.get_text()
        assert 0 <= box.y0 and box.y1 <= figure.bbox.height, text.get_text()
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (texts[boxes.index(a)].get_text(), texts[boxes.index(b)])


def test_the_legend_counts_the_masked_images_given_another_class() -> None:
    lines = legend("7", masked_classes=["7", "3", "3", "5"])
    assert (
        "The model gives 3 of the 4 masked images another class, so their masked scores are at "
        "most 0.5: '3' (2), '5' (1)." in lines
    )
    assert len(legend("7", masked_classes=["7"] * 4)) == len(legend("7")) == 3
    assert len(legend("7", heat=False, masked_classes=["3"] * 4)) == 1
    with pytest.raises(ValueError, match="heat maps and masked scores go together"):
        replace(_study(heat=True), masked_scores=None)


def test_case_study_scores_the_predicted_class_on_images_blacked_out_in_pixel_space(
    one_thread,
) -> None:
    ri, _ = fit_random(120, 12)
    pixels = torch.rand(5, 1, 12, 12, generator=torch.Generator().manual_seed(3))

    def normalize(x: torch.Tensor) -> torch.Tensor:
        return (x - 0.5) / 0.25  # black is -2 to the model, not 0

    e = ri.explain(normalize(pixels[0]))
    c = e.predicted_class
    passes = []
    hook = ri.split.psi.register_forward_hook(lambda *_: passes.append(1))
    study = case_study(e, pixels, ["input", "a", "b", "c", "d"], normalize, "c")
    hook.remove()
    assert len(passes) == 2  # the images as they are (scores, heat maps), then masked
    inputs = normalize(pixels)
    assert study.scores == pytest.approx(class_scores(ri, inputs, c))
    assert study.scores[0] == pytest.approx(e.score)
    assert torch.allclose(study.heatmaps, e.heatmap(inputs).cpu())
    kept, keep = keep_top_pixels(pixels, study.heatmaps, FRACTION)
    logits, _ = ri.logits_and_projections(normalize(kept))
    assert study.masked_scores == pytest.approx(logits.softmax(1)[:, c].tolist())
    given = logits.argmax(1).tolist()
    assert study.masked_classes == ["c" if g == c else str(g) for g in given]
    blacked_after = class_scores(ri, inputs * keep.unsqueeze(1), c)  # the mistake: black = mean
    assert study.masked_scores != pytest.approx(blacked_after)
