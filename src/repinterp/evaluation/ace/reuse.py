"""ACE's reuse on new images (from the RI paper, §6.1; see [`ace`][repinterp.evaluation.ace]):
segments assigned to the nearest concept (`assign_to_concepts`), then kept, most important first,
past a share of the pixels (`keep_segments`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["assign_to_concepts", "keep_segments"]


def assign_to_concepts(features: np.ndarray, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """Assign segments to their nearest concept, dropping those outside every concept.

    Args:
        features: S x K averaged activations of the segments' patches.
        centres: M x K concept centres.
        radii: (M,) distance from each centre of its farthest kept member.

    Returns:
        (S,) int64: the nearest centre (lowest index on ties), or -1 when the segment is
        farther from every centre than that concept's radius.
    """
    if len(centres) == 0:
        return np.full(len(features), -1, dtype=np.int64)
    distances = np.linalg.norm(features[:, None, :] - centres[None, :, :], axis=-1)
    inside = (distances <= radii[None, :]).any(1)
    return np.where(inside, distances.argmin(1), -1).astype(np.int64)


def keep_segments(
    masks: Sequence[np.ndarray], importance: Sequence[float], fraction: float = 0.2
) -> np.ndarray:
    """Keep segments, most important first, until more than ``fraction`` of the pixels is kept.

    Ties in importance go to the larger segment, then to the earlier one. Overlapping
    segments count their pixels once; if all segments together keep no more than
    ``fraction``, all are kept.

    Args:
        masks: H x W bool masks (at least one).
        importance: importance of each segment (its concept's).
        fraction: share of pixels to exceed, in (0, 1).

    Returns:
        H x W bool mask of the kept pixels.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    sizes = np.array([mask.sum() for mask in masks])
    order = np.lexsort((np.arange(len(masks)), -sizes, -np.asarray(importance, dtype=float)))
    kept = np.zeros_like(masks[0], dtype=bool)
    for index in order:
        kept |= masks[index]
        if kept.sum() > fraction * kept.size:
            break
    return kept
