"""Case-study figures as in the paper's Fig. 2: an input, its most similar covered reference
images, and the same images under the input's heat map (alone and overlaid), with a colour bar
and a legend that names every number."""

from __future__ import annotations

import io
import textwrap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

import numpy as np
import torch
from torch import Tensor

from ..core.heatmap import heatmaps, normalize_maps
from ..core.interpretation import METRIC_MEANINGS, Explainer
from ..data.datasets import Normalization
from ..display.colours import DEFAULT_COLORMAP, SCALE, colorize, overlay
from ..evaluation.metrics import keep_top_pixels
from ..interpreter import Interpretation
from ..runtime.precision import exact_float32
from ..store.outputs import write_outputs

if TYPE_CHECKING:
    from ..interpreter import RepresentativeInterpreter

__all__ = [
    "FRACTION",
    "CaseStudy",
    "case_study",
    "class_scores",
    "contrastive_case_study",
    "legend",
    "masked_class_scores",
    "save_case_study_figure",
]

FRACTION = 0.2


def legend(
    class_name: str,
    fraction: float = FRACTION,
    metric: str | None = None,
    heat: bool = True,
    masked_classes: list[str] | None = None,
) -> list[str]:
    """What the numbers and colours of a case study mean, one sentence a line.

    Args:
        class_name: the input's predicted class.
        fraction: share of pixels the masked score keeps.
        metric: the distance shown under the similar images (one of
            `SIMILARITY_METRICS`), None when none is.
        heat: whether the figure has heat maps (and masked scores).
        masked_classes: the class the model gives each masked image, or None; those given
            another class than ``class_name`` (whose masked scores are then low) are counted.
    """
    lines = [
        f"score: the model's probability of class {class_name!r} (the input's prediction) "
        "on the image."
    ]
    if metric is not None:
        lines.append(
            f"{metric}: the distance of a similar image to the input, {METRIC_MEANINGS[metric]} "
            "(smaller: more similar; the images are ranked by it)."
        )
    if heat:
        lines += [
            f"masked: the same score with {round(100 * (1 - fraction))} % of the pixels blacked "
            f"out, the coldest by the heat map (the paper's Fig. 2).",
            f"Heat maps: the input's channel weights reused on every image; {SCALE}.",
        ]
    others = Counter(c for c in masked_classes or [] if c != class_name)
    if heat and others:
        counts = ", ".join(f"{name!r} ({n})" for name, n in sorted(others.items()))
        lines.insert(
            -1,
            f"The model gives {others.total()} of the {len(masked_classes or [])} masked "
            f"images another class, so their masked scores are at most 0.5: {counts}.",
        )
    return lines


@dataclass
class CaseStudy:
    """What one case-study figure shows.

    Attributes:
        pixels: (1 + k) x C x H x W in [0, 1]: the input, then its top-k similar images.
        titles: 1 + k captions.
        scores: 1 + k softmax scores of the input's class on the images.
        heatmaps: (1 + k) x H x W RI heat maps (the input's channel weights), or None.
        masked_scores: 1 + k scores of that class on the 20%-kept masked images, or None.
        class_name: the predicted class's name.
        metric: the distance in ``distances`` (see ``Interpretation.similar``), or None.
        distances: k distances by ``metric`` of the similar images to the input, or None.
        masked_classes: 1 + k names of the class the model gives each masked image
            (``class_name`` where it keeps the predicted class), or None.
    """

    pixels: Tensor
    titles: list[str]
    scores: list[float]
    heatmaps: Tensor | None
    masked_scores: list[float] | None
    class_name: str
    metric: str | None = None
    distances: list[float] | None = None
    masked_classes: list[str] | None = None

    def __post_init__(self) -> None:
        if (self.heatmaps is None) != (self.masked_scores is None):
            raise ValueError("a case study's heat maps and masked scores go together")
        if (self.metric is None) != (self.distances is None):
            raise ValueError("a case study's distances and their metric go together")
        if self.distances is not None and len(self.distances) != len(self.titles) - 1:
            raise ValueError("a case study needs one distance per similar image")


def _probabilities(interpreter: Explainer, inputs: Tensor) -> Tensor:
    """The model's softmax probabilities (N x classes, CPU) on N model inputs."""
    logits, _ = interpreter.logits_and_projections(inputs)
    return logits.float().softmax(1).cpu()


def class_scores(interpreter: Explainer, inputs: Tensor, target_class: int) -> list[float]:
    """The model's softmax probability of ``target_class`` on N model inputs (N x C x H x W)."""
    return _probabilities(interpreter, inputs)[:, target_class].tolist()


