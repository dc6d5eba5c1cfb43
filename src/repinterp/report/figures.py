"""Case-study figures as in the paper's Fig. 2: an input, its most similar covered reference
images, and the same images under the input's heat map (alone and overlaid), with a colour bar
and a legend that names every number."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from torch import Tensor

from ..core.heatmap import DEFAULT_COLORMAP, SCALE, colorize, normalize_maps, overlay
from ..core.interpretation import METRIC_MEANINGS, Explainer
from ..data.datasets import Normalization
from ..evaluation.metrics import keep_top_pixels
from ..interpreter import Interpretation

__all__ = [
    "FRACTION",
    "CaseStudy",
    "case_study",
    "class_scores",
    "legend",
    "masked_class_scores",
    "save_case_study_figure",
]

FRACTION = 0.2


def legend(
    class_name: str, fraction: float = FRACTION, metric: str | None = None, heat: bool = True
) -> list[str]:
    """What the numbers and colours of a case study mean, one sentence a line.

    Args:
        class_name: the input's predicted class.
        fraction: share of pixels the masked score keeps.
        metric: the distance shown under the similar images (one of
            :data:`repinterp.core.interpretation.SIMILARITY_METRICS`), None when none is.
        heat: whether the figure has heat maps (and masked scores).
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
    """

    pixels: Tensor
    titles: list[str]
    scores: list[float]
    heatmaps: Tensor | None
    masked_scores: list[float] | None
    class_name: str
    metric: str | None = None
    distances: list[float] | None = None

    def __post_init__(self) -> None:
        if (self.metric is None) != (self.distances is None):
            raise ValueError("a case study's distances and their metric go together")
        if self.distances is not None and len(self.distances) != len(self.titles) - 1:
            raise ValueError("a case study needs one distance per similar image")


def class_scores(interpreter: Explainer, inputs: Tensor, target_class: int) -> list[float]:
    """The model's softmax probability of ``target_class`` on N model inputs (N x C x H x W)."""
    logits, _ = interpreter.forward(inputs)
    return logits.float().softmax(1)[:, target_class].tolist()


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
        fraction: share of pixels kept (the rest are set to 0, black).

    Returns:
        N probabilities.
    """
    masked, _ = keep_top_pixels(pixels.cpu(), maps.cpu(), fraction)
    return class_scores(interpreter, normalize(masked).to(interpreter.device), target_class)


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
    """Scores, heat maps, masked scores and distances for a case-study figure.

    Args:
        explanation: the input's interpretation.
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
    scores = class_scores(interpreter, inputs, c)
    heat = masked = None
    if explanation.has_heatmap:
        heat = explanation.heatmap(inputs).cpu()
        masked = masked_class_scores(interpreter, pixels, heat, normalize, c, fraction)
    return CaseStudy(
        pixels,
        titles,
        scores,
        heat,
        masked,
        class_name,
        metric=None if distances is None else metric,
        distances=distances,
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

    Args:
        study: what to draw.
        path: a file name or a binary file open for writing.
        title: shown above the figure, with the predicted class.
        cmap: colormap of the heat maps (see :func:`repinterp.core.heatmap.colorize`).
        alpha: opacity of the heat map in the overlay row.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable

    n = study.pixels.shape[0]
    rows = 1 if study.heatmaps is None else 3
    width = 1.2 * n + 1.6
    lines = legend(study.class_name, metric=study.metric, heat=study.heatmaps is not None)
    # About 13 characters of the 9 pt legend fit in an inch: wrap it to the figure's width.
    lines = [part for line in lines for part in textwrap.wrap(line, int(13 * width))]
    # under each similar image's score, its distance to the input, named by its metric
    below = [""] * n
    if study.distances is not None:
        below[1:] = [f"\n{study.metric} {d:.2f}" for d in study.distances]
    fig, axes = plt.subplots(
        rows,
        n,
        figsize=(width, 1.45 * rows + 0.7 + 0.16 * (len(lines) + (study.metric is not None))),
        squeeze=False,
        layout="constrained",
    )
    names = ["image", "heat map", f"overlay ({round(100 * alpha)} %)"]
    shown_maps = None if study.heatmaps is None else normalize_maps(study.heatmaps)
    for j in range(n):
        image = study.pixels[j]
        shown = image.expand(3, -1, -1) if image.shape[0] == 1 else image
        axes[0, j].imshow(shown.permute(1, 2, 0).numpy(), interpolation="nearest")
        axes[0, j].set_title(study.titles[j], fontsize=10)
        axes[0, j].set_xlabel(f"score {study.scores[j]:.3f}{below[j]}", fontsize=10)
        if shown_maps is not None:
            heat = shown_maps[j]
            axes[1, j].imshow(colorize(heat, cmap), interpolation="nearest")
            axes[2, j].imshow(overlay(image, heat, alpha, cmap), interpolation="nearest")
            axes[2, j].set_xlabel(f"masked {study.masked_scores[j]:.3f}", fontsize=10)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    for r in range(rows):
        axes[r, 0].set_ylabel(names[r], fontsize=10)
    if shown_maps is not None:
        bar = fig.colorbar(
            ScalarMappable(cmap=cmap), ax=axes[1:, :], fraction=0.04, pad=0.02, aspect=12
        )
        bar.set_ticks([0, 0.5, 1], labels=["0 coldest", "0.5", "1 hottest"], fontsize=9)
        bar.set_label("heat, per-image min-max", fontsize=9)
    fig.suptitle(f"{title}: predicted class {study.class_name!r}", fontsize=11)
    fig.supxlabel("\n".join(lines), fontsize=9, ha="left", x=0.01)
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
