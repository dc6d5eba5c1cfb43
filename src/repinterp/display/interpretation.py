"""The case-study strip of one ``Interpretation``, what a notebook shows for ``e``."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..core.interpretation import METRIC_MEANINGS, Interpretation
from ..core.views import HtmlView
from .colours import DEFAULT_COLORMAP
from .html import (
    MEANINGS,
    class_lines,
    colour_bar,
    displayable,
    page,
    row_header,
    shown_height,
    tile,
)

__all__ = ["show_interpretation"]


def show_interpretation(
    e: Interpretation,
    reference: Any = None,
    image: Tensor | None = None,
    k: int = 8,
    metric: str = "semantic",
    cmap: str = DEFAULT_COLORMAP,
    label: int | None = None,
) -> HtmlView:
    """The case-study strip as self-contained HTML, what a notebook shows for ``e``: the
    input and its ``k`` most similar covered reference images with their distances, scores,
    predicted classes and true labels (a misprediction in red), each under ``P(x)``'s heat
    map (the input's channel weights reused), the rows named, a colour bar and every number
    named. Images are inline PNGs; what cannot be drawn is said in one line, with how to
    draw it.

    Args:
        e: the interpretation.
        reference: the reference set the interpreter was fitted on (anything ``fit``
            takes), for the similar images' pixels; None: the set it holds, if any (and
            if it was not fitted again since).
        image: the input (C x H x W, as the model takes it); None: `image`.
        k: how many similar images (>= 0).
        metric: their distance (see `similar`).
        cmap: the heat maps' colormap (see [`colorize`][repinterp.display.colours.colorize]).
        label: the input's true class, if known, shown beside its prediction.

    Returns:
        An `HtmlView`; ``.html`` is the string.

    Raises:
        ValueError: a negative ``k``, an unknown metric or colormap, or a ``reference`` of
            another size than the index's.
    """
    rows = e.similar(k, metric)
    by_row = dict(zip(e.covered.tolist(), e.distances(metric).tolist(), strict=True))
    image = e.image if image is None else image
    known = reference is not None or not e.stale
    images = None
    if rows.numel() and known:
        images = e.interpreter.reference_images(rows, reference)
    on_input, on_rows = e.display_heatmaps(image, rows, images)
    input_pixels, input_scaled = displayable(None if image is None else image[None])
    row_pixels, rows_scaled = displayable(images)
    index = e.index
    names = e.class_names
    predictions = index.predictions[rows].tolist()
    scores = index.logits[rows].float().softmax(1).max(1).values.tolist()
    labels = [None] * len(rows) if index.labels is None else index.labels[rows].tolist()
    has_images = input_pixels is not None or row_pixels is not None
    has_heat = on_input is not None or on_rows is not None
    height = shown_height(*index.input_shape[-2:])
    shown = (has_images, has_heat)

    def name(c: int) -> str:
        return f"{c} ({names[c]})" if names else str(c)

    tiles = [
        tile(
            ["input", *class_lines(e.predicted_class, label, names)],
            None if input_pixels is None else input_pixels[0],
            on_input,
            cmap,
            rows=shown,
            height=height,
        )
    ]
    ranked = zip(rows.tolist(), predictions, scores, labels, strict=True)
    for rank, (row, c, score, truth) in enumerate(ranked):
        caption = [
            f"#{rank + 1}: reference {row}",
            f"{metric} distance {by_row[row]:.4g}",
            f"score {score:.3f}",
            *class_lines(c, truth, names),
        ]
        pixels = None if row_pixels is None else row_pixels[rank]
        heat = None if on_rows is None else on_rows[rank]
        tiles.append(tile(caption, pixels, heat, cmap, rows=shown, height=height))
    exact = "" if e.optimal is None else f" (optimal {e.optimal}, gap {e.gap:.3g})"
    numbers = [("predicted class", name(e.predicted_class))]
    if label is not None:
        numbers.append(("label", name(label)))
    numbers += [
        ("score", f"{e.score:.3f}"),
        ("delta", str(e.delta)),
        ("representativeness", f"{e.representativeness} of {e.n_reference}"),
        ("|P|", str(e.boundary_ids.numel())),
        ("solver", e.solver + exact),
    ]
    legend = [f"{n}: {MEANINGS[n]}." for n in ("score", "delta", "representativeness", "|P|")]
    if label is not None or index.labels is not None:
        legend.append(f"label: {MEANINGS['label']}.")
    legend.append(
        f"{metric} distance: {METRIC_MEANINGS[metric]} (smaller: more similar; the images "
        "are ranked by it)."
    )
    notes = [e.message] if e.message else []
    heat = e.has_heatmap and e.features is None  # heat maps need the images too
    if image is None:
        notes.append(
            "The input is not known here: e.show(image=x) draws it"
            + (" and its heat map." if heat else ".")
        )
    if rows.numel() and images is None:
        why = (
            "The interpreter does not hold its reference set (it was loaded, not fitted)"
            if known
            else "The interpreter was fitted again since this interpretation was made"
        )
        notes.append(
            f"{why}: e.show(reference) with the set it was fitted on draws the images"
            + (" and their heat maps." if heat else ".")
        )
    if input_scaled or rows_scaled:
        notes.append("Images outside [0, 1] (normalised inputs) are min-max scaled to draw.")
    bar = colour_bar(cmap) if has_heat else ""
    names_of_rows = ["image"] * has_images
    names_of_rows += ["P(x)'s heat map" + (" over it" if has_images else "")] * has_heat
    heading = f"Representative interpretation P(x): the input and its {rows.numel()} most "
    heading += "similar covered reference images"
    header = row_header(names_of_rows, height) if names_of_rows else ""
    return HtmlView(page(heading, numbers, tiles, legend, notes, bar, header))
