"""One ``Strategy`` of the model, what a notebook and ``repinterp audit`` show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.heatmap import normalize_maps
from ..core.views import HtmlView
from ..strategies.audit import FLAG_SCORE, KIN_SCORE
from ..strategies.model import Strategy
from .colours import DEFAULT_COLORMAP, colorize, overlay
from .html import colour_bar, composition_html, displayable, figure, page, shown_height

__all__ = ["FLAG_MEANING", "REASON_MEANINGS", "STRATEGY_MEANING", "show_strategy"]

STRATEGY_MEANING = (
    "A strategy is a group of the reference images the model predicts one class for and "
    "treats alike (found without labels, by clustering their feature maps at the target "
    "layer); a class can have several, its main strategy is its largest."
)
"""What a strategy is, in one paragraph."""

FLAG_MEANING = (
    "The audit pastes each strategy's most relevant pixels (5% and 10% of an image, by "
    "gradient x input) onto images of other classes and removes them from its members, and "
    "compares with pixels from a random place; it also adds its members' fine detail, mean "
    "colour or shared pattern (what they all have at the same place, and their mean "
    "difference moved anywhere) to other images, that moved difference to images of the class "
    "its members look most like, and blurs its members. A strategy is flagged "
    "when one of these moves predictions far more than on the model's other strategies (each "
    "class counted once; the wide paste and the blur: than on its class's other strategies; "
    "score "
    f"{FLAG_SCORE} or more, or {KIN_SCORE} or more when another strategy of its class scores "
    f"{FLAG_SCORE} or more): its "
    "class may rest on a shortcut. It reads the model's "
    "predictions only, never a label; a flag says where to look, not that it is wrong."
)
"""What the flag means, in one paragraph."""

REASON_MEANINGS = {
    "model rank": "1 for the strategy of the whole model to look at first (by score)",
    "rank": "its rank among its class's strategies",
    "score": "how far it stands out: the most by which its portable_cue, fine_detail, "
    "shared_pattern, moved_pattern or nearest_pattern (or half its tint) exceeds that reason's "
    "median over the model (the median of its classes' medians), or its wide_portable_cue (or "
    "half its "
    "blur_sensitive) that of the other strategies of its class (a strategy alone in its class: "
    f"not read); flagged from {FLAG_SCORE}, or from {KIN_SCORE} when another strategy of its "
    f"class scores {FLAG_SCORE} or more",
    "portable_cue": "the share of pastes of its members' most relevant pixels onto images of "
    "other classes that the model then predicts its class, minus the same for pixels from a "
    "random place",
    "necessary_cue": "the share of its members that leave its class once those pixels are "
    "filled with the image's mean, minus the same for a random place",
    "fine_detail": "the share of images of other classes predicted its class once a "
    "member's fine detail (the image minus its blurred self) is added",
    "blur_sensitive": "the share of its members that leave its class once blurred",
    "tint": "the share of images of other classes predicted its class once given a member's "
    "mean colour",
    "wide_portable_cue": "portable_cue with twice the area pasted (a cue larger than the "
    "narrow paste)",
    "shared_pattern": "the share of images of other classes predicted its class once given "
    "what all its members share at the same place (their mean image minus all images' mean, "
    "where they agree)",
    "moved_pattern": "the same with its members' mean difference moved to a random place: a "
    "pattern that carries the class anywhere, such as a texture",
    "look_alike_pattern": "the share of images of its members' runner-up class predicted its "
    "class once given its members' mean difference moved to a random place, minus the same "
    "with only that difference's mean colour (not scored)",
    "nearest_pattern": "the share of images of the class its members look most like (whose mean "
    "image is nearest theirs) predicted its class once given its members' mean difference moved "
    "to a random place, minus the same with only that difference's mean colour: a pattern, such "
    "as a texture, that turns look-alikes into its class, and not by its colour alone",
    "why map": "what sets its members apart from their runner-up class: gradient x input of "
    "their class's logit minus the runner-up's",
    "inside its polytope": "its members that its polytope covers",
    "others inside": "members of its class's other strategies that its polytope covers",
    "error rate": "members whose label is another class (labels are shown, never read by "
    "the audit)",
}
"""What each number of a strategy's view means."""


def _class_name(c: int, names: Sequence[str] | None) -> str:
    return f"{c} ({names[c]})" if names else str(c)


