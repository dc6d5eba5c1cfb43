"""Algorithm 1 of the paper: a greedy solution of the submodular-cost submodular-cover problem.

Everything here works on *sides*: ``sign(<W_h, t> + b_h)`` in {-1, 0, 1} for every reference
image and boundary. A reference image is covered by ``P`` when it has the input's side on every
boundary of ``P``; it is *separated* by ``h`` when its side on ``h`` differs from the input's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CoverResult", "greedy_cover", "sides"]


def sides(projections: Tensor) -> Tensor:
    """``sign`` of signed projections, as int8 (same shape)."""
    return torch.sign(projections).to(torch.int8)


@dataclass
class CoverResult:
    """Greedy covers of B inputs against |R| reference images and |Q| boundaries.

    Attributes:
        order: B x |Q| long, the chosen boundaries in the order they were added, padded with -1.
        covered: B x |R| bool, reference images covered by each ``P(x)``.
        delta: B long, ``tau(x)``: images of ``D(x)`` covered by all of ``Q``.
        conflicts: B long, ``|P(x) ∩ D(x)|`` at the end (``<= delta``).
    """

    order: Tensor
    covered: Tensor
    delta: Tensor
    conflicts: Tensor

    def boundaries(self, i: int) -> Tensor:
        """Indices into ``Q`` of ``P(x_i)``, in the order they were chosen."""
        row = self.order[i]
        return row[row >= 0]


def greedy_cover(
    reference_sides: Tensor,
    input_sides: Tensor,
    other_class: Tensor,
    max_elements: int = 1 << 26,
) -> CoverResult:
    """Algorithm 1 for B inputs at once.

    Starting from ``P = {}``, while ``|P ∩ D| > delta`` add the boundary ``h`` that minimises
    (covered images it removes) / (covered images of ``D`` it removes) among boundaries that
    remove at least one image of ``D``; equal ratios go to the larger denominator (so among zero
    numerators the largest denominator wins), then to the lower index. Ratios are compared as
    float64 quotients of integers below 2**26, which order exactly like the fractions.

    The counts are kept incrementally: each removed image is subtracted once, so one input costs
    O(|R| |Q|) plus O(|Q|) small steps.

    Args:
        reference_sides: |R| x |Q| int8 sides of the reference images (see :func:`sides`).
        input_sides: B x |Q| int8 sides of the inputs.
        other_class: B x |R| bool, ``D(x)``: reference images predicted another class.
        max_elements: inputs are processed in chunks of at most this many B x |R| x |Q| cells.

    Returns:
        A :class:`CoverResult`.
    """
    n_ref, n_q = reference_sides.shape
    if input_sides.ndim != 2 or input_sides.shape[1] != n_q:
        raise ValueError(f"input_sides must be B x {n_q}, got {tuple(input_sides.shape)}")
    if other_class.shape != (input_sides.shape[0], n_ref):
        raise ValueError(
            f"other_class must be {input_sides.shape[0]} x {n_ref}, got {tuple(other_class.shape)}"
        )
    chunk = max(1, max_elements // max(1, n_ref * n_q))
    parts = [
        _greedy_chunk(reference_sides, input_sides[i : i + chunk], other_class[i : i + chunk])
        for i in range(0, input_sides.shape[0], chunk)
    ]
    if not parts:
        device = reference_sides.device
        return CoverResult(
            order=torch.empty(0, n_q, dtype=torch.long, device=device),
            covered=torch.empty(0, n_ref, dtype=torch.bool, device=device),
            delta=torch.empty(0, dtype=torch.long, device=device),
            conflicts=torch.empty(0, dtype=torch.long, device=device),
        )
    return CoverResult(*(torch.cat(field) for field in zip(*parts, strict=True)))


def _greedy_chunk(
    reference_sides: Tensor, input_sides: Tensor, other_class: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n_in, n_q = input_sides.shape
    device = reference_sides.device
    sep = reference_sides.unsqueeze(0) != input_sides.unsqueeze(1)  # B x R x Q
    other = other_class.to(torch.bool)
    covered = torch.ones(other.shape, dtype=torch.bool, device=device)
    removes = sep.sum(1)  # B x Q: covered images each h would remove
    removes_other = (sep & other.unsqueeze(2)).sum(1)  # B x Q: ... of which in D(x)
    delta = (other & ~sep.any(2)).sum(1)
    conflicts = other.sum(1)
    chosen = torch.zeros(n_in, n_q, dtype=torch.bool, device=device)
    order = torch.full((n_in, n_q), -1, dtype=torch.long, device=device)

    for step in range(n_q + 1):
        rows = (conflicts > delta).nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        if step == n_q:
            raise RuntimeError("greedy cover did not terminate within |Q| steps")
        num, den = removes[rows], removes_other[rows]
        candidate = (den > 0) & ~chosen[rows]
        if not bool(candidate.any(1).all()):
            raise RuntimeError("no boundary removes an image of D(x) although |P ∩ D| > delta")
        ratio = torch.where(candidate, num.double() / den.clamp(min=1), torch.inf)
        tie = candidate & (ratio == ratio.min(1, keepdim=True).values)
        best_den = torch.where(tie, den, -1).max(1, keepdim=True).values
        tie &= den == best_den
        h = tie.to(torch.uint8).argmax(1)  # argmax returns the first maximum: lowest index
        chosen[rows, h] = True
        order[rows, step] = h

        removed = covered[rows] & sep[rows, :, h]  # rows x R
        covered[rows] &= ~removed
        hit_row, hit_ref = removed.nonzero(as_tuple=True)
        owner = rows[hit_row]
        lost = sep[owner, hit_ref].to(removes.dtype)  # hits x Q
        removes.index_add_(0, owner, -lost)
        removes_other.index_add_(0, owner, -lost * other[owner, hit_ref].unsqueeze(1))
        conflicts[rows] -= (removed & other[rows]).sum(1)
    return order, covered, delta, conflicts
