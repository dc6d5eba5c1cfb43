"""Evaluation metrics of the paper: Average Drop / Increase (§6.2) and region metrics (App. D).

For images ``e`` in S, with ``e'`` the image keeping its 20% most important pixels (the
rest black) and ``Y_c`` the softmax probability of the class ``c`` predicted on ``e``:
``AD = 100 / |S| * sum max(0, Y_c(e) - Y_c(e')) / Y_c(e)`` and
``AI = 100 / |S| * sum 1[Y_c(e) < Y_c(e')]``, both in %.

Average Drop and Average Increase follow the paper's equations, not pytorch-grad-cam's
``DropInConfidence`` / ``IncreaseInConfidence``: those multiply the normalised input by a
soft heat map and report an absolute (not relative) drop, so they are not used here.
"""

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

# Maps a batch of images in [0, 1] pixel space to the model's input space.
Normalize = Callable[[Tensor], Tensor]


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put every module of ``model`` in eval mode; restore each module's own mode on exit."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a model with neither)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


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
    _check_images01(images01)
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
    def concat(parts: list["DropIncrease"]) -> "DropIncrease":
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
    _check_images01(images01)
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


class AverageDropIncrease:
    """Accumulates Average Drop / Increase over batches (torchcam-style metric object).

    Example::

        metric = AverageDropIncrease(normalize)
        for images01, heatmaps in batches:
            metric.update(model, images01, heatmaps)
        metric.summary()  # {"AD": 12.3, "AI": 25.0, "n": 1000}
    """

    def __init__(
        self, normalize: Normalize | None, fraction: float = 0.2, batch_size: int = 64
    ) -> None:
        """Args: as in ``average_drop_increase``."""
        _check_fraction(fraction)
        self.normalize = normalize
        self.fraction = fraction
        self.batch_size = batch_size
        self._parts: list[DropIncrease] = []

    def update(
        self, model: nn.Module, images01: Tensor, heatmaps: Tensor | np.ndarray
    ) -> DropIncrease:
        """Score a batch of images by their heat maps; returns that batch's scores."""
        part = average_drop_increase(
            model, images01, heatmaps, self.normalize, self.fraction, self.batch_size
        )
        self._parts.append(part)
        return part

    def update_from_mask(
        self, model: nn.Module, images01: Tensor, keep_mask: Tensor
    ) -> DropIncrease:
        """Score a batch of images by given masks of kept pixels; returns that batch's scores."""
        part = average_drop_increase_from_mask(
            model, images01, keep_mask, self.normalize, self.batch_size
        )
        self._parts.append(part)
        return part

    def reset(self) -> None:
        """Forget every image seen so far."""
        self._parts.clear()

    @property
    def result(self) -> DropIncrease:
        """Per-image scores of every image seen so far, in order."""
        return DropIncrease.concat(self._parts)

    def summary(self) -> dict[str, float | int]:
        """``{"AD": %, "AI": %, "n": number of images}``; AD and AI are NaN when n is 0."""
        return self.result.summary()


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


def _percent_mean(values: Tensor) -> float:
    if values.numel() == 0:
        return math.nan
    return 100.0 * values.double().mean().item()


def _check_fraction(fraction: float) -> None:
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")


def _check_images01(images01: Tensor) -> None:
    if not isinstance(images01, Tensor) or images01.ndim != 4:
        shape = tuple(images01.shape) if isinstance(images01, Tensor) else type(images01).__name__
        raise ValueError(f"images01 must be an N x C x H x W tensor, got {shape}")
    if not images01.is_floating_point():
        raise ValueError(f"images01 must be floating point in [0, 1], got {images01.dtype}")
    if images01.numel() and not bool(((images01 >= 0) & (images01 <= 1)).all()):
        raise ValueError(
            "images01 must be in [0, 1] pixel space (NaN or values outside it found); "
            "mask first, then normalise with `normalize`"
        )


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
