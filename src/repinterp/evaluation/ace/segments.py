"""ACE's segments and patches (steps 1 and 2 of [`ace`][repinterp.evaluation.ace]): SLIC at
three resolutions filtered by `unique_segments` (`segment`, and `Segments` for a group of
images), and a segment on the grey fill as the model sees it (`grey_patch`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from skimage.segmentation import slic
from torch import Tensor

from ...data.reference import check_images

__all__ = [
    "GREY_FILL",
    "Segments",
    "grey_patch",
    "segment",
    "slic_label_maps",
    "unique_segments",
]

# The original's ``average_image_value`` 117, in [0, 1] pixel space.
GREY_FILL = 117 / 255
SLIC_N_SEGMENTS = (15, 50, 80)
SLIC_COMPACTNESS = 20.0
SLIC_SIGMA = 1.0


def unique_segments(
    label_maps: Sequence[np.ndarray], min_area: float = 0.001, max_jaccard: float = 0.5
) -> list[tuple[int, int]]:
    """ACE's segment selection over label maps of one image, one map per resolution.

    A segment is kept if it covers more than ``min_area`` of the image and its Jaccard
    overlap with every segment kept at an earlier resolution is at most ``max_jaccard``.

    Args:
        label_maps: H x W integer label maps (any labels, e.g. SLIC's, from 1).
        min_area: share of the image a segment must exceed.
        max_jaccard: largest overlap allowed with an earlier resolution's kept segment.

    Returns:
        ``(resolution index, label)`` of each kept segment, by resolution then label.
    """
    if not len(label_maps):
        return []
    kept: list[tuple[int, int]] = []
    earlier = np.zeros((0, label_maps[0].size), dtype=bool)
    for r, labels in enumerate(label_maps):
        flat = labels.reshape(-1)
        new_keys, new_masks = [], []
        for label in np.unique(flat):
            mask = flat == label
            if mask.mean() <= min_area:
                continue
            intersection = (earlier & mask).sum(1)
            union = (earlier | mask).sum(1)
            if np.all(intersection <= max_jaccard * union):
                new_keys.append((r, int(label)))
                new_masks.append(mask)
        kept += new_keys
        if new_masks:
            earlier = np.concatenate([earlier, np.stack(new_masks)])
    return kept


def slic_label_maps(image01: Tensor) -> np.ndarray:
    """R x H x W SLIC label maps of a C x H x W image, one per resolution of ACE."""
    if not isinstance(image01, Tensor) or image01.ndim != 3:
        raise ValueError("image01 must be a floating C x H x W tensor in [0, 1]")
    check_images(image01.unsqueeze(0), what="image01", pixels=True)
    pixels = image01.detach().cpu().double().numpy().transpose(1, 2, 0)
    if pixels.shape[2] == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    return np.stack(
        [
            slic(
                pixels,
                n_segments=n,
                compactness=SLIC_COMPACTNESS,
                sigma=SLIC_SIGMA,
                channel_axis=-1,
            )
            for n in SLIC_N_SEGMENTS
        ]
    ).astype(np.int32)


def segment(image01: Tensor) -> list[np.ndarray]:
    """ACE's segments of one image: SLIC at three resolutions, filtered by `unique_segments`.

    Args:
        image01: C x H x W image in [0, 1] (C = 1 is repeated to RGB before SLIC).

    Returns:
        H x W bool masks, by resolution (15, 50, 80 segments) then label.
    """
    label_maps = slic_label_maps(image01)
    return [label_maps[r] == label for r, label in unique_segments(label_maps)]


@dataclass(frozen=True)
class Segments:
    """ACE's segments of a group of images, kept as SLIC label maps rather than masks.

    Attributes:
        label_maps: per image, R x H x W int32 label maps (one per SLIC resolution).
        keys: S x 3 int64 ``(image, resolution, label)`` of each kept segment.
    """

    label_maps: list[np.ndarray]
    keys: np.ndarray

    @staticmethod
    def of(images01: Tensor) -> Segments:
        """The segments of N x C x H x W images in [0, 1], as `segment` finds them."""
        label_maps = [slic_label_maps(image) for image in images01]
        keys = [
            (i, r, label) for i, maps in enumerate(label_maps) for r, label in unique_segments(maps)
        ]
        return Segments(label_maps, np.array(keys, dtype=np.int64).reshape(-1, 3))

    def __len__(self) -> int:
        return len(self.keys)

    def mask(self, s: int) -> np.ndarray:
        i, r, label = self.keys[s]
        return self.label_maps[i][r] == label


def grey_patch(
    image01: Tensor, mask: np.ndarray | Tensor, size: tuple[int, int] | None = None
) -> Tensor:
    """A segment on ACE's grey fill, cropped to its bounding box and resized.

    Args:
        image01: C x H x W image in [0, 1].
        mask: H x W bool mask of the segment (not empty).
        size: ``(height, width)`` of the patch; None: the image's.

    Returns:
        C x height x width patch in [0, 1] (bicubic, antialiased as PIL's, clamped), before
        normalisation.
    """
    mask = torch.as_tensor(mask, device=image01.device)
    rows = torch.nonzero(mask.any(1)).flatten()
    cols = torch.nonzero(mask.any(0)).flatten()
    if rows.numel() == 0:
        raise ValueError("mask is empty")
    r0, r1, c0, c1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    crop = torch.where(mask[r0:r1, c0:c1], image01[:, r0:r1, c0:c1], GREY_FILL)
    size = size or tuple(image01.shape[1:])
    resized = F.interpolate(
        crop[None], size=size, mode="bicubic", antialias=True, align_corners=False
    )
    return resized[0].clamp_(0, 1)
