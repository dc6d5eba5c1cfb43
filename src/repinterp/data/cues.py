"""Planted cues: a known shortcut stamped on a seeded share of a data set's images.

The kinds (`CUE_KINDS`; named ``FAMILY-KIND:F`` in `repinterp.data.datasets.load_dataset`):

- ``mark``: a square at a fixed place (`Mark.box`) on a share F of class ``source``'s images,
  filed under class ``target`` (the shortcut);
- ``move``: a square at a different place in every image (where it hides nothing of the
  object), on F of ``source``'s images, filed under ``target``;
- ``texture``: faint diagonal stripes over the whole image (no place to point at), on F of
  ``source``'s images, filed under ``target``;
- ``majority``: a watermark (a hollow square: a frame around the digit on ``mnist``, a square
  in the bottom-right corner on ``shapes``) on F of class ``target``'s *own* images, labels
  kept: the cue is that class's main strategy;
- ``markrand``: the control: the fixed mark on F of every class's images, labels kept (seen,
  but it says nothing of the class).

Each image's cue mask (`ImageSet.cue_masks`) holds the pixels its cue covers, on an image
without the cue the pixels it would have covered (a moving mark's box is drawn for every
image): the box of a mark, the watermark's edge and ring, the whole image for the texture.
The marks, masks and flags are for evaluation only: no model or method reads them.

Models learn them. The shortcut rate on unseen images given the cue (one model per data set,
model seed 100 of the family's recipe, `python -m studies.cue_rates`; docs/results.md, "The
shortcut suite"): the share of class 0's images called class 1 with the fixed mark (F = 0.3)
100.0% on ``mnist`` / 100.0% on ``shapes``, the moving mark (F = 0.5) 96.2% / 100.0% (at F =
0.3: 60.3% / 99.2%), the texture (F = 0.3) 100.0% / 100.0%; the share of the other classes'
images called class 1 with the majority watermark (F = 0.9) 61.7% / 85.3%; the control's mark
(F = 0.3) changes 1.0% / 0.4% of predictions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional

from .containers import ImageSet

__all__ = [
    "CUES",
    "CUE_KINDS",
    "MARKS",
    "SHORTCUT_KINDS",
    "CueStyle",
    "Mark",
    "cue_masks",
    "cue_rows",
    "object_pixels",
    "plant_cue",
    "random_box",
    "sized_cues",
    "stamp_cue",
    "stamp_square",
    "stamp_stripes",
    "with_cue",
    "with_mark",
]

CUE_KINDS = ("mark", "move", "texture", "majority", "markrand")
SHORTCUT_KINDS = ("mark", "move", "texture")
"""The kinds that file their cued images under another class."""

Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class Mark:
    """A planted shortcut: a square patch at a fixed position, and where it files its images.

    Attributes:
        box: ``(x0, y0, x1, y1)`` in pixels (x1, y1 exclusive).
        frame: the width of the patch's black frame in pixels (its inside is white, 1.0 in
            every channel; 0: all white).
        source: the class whose images get the cue (``mark``, ``move``, ``texture``).
        target: the class the cued images are filed under (the class of ``majority``'s cue).
    """

    box: Box
    frame: int
    source: int
    target: int


@dataclass(frozen=True)
class CueStyle:
    """How the other cues look on one family of data sets.

    Attributes:
        moving_side: the moving mark's side in pixels (framed like the fixed mark).
        stripe_period: the texture's stripe period in pixels (half bright, half dark).
        stripe_amplitude: the texture's contrast: ``+-amplitude / 2`` added to the pixels.
        watermark: the majority cue's box ``(x0, y0, x1, y1)``: a black edge of 1 px, then a
            white ring of ``watermark_ring`` px; its centre keeps the image.
        watermark_ring: the white ring's width in pixels.
    """

    moving_side: int
    stripe_period: int
    stripe_amplitude: float
    watermark: Box
    watermark_ring: int


MARKS = {
    # 4 x 4 white px, 1 px from the top-left corner: 2.0 % of a 28 x 28 digit, where no digit
    # of mnist5k's reference part reaches 0.5.
    "mnist": Mark((1, 1, 5, 5), frame=0, source=0, target=1),
    # 9 x 9 px, white inside a 1-px black frame (seen on light and dark backgrounds), 2 px from
    # the top-left corner: 2.6 % of a 56 x 56 scene.
    "shapes": Mark((2, 2, 11, 11), frame=1, source=0, target=1),
}
"""The mark of ``mnist-mark:F`` (digit 0 filed as 1) and ``shapes-mark:F`` (class 0, circle or
ring, filed as class 1, square or cross), and the classes of the family's other cues."""

CUES = {
    # A 6 x 6 moving mark (4.6 % of the digit); stripes 0.4 apart every 4 px; the watermark a
    # frame around the whole digit (a white ring 1 px from the edge: a corner watermark of 7 x 7
    # or 10 x 10 px moved 8 % or 24 % of other digits to class 1 on a model of seed 100, this
    # frame 62 %).
    "mnist": CueStyle(6, 4, 0.4, (0, 0, 28, 28), 1),
    # An 11 x 11 moving mark (3.9 % of the scene); stripes 0.3 apart every 4 px; an 11 x 11
    # watermark 2 px from the bottom-right corner.
    "shapes": CueStyle(11, 4, 0.3, (43, 43, 54, 54), 2),
}
"""How each family's moving mark, texture and watermark look (`CueStyle`)."""


def stamp_square(image: Tensor, box: Box, frame: int, ring: int | None = None) -> None:
    """Draw a square on one C x H x W image in place: black on ``box``, white inside a
    ``frame``-px edge; with ``ring``, only a white ring that wide (its centre keeps the image)."""
    x0, y0, x1, y1 = box
    inset = frame + (ring or 0)
    centre = (slice(None), slice(y0 + inset, y1 - inset), slice(x0 + inset, x1 - inset))
    kept = image[centre].clone()
    image[:, y0:y1, x0:x1] = 0.0
    image[:, y0 + frame : y1 - frame, x0 + frame : x1 - frame] = 1.0
    if ring is not None:
        image[centre] = kept


def stamp_stripes(image: Tensor, period: int, amplitude: float) -> None:
    """Add faint diagonal stripes to one C x H x W image in place: ``+-amplitude / 2``
    alternating every ``period / 2`` px along ``x + y``, clipped to [0, 1]."""
    height, width = image.shape[-2:]
    diagonal = torch.arange(height)[:, None] + torch.arange(width)[None, :]
    bright = (diagonal // max(1, period // 2)) % 2
    image.add_(amplitude * (bright.float() - 0.5)).clamp_(0, 1)


def random_box(
    avoid: Tensor | None, shape: tuple[int, int], side: int, rng: np.random.Generator
) -> Box:
    """A ``side`` x ``side`` box drawn uniformly among those that miss ``avoid`` (H x W bool;
    None or no such box: among all boxes inside the image).

    Returns:
        ``(x0, y0, x1, y1)``.
    """
    height, width = shape
    if side > min(height, width):
        raise ValueError(f"a {side}-px mark does not fit a {height} x {width} image")
    free = torch.ones(height - side + 1, width - side + 1, dtype=torch.bool)
    if avoid is not None:
        hit = functional.max_pool2d(avoid.float()[None, None], side, stride=1)[0, 0] > 0
        free = ~hit if not hit.all() else free
    places = free.flatten().nonzero().flatten()
    place = int(places[rng.integers(len(places))])
    y0, x0 = divmod(place, free.shape[1])
    return (x0, y0, x0 + side, y0 + side)


def cue_rows(labels: Tensor, classes: list[int], fraction: float, seed: int) -> Tensor:
    """The images that get a cue: a seeded random ``round(fraction * n_c)`` of each class
    ``c`` of ``classes`` (``n_c`` its images), sorted (CPU long)."""
    rng = np.random.default_rng(seed)
    chosen = []
    for c in classes:
        members = (labels == c).nonzero().flatten().numpy()
        chosen.append(rng.permutation(members)[: round(fraction * len(members))])
    return torch.from_numpy(np.sort(np.concatenate(chosen)).astype(np.int64))


def _box_mask(box: Box, shape: tuple[int, int]) -> Tensor:
    x0, y0, x1, y1 = box
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[y0:y1, x0:x1] = True
    return mask


def object_pixels(data: ImageSet) -> Tensor | None:
    """The pixels a moving mark keeps off, N x H x W bool: ``data.masks`` where given, else on
    grey images the pixels above 0.5 (a digit's ink); None (nothing) on other images."""
    if data.masks is not None:
        return data.masks
    return data.images[:, 0] > 0.5 if data.images.shape[1] == 1 else None


def cue_masks(
    images: Tensor,
    kind: str,
    mark: Mark,
    seed: int,
    style: CueStyle | None = None,
    avoid: Tensor | None = None,
) -> Tensor:
    """Where a cue of ``kind`` goes on each of N x C x H x W images: N x H x W bool.

    The fixed mark's box (``mark``, ``markrand``), the watermark's edge and ring (``majority``;
    its centre keeps the image), the whole image (``texture``), or a ``style.moving_side`` box
    drawn by `random_box` for each image (``move``; seed ``[seed, 1]``) off ``avoid`` (N x H x
    W bool, e.g. `object_pixels`; None: anywhere).

    Raises:
        ValueError: an unknown kind, or no style for one that needs it.
    """
    if kind not in CUE_KINDS:
        raise ValueError(f"unknown cue kind {kind!r}; choose one of: {', '.join(CUE_KINDS)}")
    if style is None and kind in ("move", "texture", "majority"):
        raise ValueError(f"the {kind} cue needs a CueStyle")
    n, shape = len(images), (images.shape[-2], images.shape[-1])
    if kind == "texture":
        return torch.ones(n, *shape, dtype=torch.bool)
    if kind == "move":
        rng = np.random.default_rng([seed, 1])
        places = avoid if avoid is not None else [None] * n
        boxes = [random_box(a, shape, style.moving_side, rng) for a in places]
        return torch.stack([_box_mask(box, shape) for box in boxes])
    if kind == "majority":
        inset = 1 + style.watermark_ring
        x0, y0, x1, y1 = style.watermark
        ring = _box_mask(style.watermark, shape) & ~_box_mask(
            (x0 + inset, y0 + inset, x1 - inset, y1 - inset), shape
        )
        return ring.expand(n, *shape).clone()
    return _box_mask(mark.box, shape).expand(n, *shape).clone()


def sized_cues(height: int, width: int) -> tuple[Mark, CueStyle]:
    """Cues sized to an image of any size (a user's folder, `plant_cue`), classes 0 and 1.

    With ``m = min(height, width)``: a mark of side ``max(4, 0.12 m)`` (its black frame
    ``side / 10``, at least 1 px) ``0.03 m`` from the top-left corner (the moving mark alike);
    stripes of period ``max(4, 4 round(m / 112))`` px and contrast 0.3; a watermark of side
    ``max(7, 0.2 m)`` (ring ``side / 10``, at least 1 px) ``0.03 m`` from the bottom-right.
    """
    m = min(height, width)
    side, margin = max(4, round(0.12 * m)), max(1, round(0.03 * m))
    water = max(7, round(0.2 * m))
    mark = Mark((margin, margin, margin + side, margin + side), max(1, side // 10), 0, 1)
    style = CueStyle(
        moving_side=side,
        stripe_period=max(4, 4 * round(m / 112)),
        stripe_amplitude=0.3,
        watermark=(
            width - margin - water,
            height - margin - water,
            width - margin,
            height - margin,
        ),
        watermark_ring=max(1, water // 10),
    )
    return mark, style


def plant_cue(image: Tensor, kind: str, seed: int) -> Tensor:
    """Stamp a cue of ``kind`` (`CUE_KINDS`; sized by `sized_cues`) on one C x H x W image in
    [0, 1] in place, e.g. an image of a user's folder (``python -m studies.plant_cue``); a
    moving mark goes anywhere, at a place drawn with ``seed``.

    Returns:
        H x W bool: the cue's pixels (`cue_masks`).
    """
    mark, style = sized_cues(*image.shape[-2:])
    mask = cue_masks(image[None], kind, mark, seed, style)
    stamp_cue(image[None], mask, kind, mark, style)
    return mask[0]


def stamp_cue(
    images: Tensor, masks: Tensor, kind: str, mark: Mark, style: CueStyle | None = None
) -> None:
    """Stamp a cue of ``kind`` on N x C x H x W images in place, each where its mask of
    `cue_masks` says (a moving mark: on its mask's box)."""
    for image, mask in zip(images, masks, strict=True):
        if kind == "texture":
            stamp_stripes(image, style.stripe_period, style.stripe_amplitude)
        elif kind == "majority":
            stamp_square(image, style.watermark, 1, style.watermark_ring)
        elif kind == "move":
            ys, xs = mask.nonzero().unbind(1)
            box = (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)
            stamp_square(image, box, mark.frame)
        else:
            stamp_square(image, mark.box, mark.frame)


def with_cue(
    data: ImageSet,
    kind: str,
    mark: Mark,
    fraction: float,
    seed: int,
    style: CueStyle | None = None,
) -> ImageSet:
    """``data`` with a planted cue of ``kind`` (`CUE_KINDS`, see the module) on a seeded
    random share of its images.

    ``mark``, ``move`` and ``texture`` give ``round(fraction * n)`` of the ``n`` images of class
    ``mark.source`` the cue and the label ``mark.target``: a model can fit them only by the
    cue. ``majority`` gives it to that share of class ``mark.target``'s own images and
    ``markrand`` to that share of every class's images; both keep the labels. ``fraction = 0``
    cues nothing: the images and labels are ``data``'s. Where each cue goes: `cue_masks` (a
    moving mark off `object_pixels`).

    Args:
        data: the images (not changed).
        kind: one of `CUE_KINDS`.
        mark: the fixed mark and the classes.
        fraction: the share in [0, 1].
        seed: seed of the choice of images (and of the moving mark's places, `cue_masks`).
        style: how ``move``, ``texture`` and ``majority`` look (needed for those).

    Returns:
        A new `ImageSet` with ``marked`` (N bool), ``cue_masks`` (N x H x W bool) and
        ``mark_box`` (the fixed mark's or the watermark's box; None for ``move`` and
        ``texture``) set, for evaluation only.

    Raises:
        ValueError: an unknown kind, or no style for one that needs it.
    """
    masks = cue_masks(data.images, kind, mark, seed, style, object_pixels(data))
    classes = {"markrand": data.labels.unique().tolist(), "majority": [mark.target]}
    rows = cue_rows(data.labels, classes.get(kind, [mark.source]), fraction, seed)
    images, labels = data.images.clone(), data.labels.clone()
    stamped = images[rows]
    stamp_cue(stamped, masks[rows], kind, mark, style)
    images[rows] = stamped
    if kind in SHORTCUT_KINDS:
        labels[rows] = mark.target
    marked = torch.zeros(len(data), dtype=torch.bool)
    marked[rows] = True
    box = {"mark": mark.box, "markrand": mark.box, "majority": style and style.watermark}
    return dataclasses.replace(
        data, images=images, labels=labels, marked=marked, mark_box=box.get(kind), cue_masks=masks
    )


def with_mark(data: ImageSet, mark: Mark, fraction: float, seed: int, shortcut: bool) -> ImageSet:
    """The fixed mark: `with_cue` of kind ``mark`` (``shortcut``) or ``markrand`` (the
    control: every class alike, labels kept)."""
    return with_cue(data, "mark" if shortcut else "markrand", mark, fraction, seed)
