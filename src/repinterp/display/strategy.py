"""One ``Strategy`` of the model, what a notebook and ``repinterp audit`` show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.views import HtmlView
from ..strategies.model import Strategy
from .colours import DEFAULT_COLORMAP
from .html import (
    colour_bar,
    composition_html,
    displayable,
    page,
    shown_height,
    tile,
)

__all__ = ["REASON_MEANINGS", "show_strategy"]

REASON_MEANINGS = {
    "rank": "1 for the strategy of its class to look at first; the main (largest) strategy "
    "ranks last",
    "score": "the mean of the audit's reasons below, each in [0, 1]; flagged from 0.3",
    "fixed_position": "how much more its members' heat maps pile up on one place than the main "
    "strategy's (a fixed-position cue)",
    "map_shift": "how far its mean heat map lies from the main strategy's (1: no overlap)",
    "logic_distance": "(1 - cosine) / 2 of its members' mean pooled features and the main "
    "strategy's",
    "look_alike": "how much more its members share one runner-up class than the main "
    "strategy's (another class's look-alikes)",
    "size": "1 - its size / the main strategy's (small groups rank up)",
    "inside its polytope": "its members that its polytope covers",
    "others inside": "members of its class's other strategies that its polytope covers",
    "error rate": "members whose label is another class (labels are shown, never read by "
    "the audit)",
}
"""What each number of a strategy's view means."""


def show_strategy(
    strategy: Strategy,
    reference: Any = None,
    k: int = 8,
    cmap: str = DEFAULT_COLORMAP,
    legend: bool = True,
    sub_labels: Sequence[dict[str, Any]] | None = None,
) -> HtmlView:
    """The strategy as self-contained HTML, what a notebook shows: its numbers and audit
    reasons, its mean heat map, and its ``k`` members nearest its centre, each under the
    strategy's heat map (the input's channel weights reused).

    Args:
        strategy: the strategy.
        reference: the reference set the index was fitted on; None: the one held.
        k: how many members (>= 0).
        cmap: the heat maps' colormap.
        legend: say what each number means (a page of several strategies says it once:
            `REASON_MEANINGS`).
        sub_labels: what its members are made of by sub-label, if known
            ([`composition`][repinterp.core.groups.composition]), drawn under its mean map.

    Raises:
        ValueError: a negative ``k``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    rows = strategy.members[:k]
    images = strategy.explainer.reference_images(rows, reference)
    drawable, scaled = displayable(images)
    has_map = strategy.interpretation.has_heatmap
    heat = strategy.heatmap(images).cpu() if has_map and images is not None else None
    height = shown_height(*strategy.mean_heatmap.shape)
    tiles = [
        tile(
            ["mean heat map", f"over {len(strategy.members)} members"],
            None,
            strategy.mean_heatmap if has_map else None,
            cmap,
            rows=(False, True),
            height=height,
            footer=composition_html(sub_labels) if sub_labels else "",
        )
    ]
    for j, row in enumerate(rows.tolist()):
        caption = [f"reference {row}", "the strategy's input" if row == strategy.input else ""]
        tiles.append(
            tile(
                caption,
                None if drawable is None else drawable[j],
                None if heat is None else heat[j],
                cmap,
                height=height,
            )
        )
    a = strategy.audit
    numbers = [
        ("class", str(strategy.predicted_class)),
        ("members", str(len(strategy.members))),
        ("rank", f"{a.rank}" + (" (main strategy)" if a.main else "")),
        ("score", f"{a.score:.3f}" + (" flagged" if a.flagged else "")),
        ("runner-up class", str(a.runner_up)),
        ("margin", f"{a.margin:.3g}"),
        ("inside its polytope", f"{100 * strategy.inside:.0f}%"),
        ("others inside", f"{100 * strategy.others_inside:.0f}%"),
    ]
    if strategy.error_rate is not None:
        numbers.append(("error rate", f"{100 * strategy.error_rate:.1f}%"))
    numbers += [(name, f"{value:.3f}") for name, value in a.reasons.items()]
    names = strategy.interpretation.class_names
    if names:
        numbers[0] = ("class", f"{strategy.predicted_class} ({names[strategy.predicted_class]})")
    lines = [f"{n}: {meaning}." for n, meaning in REASON_MEANINGS.items()] if legend else []
    notes = []
    if images is None:
        notes.append(
            "The interpreter does not hold its reference set: show(reference) draws the members."
        )
    if scaled:
        notes.append("Images outside [0, 1] (normalised inputs) are min-max scaled to draw.")
    heading = (
        f"Strategy {strategy.id} of class {strategy.predicted_class}: its mean heat map and "
        f"its {len(rows)} members nearest its centre"
    )
    return HtmlView(page(heading, numbers, tiles, lines, notes, colour_bar(cmap)))
