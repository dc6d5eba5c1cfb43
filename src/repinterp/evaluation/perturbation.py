"""Perturbation metrics of heat maps: deletion and insertion AUC (RISE, Petsiuk et al., 2018)
and ROAD (remove and debias, Rong et al., 2022, through pytorch-grad-cam).

Like AD / AI ([`.metrics`][repinterp.evaluation.metrics]), they take images in [0, 1] pixel space
and a ``normalize`` to the model's input: pixels are removed, inserted or imputed in pixel space and
the result is normalised for the model afterwards. The score is the softmax probability of the class
the model predicts on the unperturbed image (argmax, first on ties). Pixels are ranked by a stable
descending sort of the heat map, so equal values go to the earlier pixel in raster order, as
for AD's 20%.

- **Deletion** (lower is better): the most important pixels are replaced by the baseline, in
  ``steps`` equal steps (``round(i N / steps)`` pixels at step ``i``, half up), and the
  probability is recorded from 0 to all ``N`` pixels. **Insertion** (higher is better): the
  same from the baseline image, the most important pixels put back first. The AUC is the
  trapezoidal area under the curve over the share of pixels in [0, 1], in %. Baselines:
  ``"black"`` (0 in pixel space; RISE's for deletion) and ``"blur"`` (a Gaussian blur with
  sigma = side / 16 pixels, kernel ``2 ceil(2 sigma) + 1``, reflected edges; RISE's for
  insertion). Cost: ``steps + 1`` forward passes per image.
- **ROAD**: pytorch-grad-cam's ``ROADMostRelevantFirstAverage`` (MoRF: the most relevant
  ``100 - p`` % of the pixels are imputed, lower is better) and
  ``ROADLeastRelevantFirstAverage`` (LeRF: the least relevant ``100 - p`` % are imputed, higher
  is better), averaged over the percentiles ``p``, and their combination ``(LeRF - MoRF) / 2``
  (the library's ``ROADCombined``; higher is better), each the change of the probability, in
  percentage points. The library imputes the input tensor it is given with noise of a fixed
  size (0.01), so it is given the [0, 1] pixels and a model that normalises them first: the
  imputation (a weighted mean of the neighbours, plus that noise) happens in pixel space,
  where the method defines it. It thresholds the map at the ``p``-th percentile with a strict
  ``<``, which ties (flat, zero areas of ReLU maps) would bias, so it is given each map's
  ranks, scaled to [0, 1] (the same order as above, no ties). The noise draws from torch's
  global generator, here seeded by ``seed`` inside a fork of it; the library draws it
  percentile by percentile over a batch, so the numbers depend on ``batch_size`` too. Cost:
  a sparse linear solve per image, percentile and order (5-30 ms each at 28-64 px on one CPU
  thread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.reference import check_images
from ..runtime.devices import eval_mode, model_device
from .metrics import BatchMetric, Normalize

__all__ = [
    "BASELINES",
    "ROAD_PERCENTILES",
    "DeletionInsertion",
    "Road",
    "baseline_images",
    "deletion_insertion",
    "pixel_order",
    "road",
]

BASELINES = ("black", "blur")
ROAD_PERCENTILES = (10, 30, 50, 70, 90)


def pixel_order(heatmaps: Tensor) -> Tensor:
    """N x (H W) pixel indices, the most important first (stable: ties in raster order)."""
    flat = torch.as_tensor(heatmaps).reshape(heatmaps.shape[0], -1)
    if torch.isnan(flat).any():
        raise ValueError("heatmaps contain NaN")
    return torch.sort(flat, dim=1, descending=True, stable=True).indices


def baseline_images(images01: Tensor, baseline: str) -> Tensor:
    """The images every pixel is taken from once deleted (or before insertion): ``"black"``
    (zeros) or ``"blur"`` (Gaussian, sigma = side / 16 px, reflected edges), in [0, 1]."""
    if baseline == "black":
        return torch.zeros_like(images01)
    if baseline != "blur":
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {', '.join(BASELINES)}")
    sigma = min(images01.shape[-2:]) / 16
    radius = math.ceil(2 * sigma)
    x = torch.arange(-radius, radius + 1, dtype=images01.dtype, device=images01.device)
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    c = images01.shape[1]
    out = F.pad(images01, (radius, radius, radius, radius), mode="reflect")
    out = F.conv2d(out, kernel.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(out, kernel.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def _check_mode(mode: str, baseline: str | None) -> None:
    if mode not in ("deletion", "insertion"):
        raise ValueError(f"mode must be 'deletion' or 'insertion', got {mode!r}")
    if baseline is not None and baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {', '.join(BASELINES)}")


def _step_counts(n_pixels: int, steps: int) -> list[int]:
    return [math.floor(i * n_pixels / steps + 0.5) for i in range(steps + 1)]


def deletion_insertion(
    model: nn.Module,
    images01: Tensor,
    heatmaps: Tensor,
    normalize: Normalize | None,
    mode: str = "deletion",
    baseline: str | None = None,
    steps: int = 16,
    batch_size: int = 64,
) -> tuple[Tensor, Tensor]:
    """Deletion or insertion curves of heat maps and their AUCs (see the module docstring).

    Args:
        model: classifier returning logits; run in eval mode (restored after), without grad.
        images01: N x C x H x W images in [0, 1] pixel space.
        heatmaps: N x H x W heat maps (higher = more important).
        normalize: [0, 1] pixels to model inputs (None: the identity), after perturbing.
        mode: ``"deletion"`` or ``"insertion"``.
        baseline: ``"black"`` or ``"blur"``; None: black for deletion, blur for insertion.
        steps: steps from no pixel to all of them (``steps + 1`` points per curve).
        batch_size: perturbed images per forward pass (at least one image's curve).

    Returns:
        ``(curves, auc)``: N x (steps + 1) probabilities in [0, 1] (CPU), and the N AUCs in %.
    """
    _check_mode(mode, baseline)
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps} and {batch_size}")
    check_images(images01, what="images01", pixels=True)
    n, _, height, width = images01.shape
    heatmaps = torch.as_tensor(heatmaps)
    if tuple(heatmaps.shape) != (n, height, width):
        raise ValueError(f"heatmaps must be N x H x W = {(n, height, width)}")
    baseline = baseline or ("black" if mode == "deletion" else "blur")
    normalize = normalize or (lambda x: x)
    device = model_device(model)
    order = pixel_order(heatmaps.float()).to(device)
    counts = torch.tensor(_step_counts(height * width, steps), device=device)
    positions = torch.arange(height * width, device=device)
    per_forward = max(1, batch_size // (steps + 1))
    curves = []
    with torch.no_grad(), eval_mode(model):
        for start in range(0, n, per_forward):
            x = images01[start : start + per_forward].to(device)
            base = baseline_images(x, baseline)
            chunk = order[start : start + per_forward]
            rank = torch.empty_like(chunk).scatter_(1, chunk, positions.expand_as(chunk))
            # at step i, the pixels ranked below counts[i] are the image's (insertion) or the
            # baseline's (deletion)
            shown = rank.unsqueeze(1) < counts.view(1, -1, 1)
            if mode == "deletion":
                shown = ~shown
            shown = shown.view(len(x), steps + 1, 1, height, width)
            batch = torch.where(shown, x.unsqueeze(1), base.unsqueeze(1)).flatten(0, 1)
            classes = model(normalize(x)).argmax(1)
            probs = torch.softmax(model(normalize(batch)).float(), 1).view(len(x), steps + 1, -1)
            curves.append(probs.gather(2, classes.view(-1, 1, 1).expand(-1, steps + 1, 1))[..., 0])
    curves_t = torch.cat(curves).cpu() if curves else torch.empty(0, steps + 1)
    return curves_t, 100 * (curves_t[:, 1:] + curves_t[:, :-1]).mean(1) / 2


class DeletionInsertion(BatchMetric[Tensor]):
    """Deletion or insertion AUCs accumulated over batches (see
    [`BatchMetric`][repinterp.evaluation.metrics.BatchMetric]); ``result`` is the AUC (%) of every
    image seen, in order.

    Example::

        metric = DeletionInsertion(normalize, "insertion")
        for images01, heatmaps in batches:
            metric.update(model, images01, heatmaps)
        metric.summary()  # {"AUC": 61.2, "n": 1000}

    Args: as in ``deletion_insertion``.
    """

    def __init__(
        self,
        normalize: Normalize | None,
        mode: str = "deletion",
        baseline: str | None = None,
        steps: int = 16,
        batch_size: int = 64,
    ) -> None:
        _check_mode(mode, baseline)
        super().__init__(normalize, batch_size)
        self.mode = mode
        self.baseline = baseline
        self.steps = steps

    def summary(self) -> dict[str, float | int]:
        """``{"AUC": mean AUC in % (NaN for none), "n": number of images}``."""
        auc = self.result
        return {"AUC": float(auc.double().mean()) if auc.numel() else math.nan, "n": auc.numel()}

    def _score(self, model: nn.Module, images01: Tensor, heatmaps: Tensor) -> Tensor:
        _, auc = deletion_insertion(
            model,
            images01,
            heatmaps,
            self.normalize,
            self.mode,
            self.baseline,
            self.steps,
            self.batch_size,
        )
        return auc

    @staticmethod
    def _join(parts: list[Tensor]) -> Tensor:
        return torch.cat(parts) if parts else torch.empty(0)


@dataclass(frozen=True)
class Road:
    """Per-image ROAD scores, in percentage points (changes of the probability).

    Attributes:
        morf: (N,) most relevant first, averaged over the percentiles (lower is better).
        lerf: (N,) least relevant first, averaged over the percentiles (higher is better).
    """

    morf: Tensor
    lerf: Tensor

    @property
    def combined(self) -> Tensor:
        """(N,) ``(lerf - morf) / 2``, the library's ``ROADCombined`` (higher is better)."""
        return (self.lerf - self.morf) / 2


class _Normalized(nn.Module):
    """``model(normalize(x))``: the library perturbs pixels, the model sees its inputs."""

    def __init__(self, model: nn.Module, normalize: Normalize) -> None:
        super().__init__()
        self.model = model
        self.normalize = normalize

    def forward(self, x: Tensor) -> Tensor:
        return self.model(self.normalize(x))


def road(
    model: nn.Module,
    images01: Tensor,
    heatmaps: Tensor,
    normalize: Normalize | None,
    percentiles: tuple[int, ...] = ROAD_PERCENTILES,
    batch_size: int = 64,
    seed: int = 0,
) -> Road:
    """ROAD of heat maps through pytorch-grad-cam (see the module docstring).

    Args:
        model: classifier returning logits; run in eval mode (restored after), without grad.
        images01: N x C x H x W images in [0, 1] pixel space.
        heatmaps: N x H x W heat maps (higher = more important).
        normalize: [0, 1] pixels to model inputs (None: the identity), after imputing.
        percentiles: the ``p`` (in (0, 100)) averaged over.
        batch_size: images per library call.
        seed: seeds the imputation's noise.

    Returns:
        `Road`, per image (CPU).
    """
    from pytorch_grad_cam.metrics.road import (
        ROADLeastRelevantFirstAverage,
        ROADMostRelevantFirstAverage,
    )
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    check_images(images01, what="images01", pixels=True)
    if not percentiles or not all(0 < p < 100 for p in percentiles):
        raise ValueError(f"percentiles must lie in (0, 100), got {percentiles}")
    n, _, height, width = images01.shape
    order = pixel_order(torch.as_tensor(heatmaps).float())
    scale = 1 - torch.arange(height * width) / max(1, height * width - 1)
    ranks = torch.empty(order.shape).scatter_(1, order, scale.expand(n, -1))
    cams = ranks.view(n, height, width).numpy().astype(np.float32)
    scored = _Normalized(model, normalize or (lambda x: x))
    device = model_device(model)
    morf, lerf = [], []
    with torch.no_grad(), eval_mode(model), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, n, batch_size):
            x = images01[start : start + batch_size].to(device)
            targets = [ClassifierOutputSoftmaxTarget(int(c)) for c in scored(x).argmax(1)]
            cam = cams[start : start + batch_size]
            morf.append(ROADMostRelevantFirstAverage(list(percentiles))(x, cam, targets, scored))
            lerf.append(ROADLeastRelevantFirstAverage(list(percentiles))(x, cam, targets, scored))
    return Road(_percent(morf), _percent(lerf))


def _percent(parts: list[np.ndarray]) -> Tensor:
    """Probability changes in percentage points, one tensor."""
    return 100 * torch.from_numpy(np.concatenate(parts)).float() if parts else torch.empty(0)
