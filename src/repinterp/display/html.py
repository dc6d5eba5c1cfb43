"""Self-contained HTML for notebooks: images inline as base64 PNGs, no server and no files.

The views of an interpretation
([`show_interpretation`][repinterp.display.interpretation.show_interpretation]), of regions
([`show_regions`][repinterp.display.regions.show_regions]) and of a strategy
([`show_strategy`][repinterp.display.strategy.show_strategy]) are built from these pieces.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ..core.heatmap import normalize_maps
from .colours import SCALE, colorbar_css, colorize, overlay

__all__ = [
    "COLOUR_BAR_HEIGHT",
    "COLOUR_BAR_WIDTH",
    "MEANINGS",
    "SHOWN_SIDE",
    "SUB_LABEL_COLOURS",
    "THUMBNAIL_SIDE",
    "Mispredicted",
    "class_lines",
    "colour_bar",
    "composition_html",
    "composition_text",
    "displayable",
    "figure",
    "page",
    "png_uri",
    "row_header",
    "shown_height",
    "sub_label_colour",
    "tile",
]

THUMBNAIL_SIDE = 128
"""The longest side, in pixels, of an image encoded into the HTML (larger ones are shrunk)."""
SHOWN_SIDE = 96
"""The width, in CSS pixels, at which every image is shown (small ones are enlarged, sharp)."""
COLOUR_BAR_WIDTH, COLOUR_BAR_HEIGHT = 192, 10
"""The colour bar's size in CSS pixels."""

# What each number shown means, one phrase each.
MEANINGS = {
    "score": "the model's softmax probability of the predicted class",
    "label": "the image's true class in the reference set; in red, marked 'mispredicted', when "
    "the model predicts another class",
    "delta": "tau(x): reference images of other classes that no polytope of Q separates from "
    "the input, so P(x) must cover them",
    "representativeness": "|P(x) ∩ R|: the reference images P(x) covers, of |R|",
    "|P|": "the boundaries of Q that make P(x)",
    "regions": "the k-means regions whose inputs share this polytope",
    "interprets": "the reference images these regions interpret (each image is interpreted by "
    "one region: the covering region of largest representativeness, else the region of its "
    "nearest k-means centre)",
    "sub-labels": "what the images it interprets are made of, by sub-label (a sub-concept known "
    "for evaluation only, e.g. mnist-super's digit): name: count, most first, and a bar of "
    "their shares",
    "strategy": "beyond the paper, on an index of granularity strategy: the strategy the input "
    "belongs to, a group of reference images of its class the model treats alike (found "
    "without labels; the nearest centre); flagged: the audit marks it as one to check",
    "granularity": "class: the paper's RI (the polytope covers the most images of the class); "
    "strategy: a polytope per strategy of a class, found without labels (beyond the paper)",
}

