"""Evaluation metrics: Average Drop / Increase (§6.2), the regions' accuracy and coverage
(App. D), and the measurable case study's purity@k and energy-based pointing game.

For images ``e`` in S, with ``e'`` the image keeping its 20% most important pixels (the
rest black) and ``Y_c`` the softmax probability of the class ``c`` predicted on ``e``:
``AD = 100 / |S| * sum max(0, Y_c(e) - Y_c(e')) / Y_c(e)`` and
``AI = 100 / |S| * sum 1[Y_c(e) < Y_c(e')]``, both in %.

Average Drop and Average Increase follow the paper's equations, not pytorch-grad-cam's
``DropInConfidence`` / ``IncreaseInConfidence``: those multiply the normalised input by a
soft heat map and report an absolute (not relative) drop, so they are not used here.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from ..data.reference import check_images
from ..runtime.devices import eval_mode, model_device

if TYPE_CHECKING:
    from ..core.regions import RegionSet

# Maps a batch of images in [0, 1] pixel space to the model's input space.
Normalize = Callable[[Tensor], Tensor]


def kept_pixel_count(height: int, width: int, fraction: float = 0.2) -> int:
    """Number of pixels kept: ``fraction * height * width`` rounded half up, at least 1.

    Example: 20% of 32 x 32 = 204.8 -> 205; 20% of 224 x 224 = 10035.2 -> 10035.
    """
    _check_fraction(fraction)
    return max(1, math.floor(fraction * height * width + 0.5))


def keep_top_pixels(
    images01: Tensor, heatmaps: Tensor | np.ndarray, fraction: float = 0.2
) -> tuple[Tensor, Tensor]:
    """Keep the most important pixels of each image by its heat map, black out the rest.

    Exactly ``kept_pixel_count(H, W, fraction)`` pixels are kept per image. Equal heat-map
    values are ranked by raster order (row-major): the earlier pixel is kept first.

    Args:
        images01: N x C x H x W images in [0, 1] pixel space.
        heatmaps: N x H x W importance maps (any real scale; higher = more important).
        fraction: share of pixels to keep, in (0, 1].

    Returns:
        ``(masked01, keep_mask)``: N x C x H x W images in [0, 1] with the dropped pixels set
        to 0 (black), and the N x H x W bool mask of kept pixels. Normalise ``masked01``
        for the model afterwards, not before.
    """
    check_images(images01, what="images01", pixels=True)
    heatmaps = torch.as_tensor(heatmaps)
    n, _, height, width = images01.shape
    if tuple(heatmaps.shape) != (n, height, width):
        raise ValueError(
            f"heatmaps must be N x H x W = {(n, height, width)} to match images01, "
            f"got {tuple(heatmaps.shape)}"
        )
    if torch.isnan(heatmaps).any():
        raise ValueError("heatmaps contain NaN")
    k = kept_pixel_count(height, width, fraction)
    order = torch.sort(heatmaps.reshape(n, -1), dim=1, descending=True, stable=True).indices
    keep = torch.zeros(n, height * width, dtype=torch.bool, device=heatmaps.device)
    keep.scatter_(1, order[:, :k], True)
    keep = keep.view(n, height, width).to(images01.device)
    return images01 * keep.unsqueeze(1), keep


@dataclass(frozen=True)
class DropIncrease:
    """Per-image scores behind Average Drop and Average Increase.

    Attributes:
        classes: (N,) class ``c`` predicted on each unmasked image (argmax, first on ties).
        score: (N,) ``Y_c(e)``, the softmax probability of ``c`` on the unmasked image.
        masked_score: (N,) ``Y_c(e')``, the softmax probability of ``c`` on the masked image.
    """

    classes: Tensor
    score: Tensor
    masked_score: Tensor

    @property
    def n(self) -> int:
        """Number of images."""
        return self.score.numel()

    @property
    def drop(self) -> Tensor:
        """(N,) ``max(0, Y_c(e) - Y_c(e')) / Y_c(e)``, in [0, 1]."""
        return (self.score - self.masked_score).clamp(min=0) / self.score

    @property
    def increase(self) -> Tensor:
        """(N,) bool, ``Y_c(e) < Y_c(e')``."""
        return self.score < self.masked_score

    @property
    def ad(self) -> float:
        """Average Drop in % (NaN for no images)."""
        return _percent_mean(self.drop)

    @property
    def ai(self) -> float:
        """Average Increase in % (NaN for no images)."""
        return _percent_mean(self.increase)

    def summary(self) -> dict[str, float | int]:
        """``{"AD": %, "AI": %, "n": number of images}``."""
        return {"AD": self.ad, "AI": self.ai, "n": self.n}

    @staticmethod
    def concat(parts: list[DropIncrease]) -> DropIncrease:
        """Join the per-image scores of several batches, in order."""
        if not parts:
            empty = torch.empty(0)
            return DropIncrease(empty.long(), empty, empty)
        return DropIncrease(
            torch.cat([part.classes for part in parts]),
            torch.cat([part.score for part in parts]),
            torch.cat([part.masked_score for part in parts]),
        )


def average_drop_increase(
    model: nn.Module,
    images01: Tensor,
    heatmaps: Tensor | np.ndarray,
    normalize: Normalize | None,
    fraction: float = 0.2,
    batch_size: int = 64,
) -> DropIncrease:
    """Average Drop / Increase of heat maps, keeping their top ``fraction`` of pixels (§6.2).

    Args:
        model: classifier returning logits; run in eval mode (restored after), without grad.
        images01: N x C x H x W images in [0, 1] pixel space.
        heatmaps: N x H x W heat maps, one per image.
        normalize: maps [0, 1] images to the model's input (None: the identity); applied
            to both the unmasked and the masked images, after masking.
        fraction: share of pixels kept, in (0, 1]; see ``kept_pixel_count`` for rounding.
        batch_size: images per forward pass.

    Returns:
        Per-image scores; ``.ad`` and ``.ai`` are the paper's AD and AI in %.
    """
    _, keep = keep_top_pixels(images01, heatmaps, fraction)
    return average_drop_increase_from_mask(model, images01, keep, normalize, batch_size)


def average_drop_increase_from_mask(
    model: nn.Module,
    images01: Tensor,
    keep_mask: Tensor,
    normalize: Normalize | None,
    batch_size: int = 64,
) -> DropIncrease:
    """Average Drop / Increase for given masks of kept pixels (e.g. ACE's kept segments).

    Args:
        model: classifier returning logits; run in eval mode (restored after), without grad.
        images01: N x C x H x W images in [0, 1] pixel space.
        keep_mask: N x H x W bool, True for the pixels kept; the others are set to 0 (black).
        normalize: maps [0, 1] images to the model's input (None: the identity).
        batch_size: images per forward pass.

    Returns:
        Per-image scores; ``.ad`` and ``.ai`` are the paper's AD and AI in %.
    """
    check_images(images01, what="images01", pixels=True)
    n, _, height, width = images01.shape
    if keep_mask.dtype != torch.bool or tuple(keep_mask.shape) != (n, height, width):
        raise ValueError(
            f"keep_mask must be a bool tensor of shape {(n, height, width)}, "
            f"got {keep_mask.dtype} {tuple(keep_mask.shape)}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    normalize = normalize or (lambda x: x)
    device = model_device(model)
    parts = []
    with torch.no_grad(), eval_mode(model):
        for start in range(0, n, batch_size):
            x = images01[start : start + batch_size].to(device)
            keep = keep_mask[start : start + batch_size].to(device).unsqueeze(1)
            probs = torch.softmax(model(normalize(x)).float(), dim=1)
            classes = probs.argmax(dim=1, keepdim=True)
            masked_probs = torch.softmax(model(normalize(x * keep)).float(), dim=1)
            parts.append(
                DropIncrease(
                    classes.squeeze(1).cpu(),
                    probs.gather(1, classes).squeeze(1).cpu(),
                    masked_probs.gather(1, classes).squeeze(1).cpu(),
                )
            )
    return DropIncrease.concat(parts)


Scores = TypeVar("Scores")


class BatchMetric(ABC, Generic[Scores]):
    """A metric of heat maps accumulated over batches (torchcam-style metric object):
    ``update`` scores a batch and keeps its scores, ``result`` joins those of every batch seen,
    in order, ``summary`` sums them up, ``reset`` forgets them.

    A subclass defines how a batch is scored (``_score``), how batches' scores are joined
    (``_join``) and the ``summary``.

    Example::

        metric = AverageDropIncrease(normalize)  # or DeletionInsertion(normalize, "insertion")
        for images01, heatmaps in batches:
            metric.update(model, images01, heatmaps)
        metric.summary()  # {"AD": 12.3, "AI": 25.0, "n": 1000}

    Args:
        normalize: maps [0, 1] images to the model's input (None: the identity).
        batch_size: images per forward pass.
    """

    def __init__(self, normalize: Normalize | None, batch_size: int) -> None:
        self.normalize = normalize
        self.batch_size = batch_size
        self._parts: list[Scores] = []

    def update(self, model: nn.Module, images01: Tensor, heatmaps: Tensor | np.ndarray) -> Scores:
        """Score a batch: N x C x H x W images in [0, 1] by their N x H x W heat maps (higher
        = more important); returns that batch's scores."""
        return self._keep(self._score(model, images01, heatmaps))

    def reset(self) -> None:
        """Forget every image seen so far."""
        self._parts.clear()

    @property
    def result(self) -> Scores:
        """Per-image scores of every image seen so far, in order."""
        return self._join(self._parts)

    @abstractmethod
    def summary(self) -> dict[str, float | int]:
        """The scores summed up, with ``"n"``, the number of images seen."""

    @abstractmethod
    def _score(self, model: nn.Module, images01: Tensor, heatmaps: Tensor | np.ndarray) -> Scores:
        """One batch's per-image scores."""

    @staticmethod
    @abstractmethod
    def _join(parts: list[Scores]) -> Scores:
        """Per-image scores of several batches as one, in order (none: no image)."""

    def _keep(self, part: Scores) -> Scores:
        self._parts.append(part)
        return part


class AverageDropIncrease(BatchMetric[DropIncrease]):
    """Average Drop / Increase accumulated over batches (see
    [`BatchMetric`][repinterp.evaluation.metrics.BatchMetric]); ``result`` is a
    [`DropIncrease`][repinterp.evaluation.metrics.DropIncrease].

    Args: as in ``average_drop_increase``.
    """

    def __init__(
        self, normalize: Normalize | None, fraction: float = 0.2, batch_size: int = 64
    ) -> None:
        _check_fraction(fraction)
        super().__init__(normalize, batch_size)
        self.fraction = fraction

    def update_from_mask(
        self, model: nn.Module, images01: Tensor, keep_mask: Tensor
    ) -> DropIncrease:
        """Score a batch of images by given masks of kept pixels; returns that batch's scores."""
        return self._keep(
            average_drop_increase_from_mask(
                model, images01, keep_mask, self.normalize, self.batch_size
            )
        )

    def summary(self) -> dict[str, float | int]:
        """``{"AD": %, "AI": %, "n": number of images}``; AD and AI are NaN when n is 0."""
        return self.result.summary()

    def _score(
        self, model: nn.Module, images01: Tensor, heatmaps: Tensor | np.ndarray
    ) -> DropIncrease:
        return average_drop_increase(
            model, images01, heatmaps, self.normalize, self.fraction, self.batch_size
        )

    _join = staticmethod(DropIncrease.concat)


def region_metrics(
    region_pred: Tensor | np.ndarray,
    model_pred: Tensor | np.ndarray,
    labels: Tensor | np.ndarray | None = None,
) -> dict[str, float | int]:
    """Accuracy and coverage of decision regions (paper, Appendix D).

    Accuracies are over the covered images only, as in the paper ("the ACU-GT of RI is
    computed on the covered images"); they are NaN when no image is covered.

    Args:
        region_pred: (N,) integer class predicted by the covering region, -1 if not covered.
        model_pred: (N,) integer class predicted by the CNN.
        labels: (N,) integer ground-truth classes, or None when unknown.

    Returns:
        ``{"ACU-GT": %, "ACU-MD": %, "CVR": %, "n_covered": int, "n": int}``: accuracy
        against the labels (omitted when ``labels`` is None), accuracy against the CNN's
        predictions, share of images covered.
    """
    region_pred = _check_classes("region_pred", region_pred, minimum=-1)
    model_pred = _check_classes("model_pred", model_pred, minimum=0, length=region_pred.numel())
    covered = region_pred >= 0
    result: dict[str, float | int] = {}
    if labels is not None:
        labels = _check_classes("labels", labels, minimum=0, length=region_pred.numel())
        result["ACU-GT"] = _percent_mean(region_pred[covered] == labels[covered])
    result["ACU-MD"] = _percent_mean(region_pred[covered] == model_pred[covered])
    result["CVR"] = _percent_mean(covered)
    result["n_covered"] = int(covered.sum())
    result["n"] = region_pred.numel()
    return result


def coverage_metrics(
    regions: RegionSet, inputs: Iterable[Tensor], model_pred: Tensor, labels: Tensor
) -> dict[str, float]:
    """ACU-GT, ACU-MD, CVR of regions on a set of images, and the model's accuracy (all in %).

    ACU-GT and ACU-MD count covered images only, as the paper's Appendix D. A covered image is
    predicted by its region's class (see ``RegionSet.assign``).

    Args:
        regions: the regions.
        inputs: the images' model inputs, batch by batch (e.g. ``Setup.chunks(part)``).
        model_pred: (N,) the model's predicted class of each image.
        labels: (N,) the images' true classes.
    """
    assigned = [regions.assign(x) for x in inputs]
    region = torch.cat([a.region for a in assigned]).cpu()
    covered = torch.cat([a.covered for a in assigned]).cpu()
    region_pred = torch.where(covered, regions.classes.cpu()[region], -1)
    metrics = region_metrics(region_pred, model_pred, labels)
    return {
        "ACU-GT": metrics["ACU-GT"],
        "ACU-MD": metrics["ACU-MD"],
        "CVR": metrics["CVR"],
        "model_acc": 100.0 * float((model_pred == labels).double().mean()),
    }


def energy_in_mask(explanations: Tensor, masks: Tensor) -> Tensor:
    """Energy-based pointing game: the share of each map's heat inside the mask.

    Args:
        explanations: N x H x W non-negative heat maps (bool: kept pixels, each worth 1).
        masks: N x H x W bool ground-truth masks.

    Returns:
        (N,) ``sum(heat * mask) / sum(heat)`` in [0, 1]; NaN for a map with no heat.
    """
    heat = explanations.detach().float().cpu()
    if heat.shape != masks.shape:
        raise ValueError(f"maps {tuple(heat.shape)} and masks {tuple(masks.shape)} differ")
    total = heat.flatten(1).sum(1)
    inside = (heat * masks.cpu()).flatten(1).sum(1)
    return torch.where(total > 0, inside / total, torch.nan)


def purity_at_k(ranked_concepts: Tensor, concept: int, k: int) -> float:
    """Share of the first ``k`` ranked images (all when fewer) of the given concept.

    Args:
        ranked_concepts: concept of each ranked image, most similar first (the input itself
            excluded).
        concept: the input's concept.
        k: how many to look at.

    Returns:
        A share in [0, 1]; NaN when nothing is ranked.
    """
    top = ranked_concepts[:k]
    return float((top == concept).double().mean()) if top.numel() else math.nan


def _percent_mean(values: Tensor) -> float:
    if values.numel() == 0:
        return math.nan
    return 100.0 * values.double().mean().item()


def _check_fraction(fraction: float) -> None:
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")


def _check_classes(
    name: str, values: Tensor | np.ndarray, minimum: int, length: int | None = None
) -> Tensor:
    values = torch.as_tensor(values)
    if values.ndim != 1 or values.is_floating_point() or values.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D integer tensor, got {values.dtype} {values.shape}")
    if length is not None and values.numel() != length:
        raise ValueError(f"{name} has {values.numel()} entries, expected {length}")
    if values.numel() and int(values.min()) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {int(values.min())}")
    return values.cpu()
