"""Algorithm 1 of the paper, written as the paper states it, for one input and with exact
fractions: the readable definition that [`greedy_cover`][repinterp.core.cover.greedy_cover]'s
fast paths must equal (the tests hold them to it, and docs/method.md quotes it)."""

from __future__ import annotations

from fractions import Fraction

from torch import Tensor

__all__ = ["algorithm_1"]


def algorithm_1(
    reference_sides: Tensor, input_sides: Tensor, other: Tensor
) -> tuple[list[int], list[int], int]:
    """The greedy cover of one input ``x``.

    ``delta`` is the number of images of ``D(x)`` on ``x``'s side of every boundary of ``Q``.
    From ``P = {}``, while ``P`` covers more than ``delta`` images of ``D(x)``, add the boundary
    ``h`` that minimises (covered images it separates from ``x``) / (covered images of ``D(x)``
    it separates), among those that separate at least one image of ``D(x)``; ties go to the
    larger denominator, then to the lower index.

    Args:
        reference_sides: |R| x |Q| sides (-1, 0, 1) of the reference images.
        input_sides: |Q| sides of ``x``.
        other: |R| bool, ``D(x)``.

    Returns:
        The chosen boundaries in the order chosen, the covered reference images (ascending),
        and ``delta``.
    """
    n_reference, n_q = reference_sides.shape
    rows = reference_sides.tolist()
    x = input_sides.tolist()
    separated = [[rows[r][h] != x[h] for h in range(n_q)] for r in range(n_reference)]
    in_d = [bool(v) for v in other.tolist()]
    delta = sum(1 for r in range(n_reference) if in_d[r] and not any(separated[r]))
    covered = set(range(n_reference))
    chosen: list[int] = []
    while sum(1 for r in covered if in_d[r]) > delta:
        best = None
        for h in range(n_q):
            if h in chosen:
                continue
            removed = sum(1 for r in covered if separated[r][h])
            removed_d = sum(1 for r in covered if separated[r][h] and in_d[r])
            if removed_d == 0:
                continue
            key = (Fraction(removed, removed_d), -removed_d, h)
            if best is None or key < best:
                best = key
        if best is None:  # cannot happen: an image of D(x) left over is separated by some h
            raise AssertionError("no boundary separates the images of D(x) left over")
        chosen.append(best[2])
        covered = {r for r in covered if not separated[r][best[2]]}
    return chosen, sorted(covered), delta