SUB_LABEL_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""The colours of sub-labels in a composition bar (matplotlib's ``tab10``), by sub-label."""


def png_uri(image: np.ndarray, max_side: int = THUMBNAIL_SIDE) -> str:
    """An image as a ``data:image/png;base64,`` URI.

    Args:
        image: H x W (grey) or H x W x 3 array in [0, 1].
        max_side: larger images are shrunk (box filter) so that their longer side is this.

    Returns:
        The URI, ASCII.
    """
    array = np.clip(np.rint(image * 255), 0, 255).astype(np.uint8)
    picture = Image.fromarray(array)
    scale = max_side / max(picture.size)
    if scale < 1:
        size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
        picture = picture.resize(size, Image.BOX)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def displayable(images: Tensor | None) -> tuple[Tensor | None, bool]:
    """Images as pixels to draw: one whose values all lie in [0, 1] as it is, any other (a
    normalised model input) min-max scaled over all its values.

    Args:
        images: N x C x H x W, any device and floating dtype, or None.

    Returns:
        N x C x H x W float32 in [0, 1] on the CPU (None for None), and whether any image was
        scaled.
    """
    if images is None:
        return None, False
    flat = images.detach().cpu().float().flatten(1)
    low, high = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    inside = (low >= 0) & (high <= 1)
    scaled = (flat - low) / (high - low).clamp(min=1e-12)
    out = torch.where(inside, flat, scaled).view(images.shape)
    return out, not bool(inside.all())


class Mispredicted(str):
    """A caption line drawn in red: a true label that is not the predicted class."""


def class_lines(predicted: int, label: int | None, names: Sequence[str] | None) -> list[str]:
    """Caption lines of an image's classes: the predicted one, then the true label when it is
    known, as a `Mispredicted` line when the two differ."""

    def name(c: int) -> str:
        return f"{c} ({names[c]})" if names else str(c)

    lines = [f"predicted {name(predicted)}"]
    if label is not None:
        lines.append(
            f"label {name(label)}"
            if label == predicted
            else Mispredicted(f"label {name(label)}: mispredicted")
        )
    return lines


def sub_label_colour(sub_label: int) -> str:
    """The colour of a sub-label in every composition bar (`SUB_LABEL_COLOURS`, cycled)."""
    return SUB_LABEL_COLOURS[sub_label % len(SUB_LABEL_COLOURS)]


def composition_text(counts: Sequence[dict[str, Any]]) -> str:
    """A composition ([`composition`][repinterp.core.groups.composition]) in words:
    ``4: 31, 9: 2``."""
    return ", ".join(f"{c['name']}: {c['count']}" for c in counts)


def composition_html(counts: Sequence[dict[str, Any]], width: int | None = SHOWN_SIDE) -> str:
    """A composition ([`composition`][repinterp.core.groups.composition]) as HTML: the line
    ``sub-labels 4: 31, 9: 2`` and a bar of ``width`` CSS pixels (None: its box's width) cut
    in proportion to the counts, each part in its sub-label's colour (`sub_label_colour`)
    and titled with it."""
    total = sum(int(c["count"]) for c in counts) or 1
    parts = "".join(
        f'<span title="{html.escape(str(c["name"]))}: {int(c["count"])}" '
        f'style="display:inline-block;height:100%;width:{100 * int(c["count"]) / total:.2f}%;'
        f'background:{sub_label_colour(int(c["sub_label"]))}"></span>'
        for c in counts
    )
    text = html.escape(composition_text(counts))
    size = "100%" if width is None else f"{width}px"
    return (
        f'<div class="ri-sub-labels" style="font-size:11px;line-height:1.3">sub-labels {text}'
        f'<div role="img" aria-label="sub-labels {text}" style="display:flex;width:{size};'
        f'height:8px;margin:2px 0;border:1px solid #bbb">{parts}</div></div>'
    )


def shown_height(height: int, width: int) -> int:
    """The height, in CSS pixels, at which an image of ``height`` x ``width`` is shown."""
    return round(SHOWN_SIDE * height / width)


def _picture(image: np.ndarray, alt: str) -> str:
    height = shown_height(image.shape[0], image.shape[1])
    return (
        f'<img src="{png_uri(image)}" alt="{html.escape(alt)}" width="{SHOWN_SIDE}" '
        f'height="{height}" style="image-rendering:pixelated;display:block;margin:2px 0;'
        f'width:{SHOWN_SIDE}px;height:{height}px">'
    )


def _blank(height: int, what: str) -> str:
    """A dashed box of a picture's size where a tile has no picture for its row."""
    return (
        f'<div class="ri-blank" style="width:{SHOWN_SIDE}px;height:{height}px;margin:2px 0;'
        "border:1px dashed #bbb;box-sizing:border-box;font-size:10px;color:#888;display:flex;"
        f'align-items:center;justify-content:center;text-align:center">{html.escape(what)}</div>'
    )


def _caption_line(line: str) -> str:
    text = html.escape(line)
    if isinstance(line, Mispredicted):
        return f'<span class="ri-mispredicted" style="color:#c00000;font-weight:bold">{text}</span>'
    return text


def figure(
    caption: Sequence[str],
    pictures: Sequence[tuple[np.ndarray, str] | str],
    height: int = SHOWN_SIDE,
    footer: str = "",
) -> str:
    """One tile: pictures stacked, then a caption.

    Args:
        caption: lines of the caption (plain text, escaped here; a `Mispredicted` line in red).
        pictures: ``(H x W or H x W x 3 array in [0, 1], alt text)`` each, top to bottom; a
            string instead is a row this tile has no picture for, drawn as a dashed box of
            ``height`` CSS pixels saying so.
        height: the height of those boxes.
        footer: HTML under the caption (e.g. `composition_html`).
    """
    images = "".join(_blank(height, p) if isinstance(p, str) else _picture(*p) for p in pictures)
    lines = "<br>".join(_caption_line(line) for line in caption)
    return (
        f'<figure class="ri-tile" style="margin:0 4px 6px 0;width:{SHOWN_SIDE + 8}px">'
        f'{images}<figcaption style="font-size:11px;line-height:1.3">{lines}</figcaption>'
        f"{footer}</figure>"
    )


def row_header(rows: Sequence[str], height: int) -> str:
    """The tiles' first column: the name of each row of pictures, at the rows' height.

    Args:
        rows: one name per row, top to bottom (plain text).
        height: a picture's height in CSS pixels.
    """
    cells = "".join(
        f'<div style="height:{height}px;margin:2px 0;display:flex;align-items:center;'
        f'font-weight:bold">{html.escape(name)}</div>'
        for name in rows
    )
    return (
        '<div class="ri-rows" style="margin:0 6px 6px 0;width:72px;font-size:11px;'
        f'line-height:1.2">{cells}</div>'
    )


def tile(
    caption: Sequence[str],
    pixels: Tensor | None,
    heat: Tensor | None,
    cmap: str,
    alpha: float = 0.5,
    rows: tuple[bool, bool] | None = None,
    height: int = SHOWN_SIDE,
    footer: str = "",
) -> str:
    """One image's tile: the image, its heat map overlaid on it (or alone, without the image),
    and a caption.

    Args:
        caption: lines of the caption (plain text; see `figure`).
        pixels: C x H x W in [0, 1] (`displayable`), or None; drawn when C is 1 or 3.
        heat: H x W in [0, 1], or None; min-max scaled to draw it (see `SCALE`).
        cmap: the heat maps' colormap.
        alpha: the heat map's opacity over the image.
        rows: whether the view has a row of images and a row of heat maps; this tile's
            picture missing from a row is a dashed box, so that the rows line up. None: the
            pictures it has, stacked.
        height: the dashed boxes' height in CSS pixels (`shown_height` of the images).
        footer: HTML under the caption (see `figure`).
    """
    if pixels is not None and pixels.shape[0] not in (1, 3):
        pixels = None
    pictures: list[tuple[np.ndarray, str] | str] = []
    if pixels is not None:
        image = pixels[0] if pixels.shape[0] == 1 else pixels.permute(1, 2, 0)
        pictures.append((np.asarray(image), "image"))
    elif rows is not None and rows[0]:
        pictures.append("image not held")
    if heat is not None:
        heat = normalize_maps(heat.detach().cpu().float())  # drawn as the viewer draws it
        drawn = overlay(pixels, heat, alpha, cmap) if pixels is not None else colorize(heat, cmap)
        pictures.append((np.asarray(drawn), "heat map"))
    elif rows is not None and rows[1]:
        pictures.append("no heat map")
    return figure(caption, pictures, height, footer)


def colour_bar(cmap: str) -> str:
    """The heat maps' colour bar: ``cmap`` from 0 to 1, both ends labelled, and its scale.

    The bar is a CSS gradient whose size is set in its own inline style (``!important``), so
    that no page's stylesheet (a notebook theme's ``img {height: auto}``, say) can squash it.
    """
    size = f"width:{COLOUR_BAR_WIDTH}px !important;height:{COLOUR_BAR_HEIGHT}px !important"
    return (
        '<div class="ri-colour-bar" style="font-size:11px;margin:4px 0">heat map 0 (coldest) '
        f'<span role="img" aria-label="colour bar: {html.escape(cmap)}" '
        f'style="display:inline-block !important;{size};max-width:60%;vertical-align:middle;'
        f'background:{colorbar_css(cmap, stops=32)}"></span> '
        f"1 (hottest); {html.escape(SCALE)}, colormap {html.escape(cmap)}</div>"
    )


def _numbers(numbers: Sequence[tuple[str, str]]) -> str:
    return " · ".join(
        f'<span class="ri-number"><b>{html.escape(name)}</b> {html.escape(value)}</span>'
        for name, value in numbers
    )


def page(
    heading: str,
    numbers: Sequence[tuple[str, str]],
    tiles: Sequence[str],
    legend: Sequence[str],
    notes: Sequence[str] = (),
    bar: str = "",
    header: str = "",
) -> str:
    """The whole view: a heading, the named numbers, the tiles in a wrapping row (after the
    rows' names, if given), the colour bar, the legend and notes.

    Args:
        heading: the title (plain text).
        numbers: ``(name, value)`` pairs, each shown as "name value".
        tiles: `figure` outputs.
        legend: what the numbers mean, one line each (plain text).
        notes: what is missing and how to get it, one line each (plain text).
        bar: the `colour_bar`, if there are heat maps.
        header: the `row_header`, if the tiles have rows to name.
    """
    paragraphs = "".join(
        f'<p class="ri-note" style="margin:2px 0"><i>{html.escape(line)}</i></p>' for line in notes
    )
    items = "".join(f"<li>{html.escape(line)}</li>" for line in legend)
    return (
        '<div class="repinterp" style="font-family:sans-serif;font-size:12px">'
        f'<div style="font-weight:bold">{html.escape(heading)}</div>'
        f'<div style="margin:2px 0 6px">{_numbers(numbers)}</div>{paragraphs}'
        '<div style="display:flex;flex-wrap:wrap;align-items:flex-start">'
        f"{header}{''.join(tiles)}</div>"
        f'{bar}<ul style="font-size:11px;margin:2px 0;padding-left:16px">{items}</ul></div>'
    )