def show_strategy(
    strategy: Strategy,
    reference: Any = None,
    k: int = 8,
    cmap: str = DEFAULT_COLORMAP,
    legend: bool = True,
    sub_labels: Sequence[dict[str, Any]] | None = None,
    member_names: Sequence[str] | None = None,
) -> HtmlView:
    """The strategy as self-contained HTML, what a notebook shows: its numbers and audit
    reasons, its mean heat map and mean why map, and its ``k`` members nearest its centre, each
    drawn unobscured above the strategy's heat map (the input's channel weights reused) and
    its why map (`REASON_MEANINGS`).

    Args:
        strategy: the strategy.
        reference: the reference set the index was fitted on; None: the one held.
        k: how many members (>= 0).
        cmap: the heat maps' colormap.
        legend: say what each number means (a page of several strategies says it once:
            `REASON_MEANINGS`).
        sub_labels: what its members are made of by sub-label, if known
            ([`composition`][repinterp.core.groups.composition]), drawn under its mean map.
        member_names: the names of its first ``k`` members (e.g. their files); None:
            ``reference:i``.

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
    why = strategy.why_heatmap(images) if images is not None and len(rows) else None
    height = shown_height(*strategy.mean_heatmap.shape)
    mean_pictures: list[tuple[np.ndarray, str] | str] = [
        (np.asarray(colorize(normalize_maps(strategy.mean_heatmap), cmap)), "mean heat map")
        if has_map
        else "no heat map",
        (np.asarray(colorize(normalize_maps(strategy.why_map), cmap)), "mean why map"),
    ]
    tiles = [
        figure(
            ["mean heat map (top)", "mean why map (bottom)", f"over {len(strategy.members)}"],
            mean_pictures,
            height,
            footer=composition_html(sub_labels) if sub_labels else "",
        )
    ]
    for j, row in enumerate(rows.tolist()):
        name = member_names[j] if member_names is not None else f"reference:{row}"
        caption = [name, "the strategy's input" if row == strategy.input else ""]
        pictures: list[tuple[np.ndarray, str] | str] = []
        if drawable is not None:
            pixels = drawable[j]
            image = pixels[0] if pixels.shape[0] == 1 else pixels.permute(1, 2, 0)
            pictures.append((np.asarray(image), "image"))
        else:
            pictures.append("image not held")
        for maps, what in ((heat, "heat map"), (why, "why map")):
            if maps is None:
                pictures.append(f"no {what}")
                continue
            drawn = normalize_maps(maps[j].float())
            shown = overlay(drawable[j], drawn, 0.5, cmap) if drawable is not None else None
            pictures.append(
                (np.asarray(shown if shown is not None else colorize(drawn, cmap)), what)
            )
        tiles.append(figure(caption, pictures, height))
    a = strategy.audit
    names = strategy.interpretation.class_names
    numbers = [
        ("class", _class_name(strategy.predicted_class, names)),
        ("members", str(len(strategy.members))),
        ("model rank", str(a.model_rank)),
        ("rank", f"{a.rank}" + (" (main strategy)" if a.main else "")),
        ("score", f"{a.score:.3f}" + (" flagged" if a.flagged else "")),
        ("runner-up class", _class_name(a.runner_up, names)),
        ("margin", f"{a.margin:.3g}"),
        ("inside its polytope", f"{100 * strategy.inside:.0f}%"),
        ("others inside", f"{100 * strategy.others_inside:.0f}%"),
    ]
    if strategy.error_rate is not None:
        numbers.append(("error rate", f"{100 * strategy.error_rate:.1f}%"))
    numbers += [(name, f"{value:.3f}") for name, value in a.reasons.items()]
    lines = [f"{n}: {meaning}." for n, meaning in REASON_MEANINGS.items()] if legend else []
    notes = []
    if images is None:
        notes.append(
            "The interpreter does not hold its reference set: show(reference) draws the members."
        )
    if scaled:
        notes.append("Images outside [0, 1] (normalised inputs) are min-max scaled to draw.")
    class_name = _class_name(strategy.predicted_class, names)
    heading = (
        f"Strategy {strategy.id} of class {class_name}: its mean maps and its {len(rows)} "
        "members nearest its centre (each: the image, its heat map, its why map)"
    )
    return HtmlView(page(heading, numbers, tiles, lines, notes, colour_bar(cmap)))
