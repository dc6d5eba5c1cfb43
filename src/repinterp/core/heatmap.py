"""Heat maps of a polytope ``P(x)`` (§5.1 of the paper); drawn in colour by
[`repinterp.display.colours`][repinterp.display.colours]."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .boundaries import Boundaries

__all__ = [
    "EPS",
    "channel_means",
    "heatmaps",
    "input_side_weights",
    "normalize_maps",
    "polytope_heatmaps",
]

EPS = 1e-7


def input_side_weights(means: Tensor, input_sides: Tensor) -> Tensor:
    """Channel weights ``alpha`` of each boundary of ``P(x)``.

    Each ``W`` is flipped so that the input lies on its positive side (an input exactly on a
    boundary keeps ``W`` as it is); ``alpha_k`` is the mean of ``W`` over channel ``k``'s
    spatial positions. The mean is taken before the flip, which is exact in floating point.

    Args:
        means: |P| x K, the [`channel_means`][repinterp.core.heatmap.channel_means] of the
            boundaries of ``P(x)``.
        input_sides: |P| signs of the input on them (-1, 0 or 1).

    Returns:
        |P| x K, in the dtype and on the device of ``means``.
    """
    flip = torch.where(input_sides < 0, -1.0, 1.0).to(means.dtype)
    return means * flip.unsqueeze(1)


def channel_means(boundaries: Boundaries) -> Tensor:
    """|Q| x K: each boundary's ``W`` averaged over each channel's spatial positions (the same
    numbers for a boundary whichever others are averaged with it).

    Raises:
        ValueError: the weights are not |Q| x K x h x w.
    """
    if boundaries.weight.ndim != 4:
        raise ValueError(
            "heat maps need K x h x w feature maps; this target layer gives shape "
            f"{tuple(boundaries.weight.shape[1:])}"
        )
    return boundaries.weight.flatten(2).mean(2)


def normalize_maps(maps: Tensor) -> Tensor:
    """``(m - min) / (max - min + 1e-7)`` over the last two dimensions."""
    flat = maps.flatten(-2)
    low = flat.min(-1, keepdim=True).values
    high = flat.max(-1, keepdim=True).values
    return ((flat - low) / (high - low + EPS)).view_as(maps)


def heatmaps(
    features: Tensor,
    alphas: Tensor,
    size: tuple[int, int],
    max_elements: int = 1 << 25,
) -> Tensor:
    """Heat maps of one polytope on N images, reusing its channel weights.

    For each boundary: ``ReLU(sum_k alpha_k t_k)``, upsampled bilinearly (align_corners=False)
    to ``size`` and min-max normalised; the polytope's map is the mean over its boundaries
    (computed with one upsampling per image, see
    [`polytope_heatmaps`][repinterp.core.heatmap.polytope_heatmaps]).

    Args:
        features: N x K x h x w feature maps ``psi`` of the images.
        alphas: |P| x K channel weights (|P| >= 1).
        size: the images' H, W.
        max_elements: images are processed in chunks of at most this many pixels (N x H x W).

    Returns:
        N x H x W in [0, 1].
    """
    which = torch.zeros(features.shape[0], dtype=torch.long, device=features.device)
    return polytope_heatmaps(features, [alphas], which, size, max_elements)


def polytope_heatmaps(
    features: Tensor,
    alphas: Sequence[Tensor],
    which: Tensor,
    size: tuple[int, int],
    max_elements: int = 1 << 25,
) -> Tensor:
    """Heat maps of N images, image ``n`` drawn as [`heatmaps`][repinterp.core.heatmap.heatmaps]
    draws it with the channel weights of polytope ``which[n]``, whatever the polytopes.

    Bilinear upsampling ``U`` is linear and keeps constants, so the mean over the boundaries
    of ``(U r_p - lo_p) / (hi_p - lo_p + eps)`` is ``U(sum_p c_p (r_p - lo_p))`` with
    ``c_p = 1 / (|P| (hi_p - lo_p + eps))``: one upsampling per image, not one per boundary.
    ``lo_p`` and ``hi_p``, the extremes of ``U r_p``, lie on the few output rows and columns
    that `_extreme_samples` names, where ``U r_p`` alone is computed. The maps equal
    the per-boundary computation up to float rounding, clamped to [0, 1].

    Args:
        features: N x K x h x w feature maps ``psi`` of the images.
        alphas: per polytope, its |P| x K channel weights (|P| >= 1).
        which: N long, the polytope of each image.
        size: the images' H, W.
        max_elements: images are processed in chunks of at most this many pixels (N x H x W).

    Returns:
        N x H x W in [0, 1].
    """
    if any(a.shape[0] == 0 for a in alphas):
        raise ValueError("P(x) is empty: there is no boundary to draw a heat map from")
    if features.shape[0] == 0:
        return features.new_zeros(0, *size)
    longest = max(a.shape[0] for a in alphas)
    table = features.new_zeros(len(alphas), longest, features.shape[1])
    share = features.new_zeros(len(alphas), longest)  # 1 / |P| for each boundary, 0 past |P|
    for v, a in enumerate(alphas):
        table[v, : a.shape[0]] = a
        share[v, : a.shape[0]] = 1 / a.shape[0]
    rows = _extreme_samples(features.shape[2], size[0]).to(features)
    columns = _extreme_samples(features.shape[3], size[1]).to(features)
    which = which.to(features.device)
    chunk = max(1, max_elements // (size[0] * size[1]))
    out = []
    for part, polytope in zip(features.split(chunk), which.split(chunk), strict=True):
        raw = torch.relu(torch.einsum("npk,nkij->npij", table[polytope], part))
        samples = torch.einsum("yi,npij,xj->npyx", rows, raw, columns).flatten(2)
        low, high = samples.amin(2), samples.amax(2)
        c = share[polytope] / (high - low + EPS)
        combined = torch.einsum("np,npij->nij", c, raw - low[..., None, None]).unsqueeze(1)
        up = F.interpolate(combined, size=size, mode="bilinear", align_corners=False)
        out.append(up[:, 0].clamp_(0, 1))
    return torch.cat(out)


@functools.cache
def _extreme_samples(n_in: int, n_out: int) -> Tensor:
    """The rows of bilinear interpolation (align_corners=False) from ``n_in`` to ``n_out``
    samples, as weights (S x ``n_in`` float64), at which any interpolated signal takes its
    extremes: each output mixes two neighbouring inputs with a weight affine in its position,
    so among the outputs between the same two inputs the first and last are the extremes.
    Cached: callers must not modify it."""
    scale = n_in / n_out
    source = ((torch.arange(n_out, dtype=torch.float64) + 0.5) * scale - 0.5).clamp(min=0)
    first = source.floor().long().clamp(max=n_in - 1)
    second = (first + 1).clamp(max=n_in - 1)
    weight = source - first
    keep = torch.zeros(n_out, dtype=torch.bool)
    for i in first.unique():
        at = (first == i).nonzero().flatten()
        keep[at[weight[at].argmin()]] = keep[at[weight[at].argmax()]] = True
    out = torch.zeros(int(keep.sum()), n_in, dtype=torch.float64)
    kept = keep.nonzero().flatten()
    out[torch.arange(len(kept)), first[kept]] += 1 - weight[kept]
    out[torch.arange(len(kept)), second[kept]] += weight[kept]
    return out