def _masked_probabilities(
    interpreter: Explainer, pixels: Tensor, maps: Tensor, normalize: Normalization, fraction: float
) -> Tensor:
    """`_probabilities` on the images that keep their ``fraction`` hottest pixels, the
    rest set to black in pixel space (0) before ``normalize``."""
    masked, _ = keep_top_pixels(pixels.cpu(), maps.cpu(), fraction)
    return _probabilities(interpreter, normalize(masked).to(interpreter.device))


def masked_class_scores(
    interpreter: Explainer,
    pixels: Tensor,
    maps: Tensor,
    normalize: Normalization,
    target_class: int,
    fraction: float = FRACTION,
) -> list[float]:
    """Scores of ``target_class`` on images that keep only their ``fraction`` hottest pixels.

    Args:
        interpreter: runs the model.
        pixels: N x C x H x W in [0, 1].
        maps: N x H x W heat maps (any method's: higher = more important).
        normalize: pixels -> model inputs.
        target_class: the class scored.
        fraction: share of pixels kept (the rest are set to 0, black, before ``normalize``).

    Returns:
        N probabilities.
    """
    probabilities = _masked_probabilities(interpreter, pixels, maps, normalize, fraction)
    return probabilities[:, target_class].tolist()


@exact_float32()
@torch.inference_mode()
def _probabilities_and_heatmaps(
    explanation: Interpretation, inputs: Tensor
) -> tuple[Tensor, Tensor]:
    """The softmax probabilities (N x classes) and the heat maps (N x H x W, as
    ``explanation.heatmap`` draws them) of N model inputs, both on the CPU, from one pass of
    the trunk: the head runs on the feature maps that the heat maps are drawn from."""
    interpreter = cast("RepresentativeInterpreter", explanation.interpreter)
    features = interpreter.features(inputs)
    logits = interpreter.split.head(features)
    heat = heatmaps(features, explanation.channel_weights, tuple(inputs.shape[-2:]))
    return logits.float().softmax(1).cpu(), heat.cpu()


def case_study(
    explanation: Interpretation,
    pixels: Tensor,
    titles: list[str],
    normalize: Normalization,
    class_name: str,
    fraction: float = FRACTION,
    references: list[int] | None = None,
    metric: str = "semantic",
) -> CaseStudy:
    """Scores, heat maps, masked scores and distances for a case-study figure: two forward
    passes of the 1 + k images, one as they are (scores and heat maps) and one masked.

    Args:
        explanation: the input's interpretation, by a ``RepresentativeInterpreter``.
        pixels: (1 + k) x C x H x W in [0, 1]: the input, then its top-k similar images.
        titles: a caption per image.
        normalize: pixels -> model inputs.
        class_name: name of the predicted class.
        fraction: share of pixels kept for the masked scores.
        references: the k similar images' reference indices (covered by ``explanation``),
            whose distances by ``metric`` the figure shows; None: no distances.
        metric: the distance shown (see ``Interpretation.similar``).

    Raises:
        ValueError: ``references`` are not k covered images, or an unknown metric.
    """
    interpreter = explanation.interpreter
    pixels = pixels.cpu()
    distances = None
    if references is not None:
        distances = _distances(explanation, references, metric)
    inputs = normalize(pixels).to(interpreter.device)
    c = explanation.predicted_class
    heat = masked = masked_classes = None
    if explanation.has_heatmap:
        probabilities, heat = _probabilities_and_heatmaps(explanation, inputs)
        on_masked = _masked_probabilities(interpreter, pixels, heat, normalize, fraction)
        masked = on_masked[:, c].tolist()
        names = interpreter.class_names
        given = on_masked.argmax(1).tolist()
        masked_classes = [class_name if g == c else names[g] if names else str(g) for g in given]
    else:
        probabilities = _probabilities(interpreter, inputs)
    return CaseStudy(
        pixels,
        titles,
        probabilities[:, c].tolist(),
        heat,
        masked,
        class_name,
        metric=None if distances is None else metric,
        distances=distances,
        masked_classes=masked_classes,
    )


