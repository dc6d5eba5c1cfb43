"""Eq. 3 for N inputs: each input's representative interpretation ``P(x)``.

``D(x)`` is the reference images predicted another class, and those its decision set
([`decision_set`][repinterp.core.decision_set]) excludes besides; the cover of ``x`` is solved
by Algorithm 1 ([`greedy_cover`][repinterp.core.cover.greedy_cover]) or exactly
([`exact_cover`][repinterp.core.cover.exact_cover]), on Eq. 2's boundaries alone unless its
decision set excluded an image of ``x``'s own class; each result is wrapped as an
[`Interpretation`][repinterp.core.interpretation.Interpretation].
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from .cover import (
    CoverResult,
    ExactCoverResult,
    exact_cover,
    fewest_boundaries,
    greedy_cover,
    sides,
)
from .decision_set import cover_columns
from .heatmap import input_side_weights
from .interpretation import Explainer, Interpretation
from .reference_index import ReferenceIndex

__all__ = ["interpret"]


def _exact_fields(result: ExactCoverResult, i: int) -> dict[str, Any]:
    return {
        "optimal": bool(result.optimal[i]),
        "gap": float(result.gap[i]),
        "greedy_representativeness": int(result.greedy_representativeness[i]),
    }


def _solve(
    index: ReferenceIndex,
    all_of_q: bool,
    input_sides: Tensor,
    other: Tensor,
    solver: str,
    time_limit: float,
) -> CoverResult:
    """Algorithm 1 (and with ``"exact"`` the MILP made canonical) for N inputs, on all of ``Q``
    or on Eq. 2's boundaries alone (``input_sides`` has those columns)."""
    cover = index.cover_index if all_of_q else index.eq2_cover_index
    reference_sides = index.sides if all_of_q else index.sides[:, : input_sides.shape[1]]
    result = greedy_cover(cover, input_sides, other)
    if solver == "exact":
        result = exact_cover(cover, input_sides, other, time_limit, greedy=result)
        result = fewest_boundaries(reference_sides, input_sides, other, result, time_limit)
    return result


def _covers(
    index: ReferenceIndex,
    input_sides: Tensor,
    other: Tensor,
    extra: Tensor | None,
    solver: str,
    time_limit: float,
) -> list[tuple[CoverResult, int]]:
    """The covers of N inputs: those whose ``D(x)`` gained images from the decision set
    (``extra``, N x |R|) on all of ``Q``, the others on Eq. 2's boundaries alone, as the paper
    covers them (all of ``Q`` when the decision set adds no hyperplane).

    Returns:
        Per input, in order, the result that holds it and its row there.
    """
    n = input_sides.shape[0]
    if index.n_extra == 0:
        result = _solve(index, True, input_sides, other, solver, time_limit)
        return [(result, i) for i in range(n)]
    if extra is not None:
        other = other | extra.to(other.device)
    full = cover_columns(extra, n)
    q = len(index.boundaries) - index.n_extra
    where: list[tuple[CoverResult, int] | None] = [None] * n
    for group, all_of_q in ((full, True), (~full, False)):
        rows = group.nonzero().flatten()
        if not len(rows):
            continue
        on = rows.to(input_sides.device)
        chosen = input_sides[on] if all_of_q else input_sides[on][:, :q]
        result = _solve(index, all_of_q, chosen, other[on], solver, time_limit)
        for j, i in enumerate(rows.tolist()):
            where[i] = (result, j)
    return where  # type: ignore[return-value]


def interpret(
    explainer: Explainer,
    logits: Tensor,
    proj: Tensor,
    solver: str,
    time_limit: float,
    features: Tensor | None = None,
    columns: dict[str, Tensor] | None = None,
) -> list[Interpretation]:
    """Solve the cover problem (Eq. 3) for N inputs at once and wrap each ``P(x)``.

    Args:
        explainer: the fitted interpreter (its index).
        logits: N x classes, the inputs' logits.
        proj: N x |Q|, their projections on ``Q``.
        solver: ``"greedy"`` (Algorithm 1) or ``"exact"`` (the MILP, within ``time_limit``
            seconds per input).
        features: N x (K h w) flattened feature maps, kept in the interpretations if given.
        columns: the inputs' columns of the index's decision set (N rows each, see
            [`Decisions.columns`][repinterp.core.decision_set.Decisions.columns]); None or
            empty for the paper's.

    Returns:
        N interpretations (none for N = 0).
    """
    index = explainer.fitted_index
    if logits.shape[0] == 0:
        return []
    predicted = logits.argmax(1)
    other = index.predictions.unsqueeze(0) != predicted.unsqueeze(1)
    input_sides = sides(proj)
    extra = None
    if columns:
        extra = index.decisions.excluded(index.columns, index.predictions, columns, predicted)
    where = _covers(index, input_sides, other, extra, solver, time_limit)
    scores = logits.float().softmax(1).gather(1, predicted.unsqueeze(1)).squeeze(1)
    strategies = columns.get("strategy") if columns else None
    results = {id(r): r for r, _ in where}.values()
    counts = {id(r): (r.delta.tolist(), r.conflicts.tolist()) for r in results}
    out = []
    for i, (predicted_class, score) in enumerate(
        zip(predicted.tolist(), scores.tolist(), strict=True)
    ):
        result, j = where[i]
        deltas, conflicts = counts[id(result)]
        chosen = result.boundaries(j)
        out.append(
            Interpretation(
                predicted_class=predicted_class,
                score=score,
                boundaries=chosen,
                covered=result.covered[j].nonzero().flatten(),
                delta=deltas[j],
                conflicts=conflicts[j],
                projections=proj[i],
                channel_weights=input_side_weights(
                    index.channel_means[chosen], input_sides[i, chosen]
                ),
                n_reference=len(index),
                interpreter=explainer,
                index=index,
                solver=solver,
                features=None if features is None else features[i],
                strategy=None if strategies is None or strategies[i] < 0 else int(strategies[i]),
                **(_exact_fields(result, j) if isinstance(result, ExactCoverResult) else {}),
            )
        )
    return out
