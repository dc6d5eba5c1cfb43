"""Exact nearest rows in Euclidean distance: k-means regions' centres, the CAM baselines' nearest
inputs and Euclidean similar images all use this one search."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["nearest_rows"]


def nearest_rows(
    queries: Tensor, rows: Tensor, k: int = 1, chunk: int = 1024
) -> tuple[Tensor, Tensor]:
    """The ``k`` rows (M x d) nearest each query (N x d) in Euclidean distance.

    Distances are sums of squared pairwise differences in float64, so a query that is also a
    row finds itself at distance 0; equal distances go to the lower row index. The faster
    matrix-product form ``|q|^2 - 2 q.r + |r|^2`` (in float64) only preselects: a row's
    distance is computed from the differences unless that form's rounding bound proves ``k``
    other rows nearer, so the result is the exact search's.

    Args:
        queries: N x d (or N x ..., flattened).
        rows: M x d (or M x ..., flattened), with the same d.
        k: neighbours per query, 1 <= k <= M.
        chunk: queries per distance computation (memory ``chunk x M``).

    Returns:
        N x k row indices (long) and N x k distances, nearest first, on the CPU, in the
        inputs' floating dtype (at least float32).

    Raises:
        ValueError: mismatched shapes, a bad ``k`` or ``chunk``, or NaN / Inf values.
    """
    query = queries.flatten(1) if queries.ndim > 2 else queries
    ref = rows.flatten(1) if rows.ndim > 2 else rows
    if query.ndim != 2 or ref.ndim != 2 or query.shape[1] != ref.shape[1]:
        raise ValueError(
            f"features must be N x d and M x d with the same d, got "
            f"{tuple(queries.shape)} and {tuple(rows.shape)}"
        )
    if not 1 <= k <= ref.shape[0]:
        raise ValueError(f"k must be in [1, {ref.shape[0]}] (number of rows), got {k}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    dtype = torch.promote_types(torch.promote_types(query.dtype, ref.dtype), torch.float32)
    query, ref = query.cpu(), ref.cpu()
    if not (bool(torch.isfinite(query).all()) and bool(torch.isfinite(ref).all())):
        raise ValueError("features contain NaN or Inf")
    block = max(1, _BLOCK_ELEMENTS // max(1, ref.shape[1]))  # rows converted to float64 at once
    ref_norms = torch.cat([_squared_norms(part) for part in ref.split(block)])  # M >= k >= 1
    # Either form is within 2 (d + 4) u (|q|^2 + |r|^2) of the exact value (u = 2^-53, in any
    # order of summation), so they differ by at most twice that; the slack spares a factor 2.
    slack = 8 * (ref.shape[1] + 4) * 2.0**-53
    best_i, best_d = [], []
    for part in query.split(chunk):
        q = part.to(_F64)
        q_norms = _squared_norms(q)
        bound = slack * (q_norms[:, None] + ref_norms)
        approx = torch.cat(
            [
                torch.addmm(q_norms[:, None] + n, q, r.to(_F64).T, alpha=-2)
                for r, n in zip(ref.split(block), ref_norms.split(block), strict=True)
            ],
            dim=1,
        )
        limit = (approx + bound).kthvalue(k, dim=1, keepdim=True).values
        qi, ri = (approx - bound <= limit).nonzero(as_tuple=True)
        exact = torch.full_like(approx, torch.inf)
        for s in range(0, len(qi), block):
            a, b = qi[s : s + block], ri[s : s + block]
            exact[a, b] = _squared_norms(q[a] - ref[b].to(_F64))
        if k == 1:  # min returns the first minimum: the lower index on ties
            value, index = exact.min(1, keepdim=True)
        else:
            value, index = torch.sort(exact, dim=1, stable=True)
        best_i.append(index[:, :k])
        best_d.append(value[:, :k].sqrt().to(dtype))
    if not best_i:
        return torch.empty(0, k, dtype=torch.long), torch.empty(0, k, dtype=dtype)
    return torch.cat(best_i), torch.cat(best_d)


_F64 = torch.float64
_BLOCK_ELEMENTS = 1 << 22  # 32 MB of float64


def _squared_norms(x: Tensor) -> Tensor:
    """Squared Euclidean norms of the rows of ``x``, in float64."""
    x = x.to(_F64)
    return (x * x).sum(1)