def contrastive_case_study(
    interpreter: RepresentativeInterpreter,
    pixels: Tensor,
    normalize: Normalization,
    contrast: int,
    class_name: str,
    fraction: float = FRACTION,
) -> CaseStudy:
    """Beyond the paper: a one-column case study of an image's contrastive map against class
    ``contrast`` (see
    [`contrastive_heatmap`][repinterp.interpreter.RepresentativeInterpreter.contrastive_heatmap]),
    with the score of its predicted class, whole and with only the map's hottest pixels kept.

    Args:
        interpreter: a fitted interpreter.
        pixels: C x H x W in [0, 1].
        normalize: pixels -> model inputs.
        contrast: the class ``c'``, other than the image's predicted class.
        class_name: the name of the predicted class.
        fraction: share of pixels kept for the masked score.
    """
    pixels = pixels.cpu()[None]
    inputs = normalize(pixels).to(interpreter.device)
    heat = interpreter.contrastive_heatmap(inputs, contrast)
    c = int(interpreter.logits_and_projections(inputs)[0].argmax(1)[0])
    score = class_scores(interpreter, inputs, c)
    masked = _masked_probabilities(interpreter, pixels, heat, normalize, fraction)
    names = interpreter.class_names
    given = [
        class_name if g == c else names[g] if names else str(g) for g in masked.argmax(1).tolist()
    ]
    return CaseStudy(
        pixels,
        ["input"],
        score,
        heat.cpu(),
        masked[:, c].tolist(),
        class_name,
        masked_classes=given,
    )


def _distances(explanation: Interpretation, references: list[int], metric: str) -> list[float]:
    """The distances by ``metric`` of covered reference images to the input."""
    by_index = dict(
        zip(explanation.covered.tolist(), explanation.distances(metric).tolist(), strict=True)
    )
    missing = [i for i in references if i not in by_index]
    if missing:
        raise ValueError(f"reference images {missing} are not covered by the interpretation")
    return [by_index[i] for i in references]


DPI = 100
"""Pixels per inch of the figure: its layout is in whole pixels at this resolution."""
# The layout, in pixels: a column per image and the images' side; the left margin (the row
# names); the top of the first row of images below a title of one line; a line of the title
# (11 pt) and of the captions and the legend (9 pt), 1.2 lines apart; the colour bar's width.
_COLUMN, _SIDE, _LEFT, _TOP = 120, 100, 40, 50
_TITLE_LINE, _LINE, _BAR = 19, 15, 15


