"""What the greedy's paths and the exact cover share: sides, results, shape checks, and the
fields whose sums count separations (see [`cover`][repinterp.core.cover] for the terms)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


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


def check_shapes(shape: torch.Size, input_sides: Tensor, other_class: Tensor) -> None:
    n_ref, n_q = shape
    if input_sides.ndim != 2 or input_sides.shape[1] != n_q:
        raise ValueError(f"input_sides must be B x {n_q}, got {tuple(input_sides.shape)}")
    if other_class.shape != (input_sides.shape[0], n_ref):
        raise ValueError(
            f"other_class must be {input_sides.shape[0]} x {n_ref}, got {tuple(other_class.shape)}"
        )


ROWS_PER_BUILD = 1 << 16
FLOAT32_EXACT = 1 << 24  # float32 sums of 0/1 values are exact below this


def round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def side_fields(rows: Tensor) -> Tensor:
    """n x (|Q| + 1) uint8 fields of n images: side is +1 on each boundary, and 1."""
    ones = torch.ones(rows.shape[0], 1, dtype=torch.bool, device=rows.device)
    return torch.cat([rows > 0, ones], 1).to(torch.uint8)


def separation_terms(x_sides: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The rule that turns counts of sides into separation counts, elementwise: for sides
    ``x_sides`` (any shape), float64 ``scale``, ``offset`` and ``zero`` such that, over a set of
    images, ``[side +1] * scale + (images) * offset + [side 0] * zero`` counts per boundary the
    images it separates from the input (x side +1: 1 - [+1]; -1: [+1] + [0]; 0: 1 - [0])."""
    x = x_sides.double()
    return -x, (x >= 0).double(), (x < 0).double() - (x == 0).double()


def separation_weights(x_sides: Tensor) -> tuple[Tensor, Tensor]:
    """`separation_terms` of B inputs (B x |Q| sides) as matrices.

    Returns:
        ``(m, z)``: B x (|Q| + 1) x |Q| and B x |Q| float64 such that, over a set of images,
        ``field sums @ m[b] + (sides 0 per boundary) * z[b]`` counts per boundary the images it
        separates from input b.
    """
    n_in, n_q = x_sides.shape
    scale, offset, zero = separation_terms(x_sides)
    m = scale.new_zeros(n_in, n_q + 1, n_q)
    h = torch.arange(n_q, device=scale.device)
    m[:, h, h] = scale
    m[:, n_q] = offset
    return m, zero
