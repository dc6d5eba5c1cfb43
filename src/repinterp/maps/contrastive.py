"""Beyond the paper: contrastive maps, why the model says an image's predicted class ``c``
rather than a class ``c'`` asked for.

The boundary between ``c`` and ``c'`` at the image's own feature map ``t`` has Eq. 2's weights
([`compute_boundaries`][repinterp.core.boundaries.compute_boundaries] with the pair
``(c, c')``); its map is §5.1's drawing of one boundary, with channel weights ``W``'s mean over
each channel's positions. The interpreter's ``contrastive_boundaries`` and
``contrastive_heatmap`` run the model and call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..core.boundaries import Boundaries, compute_boundaries
from ..core.heatmap import channel_means, polytope_heatmaps

__all__ = ["Contrast", "contrast_pairs", "contrastive_boundaries", "contrastive_heatmaps"]

Contrast = int | Sequence[int] | Tensor
"""The class ``c'`` to contrast with: one for every image, or one per image."""


def contrast_pairs(predicted: Tensor, contrast: Contrast, n_classes: int) -> Tensor:
    """The ``(c, c')`` pair of each image, checked.

    Args:
        predicted: N long, each image's predicted class ``c``.
        contrast: ``c'``: one class for every image, or one per image.
        n_classes: the model's number of classes.

    Returns:
        N x 2 long (CPU): ``c`` and ``c'``.

    Raises:
        ValueError: a class out of range, a number of classes other than of images, or
            ``c' = c`` for some image (its map is its interpretation's own,
            ``explain(x).heatmap``).
    """
    predicted = predicted.cpu()
    others = torch.as_tensor(contrast, dtype=torch.long).flatten().cpu()
    if others.numel() == 1:
        others = others.expand(len(predicted))
    if others.numel() != len(predicted):
        raise ValueError(f"{others.numel()} contrast classes for {len(predicted)} images")
    bad = (others < 0) | (others >= n_classes)
    if bool(bad.any()):
        raise ValueError(
            f"contrast class {int(others[bad][0])} is not one of the model's "
            f"{n_classes} classes (0 to {n_classes - 1})"
        )
    same = (others == predicted).nonzero().flatten()
    if same.numel():
        i = int(same[0])
        raise ValueError(
            f"image {i} is predicted class {int(predicted[i])}, the contrast class asked "
            "for: the map of its predicted class is its interpretation's (explain(x).heatmap)"
        )
    return torch.stack([predicted, others], 1)


def contrastive_heatmaps(features: Tensor, boundaries: Boundaries, size: tuple[int, int]) -> Tensor:
    """Image ``n``'s map of its own boundary ``n`` (§5.1: ``ReLU(sum_k alpha_k t_k)``,
    upsampled, min-max), ``alpha_k`` the boundary's ``W`` averaged over channel ``k``'s
    positions.

    Args:
        features: N x K x h x w feature maps of the images.
        boundaries: N boundaries, one per image.
        size: the images' H, W.

    Returns:
        N x H x W in [0, 1], on the device of ``features``.
    """
    alphas = list(channel_means(boundaries).unsqueeze(1))
    which = torch.arange(len(alphas), device=features.device)
    return polytope_heatmaps(features, alphas, which, size)


def contrastive_boundaries(
    head: Callable[[Tensor], Tensor],
    features: Tensor,
    contrast: Contrast,
    n_classes: int,
) -> Boundaries:
    """Each image's boundary between its predicted class ``c`` (by ``head`` at its feature map)
    and the ``c'`` of ``contrast``, with Eq. 2's weights at its feature map.

    Args:
        head: ``G``, N x K x h x w feature maps -> N x classes logits.
        features: N x K x h x w, the images' feature maps.
        contrast: ``c'``: one class for every image, or one per image.
        n_classes: the number of classes.

    Returns:
        N boundaries; ``top_classes`` holds each ``(c, c')``.
    """
    with torch.inference_mode():
        predicted = head(features).argmax(1).cpu()
    classes = contrast_pairs(predicted, contrast, n_classes)
    return compute_boundaries(head, features, classes)
