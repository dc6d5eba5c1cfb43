"""``nearest_rows`` returns the exact search's neighbours: those of the float64 sums of squared
differences, ties to the lower row, however the matrix-product preselection rounds."""

from __future__ import annotations

import pytest
import torch

from repinterp.core import nearest
from repinterp.core.nearest import nearest_rows


def brute_force(queries: torch.Tensor, rows: torch.Tensor, k: int):
    diff = queries.double()[:, None, :] - rows.double()[None, :, :]
    d2 = (diff * diff).sum(2)
    value, index = torch.sort(d2, dim=1, stable=True)
    return index[:, :k], value[:, :k].sqrt()


def cases():
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(40, 24, generator=g)
    yield "random", torch.randn(30, 24, generator=g), rows
    # far from the origin, 1e-3 apart: |q|^2 - 2 q.r + |r|^2 cancels almost every digit
    centre = 1e4 * torch.ones(24)
    close = centre + 1e-3 * torch.randn(40, 24, generator=g)
    yield "close", centre + 1e-3 * torch.randn(30, 24, generator=g), close
    # at 2^30 in 2,048 dimensions, one float32 step (128) apart: the float64 product form errs
    # by more than the gaps between the distances
    far = 2.0**30 + 128 * torch.randint(-1, 2, (70, 2048), generator=g).float()
    yield "cancelling", far[:30], far[30:]
    # duplicated rows and queries that are rows: ties, and distance 0
    dup = torch.cat([rows[:10], rows[:10], rows[10:20]])
    yield "ties", torch.cat([dup[:5], torch.randn(5, 24, generator=g)]), dup
    # points on a sphere around each query: all at the same distance in exact arithmetic
    sphere = torch.eye(24).repeat(2, 1) * torch.tensor([1.0, -1.0]).repeat_interleave(24)[:, None]
    yield "equidistant", torch.zeros(3, 24), sphere + 0.0


@pytest.mark.parametrize("name,queries,rows", list(cases()))
@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("block", [1 << 22, 48])  # 48 elements: rows 2 by 2, pairs 2 by 2
def test_nearest_rows_is_the_exact_search(name, queries, rows, k, block, monkeypatch) -> None:
    monkeypatch.setattr(nearest, "_BLOCK_ELEMENTS", block)
    index, distance = nearest_rows(queries, rows, k, chunk=4)
    expected_index, expected_distance = brute_force(queries, rows, k)
    assert torch.equal(index, expected_index), name
    assert torch.equal(distance, expected_distance.float()), name


def test_a_query_that_is_a_row_finds_itself_at_distance_zero() -> None:
    rows = 1e3 + torch.randn(50, 300, generator=torch.Generator().manual_seed(1))
    index, distance = nearest_rows(rows, rows)
    assert torch.equal(index[:, 0], torch.arange(50))
    assert (distance == 0).all()


def test_dtype_shapes_and_bad_input() -> None:
    rows = torch.randn(6, 2, 2, dtype=torch.float64)
    index, distance = nearest_rows(rows[:2].half().double(), rows, 2)
    assert index.shape == (2, 2) and distance.dtype == torch.float64
    empty = nearest_rows(torch.zeros(0, 4), torch.zeros(3, 4), 2)
    assert empty[0].shape == (0, 2) and empty[1].dtype == torch.float32
    with pytest.raises(ValueError, match="k must be in"):
        nearest_rows(torch.zeros(1, 4), torch.zeros(3, 4), 4)
    with pytest.raises(ValueError, match="NaN or Inf"):
        nearest_rows(torch.full((1, 4), float("nan")), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="same d"):
        nearest_rows(torch.zeros(1, 4), torch.zeros(3, 5))
