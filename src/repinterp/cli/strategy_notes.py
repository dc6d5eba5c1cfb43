"""What the command line says about the strategies of an index fitted at
``granularity="strategy"``: at ``fit``, the layer they were found at and why, and the
strategies whose polytope holds few of their members; at ``explain``, each input's strategy and
whether the audit flagged it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..interpreter import RepresentativeInterpreter
    from ..strategies.model import Strategy

__all__ = ["FEW_INSIDE", "explain_note", "fit_notes"]

FEW_INSIDE = 0.9
"""``fit`` warns about a strategy whose polytope holds a smaller share of its members."""


def _why(layer: str, arch: str, layer_given: bool) -> str:
    from ..models.zoo import MIN_MAP_SIDE, default_target_layer

    if layer_given:
        return "the layer --layer asked for"
    default = default_target_layer(arch)
    if layer == default:
        return f"{arch}'s default layer (its last convolution's output)"
    return (
        f"the last layer whose maps are at least {MIN_MAP_SIDE} x {MIN_MAP_SIDE} (or half the "
        f"image's side) at this image size, where {arch}'s default {default!r} is coarser"
    )


def fit_notes(
    ri: RepresentativeInterpreter,
    strategies: list[Strategy],
    arch: str,
    layer_given: bool,
    out: Any,
) -> list[str]:
    """The lines ``fit`` prints once the strategies of ``ri`` (a model of ``arch``) are found
    (``strategies``, kept with the index written to ``out``): the layer they were found at and
    why that one, how many, and a warning per strategy whose polytope holds fewer than
    `FEW_INSIDE` of its members."""
    index = ri.index
    shape = " x ".join(str(s) for s in index.feature_shape)
    why = (
        f"{_why(str(ri.target_layer), arch, layer_given)}; the strategies group the images by "
        "these maps, so another layer (--layer) may group them otherwise"
    )
    flagged = sum(s.audit.flagged for s in strategies)
    names = ri.class_names or [str(c) for c in range(index.n_classes)]
    lines = [
        f"{ri.granularity_text}: {len(strategies)} strategies, {flagged} flagged by the audit, "
        f"kept with the index: repinterp audit --index {out} --out DIR shows them",
        f"the strategies were found on the {shape} feature maps at layer {ri.target_layer!r}: "
        f"{why}",
    ]
    for s in strategies:
        if s.inside < FEW_INSIDE:
            lines.append(
                f"warning: strategy {s.id} of class {names[s.predicted_class]!r}: its polytope "
                f"holds {100 * s.inside:.1f}% of its {len(s.members)} members (below "
                f"{100 * FEW_INSIDE:.0f}%): its region and similar images stand for few of them"
            )
    return lines


def explain_note(name: str, summary: dict[str, Any]) -> str | None:
    """The line ``explain`` prints about the strategy of an input (``summary``: its JSON), or
    None on an index of another granularity."""
    strategy = summary.get("strategy")
    if strategy is None:
        return None
    flagged = summary.get("strategy_flagged")
    if flagged is None and summary.get("strategy_audit_kept") == "another version's":
        verdict = (
            "not audited by this version: the audit kept with the index is another version's "
            "(repinterp audit shows this version's; fit again to keep it)"
        )
    elif flagged is None:
        verdict = "not audited: the index keeps no audit (fit it again to keep one)"
    elif flagged:
        verdict = (
            "FLAGGED by the audit: this prediction uses a strategy worth checking (repinterp "
            "audit shows why)"
        )
    else:
        verdict = "not flagged by the audit"
    name_of_class = summary.get("class_name") or summary.get("predicted_class")
    return f"{name}: strategy {strategy} of class {name_of_class}, {verdict}"
