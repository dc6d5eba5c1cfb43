"""Case-study figures as in the paper's Fig. 2: an input, its most similar covered reference
images, and the same images under the input's heat map."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from ..data import Normalization
from ..evaluation.metrics import keep_top_pixels
from ..heatmap import overlay
from ..interpreter import Interpretation

__all__ = ["CaseStudy", "case_study", "save_case_study_figure"]


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
    """

    pixels: Tensor
    titles: list[str]
    scores: list[float]
    heatmaps: Tensor | None
    masked_scores: list[float] | None
    class_name: str


def _class_scores(explanation: Interpretation, inputs: Tensor) -> list[float]:
    logits, _ = explanation.interpreter.forward(inputs)
    return logits.float().softmax(1)[:, explanation.predicted_class].tolist()


def case_study(
    explanation: Interpretation,
    pixels: Tensor,
    titles: list[str],
    normalize: Normalization,
    class_name: str,
    fraction: float = 0.2,
) -> CaseStudy:
    """Scores, heat maps and masked scores for a case-study figure.

    Args:
        explanation: the input's interpretation.
        pixels: (1 + k) x C x H x W in [0, 1]: the input, then its top-k similar images.
        titles: a caption per image.
        normalize: pixels -> model inputs.
        class_name: name of the predicted class.
        fraction: share of pixels kept for the masked scores.
    """
    device = explanation.interpreter.device
    pixels = pixels.cpu()
    inputs = normalize(pixels).to(device)
    scores = _class_scores(explanation, inputs)
    if not explanation.has_heatmap:
        return CaseStudy(pixels, titles, scores, None, None, class_name)
    heat = explanation.heatmap(inputs).cpu()
    masked, _ = keep_top_pixels(pixels, heat, fraction)
    masked_scores = _class_scores(explanation, normalize(masked).to(device))
    return CaseStudy(pixels, titles, scores, heat, masked_scores, class_name)


def save_case_study_figure(study: CaseStudy, path: str | Path, title: str) -> None:
    """Two rows: the images with their scores; the same with the heat map overlaid and the
    score of each 20%-kept masked image (second row omitted when there is no heat map)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = study.pixels.shape[0]
    rows = 1 if study.heatmaps is None else 2
    fig, axes = plt.subplots(rows, n, figsize=(1.6 * n, 1.9 * rows + 0.5), squeeze=False)
    for j in range(n):
        image = study.pixels[j]
        shown = image.expand(3, -1, -1) if image.shape[0] == 1 else image
        axes[0, j].imshow(shown.permute(1, 2, 0).numpy())
        axes[0, j].set_title(study.titles[j], fontsize=8)
        axes[0, j].set_xlabel(f"{study.scores[j]:.3f}", fontsize=8)
        if rows == 2:
            axes[1, j].imshow(overlay(image, study.heatmaps[j]))
            axes[1, j].set_xlabel(f"masked {study.masked_scores[j]:.3f}", fontsize=8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{title}: class {study.class_name!r}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
