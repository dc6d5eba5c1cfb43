"""A ``RegionSet`` as one card per distinct polytope, what a notebook shows for regions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..core.groups import composition
from ..core.regions import RegionSet, distinct_polytopes
from ..core.views import HtmlView
from .colours import DEFAULT_COLORMAP
from .html import (
    MEANINGS,
    class_lines,
    colour_bar,
    composition_html,
    displayable,
    page,
    row_header,
    shown_height,
    tile,
)

__all__ = ["show_regions"]


def show_regions(
    regions: RegionSet,
    reference: Any = None,
    cmap: str = DEFAULT_COLORMAP,
    sub_labels: Tensor | Sequence[int] | None = None,
    sub_label_names: Sequence[str] | None = None,
) -> HtmlView:
    """The regions as self-contained HTML, what a notebook shows for a region set: one card
    per distinct polytope (`distinct_polytopes`), the most representative first, with its
    class, how many regions share it, how many reference images it interprets and covers,
    what those images are made of by sub-label when sub-labels are known
    ([`composition`][repinterp.core.groups.composition]), and its input under its heat map
    (a colour bar, the index's granularity and every number named).

    Args:
        regions: the region set.
        reference: the reference set the interpreter was fitted on (anything ``fit``
            takes), for the inputs' pixels; None: the set it holds, if any.
        cmap: the heat maps' colormap (see [`colorize`][repinterp.display.colours.colorize]).
        sub_labels: (|R|,) integer sub-label (sub-concept) of every reference image;
            None: the reference set's ``concepts`` (an `ImageSet`'s, such as
            ``mnist-super``'s digits), else none is shown.
        sub_label_names: one name per sub-label; None: the reference set's
            ``concept_names``, else the numbers.

    Returns:
        An `HtmlView`; ``.html`` is the string.

    Raises:
        ValueError: an unknown colormap, a ``reference`` of another size than the
            index's, or ``sub_labels`` that are not one integer per reference image.
    """
    polytopes = distinct_polytopes(regions)
    known = _sub_labels(regions, reference, sub_labels, sub_label_names)
    inputs = torch.tensor([p.inputs[0] for p in polytopes], dtype=torch.long)
    images = regions.interpreter.reference_images(inputs, reference)
    pixels, scaled = displayable(images)
    index = regions.interpreter.index
    names = regions.interpreter.class_names
    labels = [None] * len(inputs) if index.labels is None else index.labels[inputs].tolist()
    maps = []
    for n, p in enumerate(polytopes):
        image = None if images is None else images[n : n + 1]
        heat = p.explanation.display_heatmaps(None, inputs[n : n + 1], image)[1]
        maps.append(None if heat is None else heat[0])
    drawn = any(heat is not None for heat in maps)
    shown = (pixels is not None, drawn)
    height = shown_height(*index.input_shape[-2:])
    tiles = []
    cards = zip(polytopes, inputs.tolist(), labels, maps, strict=True)
    for n, (p, row, label, heat) in enumerate(cards):
        e = p.explanation
        caption = [
            *class_lines(e.predicted_class, label, names),
            f"regions {len(p.regions)}: {', '.join(map(str, p.regions))}",
            f"interprets {p.interpreted}",
            f"representativeness {e.representativeness}",
            f"|P| {e.boundary_ids.numel()}, delta {e.delta}",
            f"input: reference {row}",
        ]
        image = None if pixels is None else pixels[n]
        footer = "" if known is None else composition_html(composition(p.members, *known))
        tiles.append(tile(caption, image, heat, cmap, rows=shown, height=height, footer=footer))
    n_reference = len(regions.interpreter.index)
    numbers = [
        ("regions", str(len(regions))),
        ("distinct polytopes", str(len(polytopes))),
        ("predicted classes", str(len(set(regions.classes.tolist())))),
        ("reference images", str(n_reference)),
        ("granularity", regions.interpreter.granularity_text.removeprefix("granularity ")),
    ]
    legend = [f"{n}: {MEANINGS[n]}." for n in ("regions", "interprets")]
    if known is not None:
        legend.append(f"sub-labels: {MEANINGS['sub-labels']}.")
    legend += [f"{n}: {MEANINGS[n]}." for n in ("representativeness", "|P|", "delta")]
    legend.append("Each card's heat map is its polytope's, on its input.")
    if index.labels is not None:
        legend.append(f"label: {MEANINGS['label']}.")
    legend.append(f"granularity: {MEANINGS['granularity']}.")
    notes = []
    if images is None:
        notes.append(
            "The interpreter does not hold its reference set (it was loaded, not fitted): "
            "regions.show(reference) with the set it was fitted on draws the inputs."
        )
    if scaled:
        notes.append("Images outside [0, 1] (normalised inputs) are min-max scaled to draw.")
    heading = f"Regions: {len(polytopes)} distinct polytopes of {len(regions)} k-means regions"
    rows = ["input"] * shown[0] + ["its polytope's heat map" + " over it" * shown[0]] * drawn
    bar = colour_bar(cmap) if drawn else ""
    header = row_header(rows, height) if rows else ""
    return HtmlView(page(heading, numbers, tiles, legend, notes, bar, header))


def _sub_labels(
    regions: RegionSet,
    reference: Any,
    sub_labels: Tensor | Sequence[int] | None,
    names: Sequence[str] | None,
) -> tuple[Tensor, Sequence[str] | None] | None:
    """`show_regions`'s sub-labels and their names: those given, else the reference set's
    (``concepts``, ``concept_names``), else None."""
    source = regions.interpreter.reference if reference is None else reference
    # the interpreter keeps its set wrapped (`ReferenceSet`): the set given is its `source`
    source = getattr(source, "source", source)
    if sub_labels is None:
        sub_labels = getattr(source, "concepts", None)
        if sub_labels is None:
            return None
    if names is None:
        names = getattr(source, "concept_names", None)
    labels = torch.as_tensor(sub_labels)
    n = len(regions.interpreter.index)
    if labels.shape != (n,) or labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(
            f"sub_labels must be {n} integers, one per reference image, got "
            f"{labels.dtype} {tuple(labels.shape)}"
        )
    return labels, names
