"""The heat maps the ``shortcut`` protocol compares (`MAPS`) and the share of a map on the cue
(`mass_on_cue`, `mass_in_box`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ...methods import CAMMethod
from ...metrics import energy_in_mask
from .images import ShortcutImages, box_masks

__all__ = ["MAPS", "mass_in_box", "mass_on_cue"]


def mass_on_cue(maps: Tensor, cue: Tensor) -> tuple[Tensor, Tensor]:
    """The share of each heat map's positive relevance on its image's cue, and the cue's share
    of the image (what a uniform map puts there).

    Args:
        maps: N x H x W heat maps (negative values count as 0).
        cue: N x H x W bool, each image's cue pixels (`repinterp.data.cues.cue_masks`).

    Returns:
        ((N,) shares in [0, 1], NaN for a map without positive relevance; (N,) area shares).

    Raises:
        ValueError: the shapes differ.
    """
    if maps.dim() != 3 or cue.shape != maps.shape:
        raise ValueError(f"cue masks {tuple(cue.shape)} for maps {tuple(maps.shape)}")
    shares = energy_in_mask(maps.detach().float().cpu().clamp(min=0), cue.cpu())
    return shares, cue.double().mean((1, 2)).float()


def mass_in_box(maps: Tensor, box: tuple[int, int, int, int]) -> tuple[Tensor, float]:
    """`mass_on_cue` with one box ``(x0, y0, x1, y1)`` (pixels of the maps, x1, y1 exclusive)
    for every map: ((N,) shares, the box's area share in (0, 1]).

    Raises:
        ValueError: the box is empty or not inside the maps.
    """
    x0, y0, x1, y1 = box
    height, width = maps.shape[-2:]
    if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height) or maps.dim() != 3:
        raise ValueError(f"the box {tuple(box)} is not inside N x {height} x {width} maps")
    inside = box_masks(box, (height, width)).expand(maps.shape)
    return mass_on_cue(maps, inside)[0], (x1 - x0) * (y1 - y0) / (height * width)


def _ri_map(name: str) -> Callable[[ShortcutImages], Tensor]:
    """Each unseen image's heat map of its own ``P(x)`` by RI variant ``name`` (an image
    without a polytope: NaN)."""

    def maps(images: ShortcutImages) -> Tensor:
        inputs = images.inputs("unseen")
        out = []
        for e, x in zip(images.polytopes(name), inputs, strict=True):
            out.append(
                e.heatmap(x[None])[0].cpu()
                if e.has_heatmap
                else torch.full(x.shape[-2:], torch.nan)
            )
        return torch.stack(out) if out else torch.zeros(0, *inputs.shape[-2:])

    return maps


def _class_cam(images: ShortcutImages) -> Tensor:
    """Grad-CAM with weights averaged over the predicted class's reference images (the
    protocols' ``Grad-CAM+class``)."""
    run = images.run
    return CAMMethod("Grad-CAM", "class").unseen(run, run.setup.unseen_pixels)[images.unseen].cpu()


MAPS: dict[str, Callable[[ShortcutImages], Tensor]] = {
    "RI": _ri_map("RI"),
    "RI+strategy": _ri_map("RI+strategy"),
    "Grad-CAM": lambda images: images.cam("Grad-CAM", "unseen"),
    "Grad-CAM++": lambda images: images.cam("Grad-CAM++", "unseen"),
    "Score-CAM": lambda images: images.cam("Score-CAM", "unseen"),
    "Grad-CAM+class": _class_cam,
}
"""Each heat map: the unseen images looked at -> their N x H x W maps."""