def _cells(images: list[np.ndarray]) -> list[np.ndarray]:
    """H x W x 3 images enlarged (or shrunk) to ``_SIDE`` x ``_SIDE`` by nearest neighbour."""
    picked = np.arange(_SIDE)
    return [
        image[picked * image.shape[0] // _SIDE][:, picked * image.shape[1] // _SIDE]
        for image in images
    ]


_TITLE_CHARS = 14  # of a 10 pt title fit in a column


def _column_title(title: str) -> str:
    """``title`` as it fits above its column: a file's path too long for it by the file's
    name, then a name still too long by its end."""
    if len(title) > _TITLE_CHARS:
        title = title.rsplit("/", 1)[-1]
    return title if len(title) <= _TITLE_CHARS else "…" + title[-(_TITLE_CHARS - 1) :]


def save_case_study_figure(
    study: CaseStudy,
    path: str | Path | BinaryIO,
    title: str,
    cmap: str = DEFAULT_COLORMAP,
    alpha: float = 0.5,
) -> None:
    """Write the figure as a PNG: a column per image, three rows (the image and its score; the
    heat map alone; the heat map overlaid with the masked score), a colour bar and a legend.
    Without a heat map, only the first row.

    The images are pasted into one picture at `DPI` (each resized to 100 px by nearest
    neighbour, so that its pixels stay sharp) and the text is placed on a fixed pixel grid: no
    axes and no layout engine, which took seconds for a figure of 27 images.

    Args:
        study: what to draw.
        path: a binary file open for writing, or a file name (the file is then replaced by a
            rename, see `write_outputs`).
        title: shown above the figure, with the predicted class.
        cmap: colormap of the heat maps (see [`colorize`][repinterp.display.colours.colorize]).
        alpha: opacity of the heat map in the overlay row.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    n = study.pixels.shape[0]
    heat = study.heatmaps is not None
    lines = legend(
        study.class_name, metric=study.metric, heat=heat, masked_classes=study.masked_classes
    )
    w = _COLUMN * n + 160
    # About 13 characters of the 9 pt legend (11 of the 11 pt title) fit in an inch: wrap them
    # to the figure's width.
    lines = [part for line in lines for part in textwrap.wrap(line, 13 * w // DPI)]
    heading = textwrap.wrap(f"{title}: predicted class {study.class_name!r}", 11 * w // DPI)
    captions = 1 + (study.metric is not None)  # lines under each image of the first row
    tops = [_TOP + _TITLE_LINE * (len(heading) - 1)]  # of each row of images
    if heat:
        tops.append(tops[0] + _SIDE + 4 + _LINE * captions + 16)
        tops.append(tops[1] + _SIDE + 10)
    bottom = tops[-1] + _SIDE + 4 + _LINE * (1 if heat else captions)  # of the last captions
    fig = Figure(figsize=(w / DPI, (bottom + 20 + _LINE * len(lines)) / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    w, h = fig.canvas.get_width_height()  # whole pixels, as the PNG has them

    def text(x: float, y: float, words: str, size: float, **kwargs: object) -> None:
        """``words`` at pixel ``x`` from the left and ``y`` from the top, ``size`` pt."""
        fig.text(x / w, 1 - y / h, words, fontsize=size, **kwargs)

    pixels = study.pixels.float().clamp(0, 1)
    rows = [_cells([p.expand(3, -1, -1).permute(1, 2, 0).numpy() for p in pixels])]
    if study.heatmaps is not None:
        maps = normalize_maps(study.heatmaps)
        rows.append(_cells([colorize(m, cmap) for m in maps]))
        rows.append(_cells([overlay(p, m, alpha, cmap) for p, m in zip(pixels, maps, strict=True)]))
    # under each similar image's score, its distance to the input, named by its metric (a
    # caption of at most about 110 px: 2 decimals below 1,000, none from there)
    below = [""] * n
    if study.distances is not None:
        below[1:] = [f"\n{study.metric} {d:.{2 if d < 1000 else 0}f}" for d in study.distances]
    lefts = [_LEFT + j * _COLUMN + (_COLUMN - _SIDE) // 2 for j in range(n)]
    canvas = np.ones((h, w, 3))
    names = ["image", "heat map", f"overlay ({round(100 * alpha)} %)"]
    for top, cells, name in zip(tops, rows, names, strict=False):
        for left, cell in zip(lefts, cells, strict=True):
            canvas[top - 1 : top + _SIDE + 1, left - 1 : left + _SIDE + 1] = 0  # a frame
            canvas[top : top + _SIDE, left : left + _SIDE] = cell
        text(_LEFT / 2, top + _SIDE / 2, name, 10, rotation=90, ha="center", va="center")
    for j, left in enumerate(lefts):
        centre = left + _SIDE / 2
        text(centre, tops[0] - 4, _column_title(study.titles[j]), 10, ha="center", va="bottom")
        score = f"score {study.scores[j]:.3f}{below[j]}"
        text(centre, tops[0] + _SIDE + 4, score, 9, ha="center", va="top", linespacing=1.2)
        if study.masked_scores is not None:  # with the heat maps (see `CaseStudy`)
            masked = f"masked {study.masked_scores[j]:.3f}"
            text(centre, tops[2] + _SIDE + 4, masked, 9, ha="center", va="top")
    if heat:
        _colour_bar(canvas, text, _LEFT + n * _COLUMN + 5, tops[1], tops[2] + _SIDE, cmap)
    fig.figimage(canvas, 0, 0, origin="upper")
    text(w / 2, 8, "\n".join(heading), 11, ha="center", va="top", linespacing=1.2)
    text(10, bottom + 12, "\n".join(lines), 9, ha="left", va="top", linespacing=1.2)
    fig.canvas.draw()
    # RGB (no alpha channel) and light compression: a third of the time of savefig's PNG
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3]
    if not isinstance(path, str | Path):
        Image.fromarray(rgb).save(path, format="png", compress_level=3)
        return
    png = io.BytesIO()
    Image.fromarray(rgb).save(png, format="png", compress_level=3)
    write_outputs({Path(path): png.getvalue()})


def _colour_bar(
    canvas: np.ndarray,
    text: Callable[..., None],
    left: int,
    top: int,
    bottom: int,
    cmap: str,
) -> None:
    """Paint the heat maps' colour bar into ``canvas`` (H x W x 3) from pixel column ``left``,
    rows ``top`` to ``bottom``, and label its ends, its middle and itself with ``text`` (pixel
    x, y from the top, words, size in pt, Text options)."""
    levels = torch.linspace(1, 0, bottom - top).unsqueeze(1).expand(-1, _BAR)
    canvas[top - 1 : bottom + 1, left - 1 : left + _BAR + 1] = 0
    canvas[top:bottom, left : left + _BAR] = colorize(levels, cmap)
    ticks = ((top, "1 hottest"), ((top + bottom - 1) / 2, "0.5"), (bottom - 1, "0 coldest"))
    for y, label in ticks:
        canvas[round(y), left + _BAR : left + _BAR + 4] = 0
        text(left + _BAR + 7, y, label, 9, ha="left", va="center")
    name = "heat, per-image min-max"
    text(left + 99, (top + bottom) / 2, name, 9, rotation=90, ha="center", va="center")
