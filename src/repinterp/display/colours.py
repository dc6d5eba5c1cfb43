"""Heat maps in colour: the colormaps, the scale they are drawn on, colour bars and overlays
on the images, as the notebook views, the report and the viewer draw them."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["COLORMAPS", "DEFAULT_COLORMAP", "SCALE", "colorbar_css", "colorize", "overlay"]

COLORMAPS = ("inferno", "viridis", "jet")
DEFAULT_COLORMAP = "inferno"
SCALE = (
    "per-image min-max: 0 = coldest pixel, 1 = hottest, of the polytope's map (the mean of its "
    "boundaries' min-max maps, the paper's §5.1, which peaks below 1), scaled again to draw it"
)
"""How the viewer, the report and the notebook colour a heat map; the numbers
(`polytope_heatmaps`, ``heatmaps.npy``) are the polytope's map itself, not scaled again."""


def colorize(heat: Tensor, cmap: str = DEFAULT_COLORMAP) -> np.ndarray:
    """A heat map in colour, for display.

    Args:
        heat: H x W in [0, 1] (as [`heatmaps`][repinterp.core.heatmap.heatmaps] makes them:
            per-image min-max, see `SCALE`).
        cmap: a matplotlib colormap name; the perceptually uniform ``"inferno"`` by default
            (``"jet"`` only on request: its bright bands look like edges that are not there).

    Returns:
        H x W x 3 float array in [0, 1].

    Raises:
        ValueError: an unknown colormap.
    """
    from matplotlib import colormaps

    if cmap not in colormaps:
        raise ValueError(f"unknown colormap {cmap!r}; e.g. one of {', '.join(COLORMAPS)}")
    return colormaps[cmap](heat.detach().cpu().float().clamp(0, 1).numpy())[..., :3]


def colorbar_css(cmap: str = DEFAULT_COLORMAP, stops: int = 11) -> str:
    """A CSS ``linear-gradient`` (left = 0 = coldest) of a colormap (see `colorize`), at
    ``stops`` evenly spaced values."""
    colours = np.rint(colorize(torch.linspace(0, 1, stops), cmap) * 255).astype(int)
    hexes = ", ".join("#{:02x}{:02x}{:02x}".format(*rgb) for rgb in colours)
    return f"linear-gradient(to right, {hexes})"


def overlay(
    image: Tensor, heat: Tensor, alpha: float = 0.5, cmap: str = DEFAULT_COLORMAP
) -> np.ndarray:
    """An RGB overlay of a heat map on an image, for display: ``(1 - alpha) * image + alpha *
    colorize(heat, cmap)``.

    Args:
        image: C x H x W in [0, 1] pixel space (C = 1 or 3).
        heat: H x W in [0, 1].
        alpha: opacity of the heat map, in [0, 1] (0: the image alone, 1: the heat map alone).
        cmap: a matplotlib colormap name (see [`colorize`][repinterp.display.colours.colorize]).

    Returns:
        H x W x 3 float array in [0, 1].

    Raises:
        ValueError: ``alpha`` outside [0, 1] or an unknown colormap.
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    rgb = image.detach().cpu().float().clamp(0, 1)
    if rgb.shape[0] == 1:
        rgb = rgb.expand(3, -1, -1)
    return (1 - alpha) * rgb.permute(1, 2, 0).numpy() + alpha * colorize(heat, cmap)
