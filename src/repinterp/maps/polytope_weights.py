"""Polytope Score-CAM weights: a polytope's heat map weighted by what its channels do to the
scores of the images it covers (an alternative to the paper's §5.1 weights).

The paper draws ``P(x)`` with channel weights from the boundaries' ``W`` (the spatial mean of
the gradient of ``G_c1 - G_c2``, one map per boundary) and reuses them on every covered image.
*Polytope Score-CAM* keeps ``P(x)`` and its covered set but weighs channels as Score-CAM does,
once per polytope, on a sample of the images it covers: for each sampled image ``e`` and
channel ``k``, the activation map ``A_k(e)`` is upsampled (bilinear, corners aligned) to the
image, min-max normalised (``1e-8``), multiplied into ``e`` (the model's input), and the
logit of the polytope's class is read; the weights of ``e`` are the softmax of these logits
over the channels, exactly pytorch-grad-cam's ``ScoreCAM.get_cam_weights``; the polytope's
weights are their mean over the sample. Its heat map on any image is ``ReLU(sum_k w_k A_k)``,
upsampled and min-max normalised ([`heatmaps`][repinterp.core.heatmap.heatmaps] with one row of
weights), which orders pixels as Score-CAM's own map does. Cost: ``K`` forward passes per sampled
image.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.interpretation import Explainer, Interpretation

__all__ = ["covered_sample", "draw_indices", "score_weights", "with_score_weights"]


def score_weights(explainer: Explainer, images: Tensor, target_class: int) -> Tensor:
    """Score-CAM channel weights of ``images`` for ``target_class``, averaged over the images.

    Args:
        explainer: a fitted interpreter (its ``features`` and ``forward``).
        images: N x C x H x W model inputs (N >= 1).
        target_class: the class whose logit is read.

    Returns:
        (K,) weights, non-negative, summing to 1, on the interpreter's device.
    """
    if images.ndim != 4 or images.shape[0] == 0:
        raise ValueError(
            f"images must be a non-empty N x C x H x W batch, got {tuple(images.shape)}"
        )
    total = None
    for image in images:
        x = image.unsqueeze(0).to(explainer.device)
        activations = explainer.features(x).float()
        masks = F.interpolate(activations, size=x.shape[-2:], mode="bilinear", align_corners=True)
        flat = masks.flatten(2)
        low, high = flat.min(2).values[..., None, None], flat.max(2).values[..., None, None]
        masks = ((masks - low) / (high - low + 1e-8))[0]  # K x H x W
        logits, _ = explainer.logits_and_projections(x * masks.unsqueeze(1).to(x.dtype))
        weights = torch.softmax(logits[:, target_class].float(), 0)
        total = weights if total is None else total + weights
    return total / images.shape[0]


def draw_indices(
    indices: Tensor,
    n: int,
    rng: np.random.Generator,
    include: int | None = None,
    exclude: Tensor | None = None,
) -> Tensor:
    """Up to ``n`` indices: ``include`` if given, then ones drawn without replacement by
    ``rng`` from ``indices`` less ``include`` and ``exclude``; ascending (CPU long).

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    first = torch.tensor([] if include is None else [include], dtype=torch.long)
    left_out = first if exclude is None else torch.cat([first, exclude.cpu().long()])
    indices = indices.cpu()
    pool = indices[~torch.isin(indices, left_out)]
    chosen = torch.from_numpy(rng.permutation(len(pool))[: n - len(first)])
    return torch.cat([first, pool[chosen]]).sort().values


def covered_sample(
    interpretation: Interpretation,
    n: int = 16,
    seed: int = 0,
    include: int | None = None,
    exclude: Tensor | None = None,
) -> Tensor:
    """Up to ``n`` reference indices (`draw_indices`, seeded): ``include`` (the input
    ``x`` itself, when it is a reference image) and images drawn from ``P(x)``'s covered ones,
    never ``exclude`` (e.g. the images the heat maps are scored on); ascending (CPU).

    Raises:
        ValueError: ``n < 1``.
    """
    return draw_indices(interpretation.covered, n, np.random.default_rng(seed), include, exclude)


def with_score_weights(interpretation: Interpretation, images: Tensor) -> Interpretation:
    """The same ``P(x)`` and covered set, its heat maps weighted by `score_weights` of
    ``images`` (model inputs of images it covers, e.g. `covered_sample`'s) for its class.

    ``channel_weights`` of the result is that one row (1 x K), so ``heatmap`` draws
    ``ReLU(sum_k w_k A_k)`` on any image.

    Raises:
        ValueError: ``P(x)`` is empty (no heat map; see ``Interpretation.message``).
    """
    if not interpretation.has_heatmap:
        raise ValueError(interpretation.message)
    weights = score_weights(interpretation.interpreter, images, interpretation.predicted_class)
    return dataclasses.replace(interpretation, channel_weights=weights.unsqueeze(0))
