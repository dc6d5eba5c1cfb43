"""Eq. 3 for N inputs: each input's representative interpretation ``P(x)``.

``D(x)`` is the reference images predicted another class; the cover of ``x`` is solved by
Algorithm 1 ([`greedy_cover`][repinterp.core.cover.greedy_cover]) or exactly
([`exact_cover`][repinterp.core.cover.exact_cover]), through the index's granularity
([`covers`][repinterp.core.granularity.FittedGranularity.covers]: the paper's covers on
``Q``, one beyond it may change ``D(x)`` and the hyperplanes); each result is wrapped as an
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
from .granularity import Solve
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


def _solver(index: ReferenceIndex, solver: str, time_limit: float) -> Solve:
    """Algorithm 1 (and with ``"exact"`` the MILP made canonical) for N inputs, on all of ``Q``
    or on Eq. 2's boundaries alone: what a granularity's `covers` hook solves its cover problems
    with (`Solve`)."""
    q = len(index.boundaries) - index.n_extra

    def solve(all_of_q: bool, input_sides: Tensor, other: Tensor) -> CoverResult:
        cover = index.cover_index if all_of_q else index.eq2_cover_index
        if not all_of_q:
            input_sides = input_sides[:, :q]
        reference_sides = index.sides if all_of_q else index.sides[:, :q]
        result = greedy_cover(cover, input_sides, other)
        if solver == "exact":
            result = exact_cover(cover, input_sides, other, time_limit, greedy=result)
            result = fewest_boundaries(reference_sides, input_sides, other, result, time_limit)
        return result

    return solve


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
        columns: the inputs' columns of the index's granularity (N rows each, see
            [`FittedGranularity.columns`][repinterp.core.granularity.FittedGranularity.columns]);
            None or empty for the paper's.

    Returns:
        N interpretations (none for N = 0).
    """
    index = explainer.index
    if logits.shape[0] == 0:
        return []
    predicted = logits.argmax(1)
    other = index.predictions.unsqueeze(0) != predicted.unsqueeze(1)
    input_sides = sides(proj)
    solve = _solver(index, solver, time_limit)
    where = index.granularity.covers(index.columns, input_sides, other, columns or {}, solve)
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
                boundary_ids=chosen,
                covered=result.covered[j].nonzero().flatten(),
                delta=deltas[j],
                conflicts=conflicts[j],
                projections=proj[i],
                channel_weights=input_side_weights(
                    index.channel_means[chosen], input_sides[i, chosen]
                ),
                n_reference=len(index),
                interpreter=explainer,
                solved_on=index,
                solver=solver,
                features=None if features is None else features[i],
                strategy=None if strategies is None or strategies[i] < 0 else int(strategies[i]),
                **(_exact_fields(result, j) if isinstance(result, ExactCoverResult) else {}),
            )
        )
    return out
