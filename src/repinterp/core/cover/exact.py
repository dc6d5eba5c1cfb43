"""Eq. 3 solved exactly: a MILP per input (HiGHS through SciPy), its reductions, and the
canonical cover with the fewest boundaries."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .common import CoverResult, check_shapes
from .greedy import greedy_cover
from .prepared import CoverIndex


@dataclass
class ExactCoverResult(CoverResult):
    """Covers of B inputs by [`exact_cover`][repinterp.core.cover.exact.exact_cover]; ``order``
    holds ``P(x)`` in ascending order.

    Attributes (besides [`CoverResult`][repinterp.core.cover.common.CoverResult]'s):
        optimal: B bool, whether the representativeness is proven maximal.
        bound: B long, a proven upper bound on the optimal representativeness.
        gap: B float64, ``(bound - representativeness) / max(representativeness, 1)``.
        greedy_representativeness: B long, what Algorithm 1 covers.
        from_greedy: B bool, the greedy's ``P`` was kept (the solver found nothing better).
        seconds: B float64, wall time of the exact step (model building and solving).
    """

    optimal: Tensor
    bound: Tensor
    gap: Tensor
    greedy_representativeness: Tensor
    from_greedy: Tensor
    seconds: Tensor


def exact_cover(
    reference_sides: Tensor | CoverIndex,
    input_sides: Tensor,
    other_class: Tensor,
    time_limit: float = 5.0,
    greedy: CoverResult | None = None,
    reduce: bool = True,
) -> ExactCoverResult:
    """Eq. 3 solved to optimality (or to a certified gap) by a MILP, one input at a time.

    Maximise the reference images covered by ``P ⊆ Q`` subject to ``|P ∩ D| <= delta``, with
    ``delta = tau(x)`` as in [`greedy_cover`][repinterp.core.cover.greedy.greedy_cover]. Variables:
    a binary ``y_h`` per boundary (in
    ``P`` or not) and ``z_i`` in [0, 1] per reference image (covered or not):

        max sum_i z_i  s.t.  z_i <= 1 - y_h            for every h separating i from x,
                             z_i >= 1 - sum_h y_h      (same h) for i in D(x),
                             sum_{i in D(x)} z_i <= delta.

    For binary ``y`` the constraints force ``z_i`` to exactly "i is covered" on D(x), and the
    maximisation lifts it there elsewhere, so ``z`` needs no integrality. With ``reduce`` (exact,
    see `_reduce`): images no boundary separates are a constant, the images of D(x) become
    covering rows "P meets the separating set of i" kept only for the minimal sets, boundaries
    in no such set are dropped, images outside D(x) that can never (or always) be covered are
    constants, and the rest are merged by separation pattern into one ``z`` weighted by count.

    Algorithm 1 runs first: its ``P`` is kept when the solver's incumbent is absent (time limit),
    infeasible or worse, and the solver is skipped when the greedy already covers every image
    outside D(x) plus delta (the trivial bound). The coverage of the solver's ``P`` is recomputed
    from ``P`` rather than read off ``z``.

    Args:
        reference_sides: |R| x |Q| int8 sides of the reference images (see
            [`sides`][repinterp.core.cover.sides]), or a
            [`CoverIndex`][repinterp.core.cover.prepared.CoverIndex] of them.
        input_sides: B x |Q| int8 sides of the inputs.
        other_class: B x |R| bool, ``D(x)``.
        time_limit: seconds for HiGHS per input; past it, the best solution and bound so far.
            HiGHS checks it between its steps, so a large, hard model can overrun it in presolve.
        greedy: [`greedy_cover`][repinterp.core.cover.greedy.greedy_cover] of the same inputs, if
            already computed.
        reduce: apply the reductions above (False builds one ``z`` per image, for testing).

    Returns:
        An [`ExactCoverResult`][repinterp.core.cover.exact.ExactCoverResult] on
        ``reference_sides``'s device.
    """
    check_shapes(reference_sides.shape, input_sides, other_class)
    if greedy is None:
        greedy = greedy_cover(reference_sides, input_sides, other_class)
    if isinstance(reference_sides, CoverIndex):
        reference_sides = reference_sides.sides
    n_in, n_q = input_sides.shape
    if greedy.covered.shape[0] != n_in:
        raise ValueError(f"greedy covers {greedy.covered.shape[0]} inputs, not {n_in}")
    ref = reference_sides.cpu().numpy()
    inputs = input_sides.cpu().numpy()
    others = other_class.cpu().numpy().astype(bool)
    greedy_covered = greedy.covered.cpu().numpy()
    deltas = greedy.delta.cpu().numpy()

    order = np.full((n_in, n_q), -1, dtype=np.int64)
    covered = np.empty_like(greedy_covered)
    bound = np.empty(n_in, dtype=np.int64)
    from_greedy = np.zeros(n_in, dtype=bool)
    seconds = np.empty(n_in)
    for b in range(n_in):
        start = time.perf_counter()
        sep, other, delta = ref != inputs[b], others[b], int(deltas[b])
        greedy_value = int(greedy_covered[b].sum())
        bound[b] = len(other) - int(other.sum()) + delta
        chosen = None
        if greedy_value < bound[b]:
            chosen, solver_bound = _solve(sep, other, time_limit, reduce)
            bound[b] = min(bound[b], solver_bound)
        if chosen is not None:
            covered[b] = ~sep[:, chosen].any(1)
        if (
            chosen is None
            or int((covered[b] & other).sum()) > delta
            or int(covered[b].sum()) < greedy_value
        ):
            chosen = np.sort(greedy.boundaries(b).cpu().numpy())
            covered[b] = greedy_covered[b]
            from_greedy[b] = True
        order[b, : len(chosen)] = chosen
        seconds[b] = time.perf_counter() - start

    value = covered.sum(1)
    bound = np.maximum(bound, value)  # HiGHS may end a tolerance below a feasible value
    device = reference_sides.device
    return ExactCoverResult(
        *(
            torch.from_numpy(a).to(device)
            for a in (
                order,
                covered,
                deltas,
                (covered & others).sum(1),
                value >= bound,
                bound,
                (bound - value) / np.maximum(value, 1),
                greedy_covered.sum(1),
                from_greedy,
                seconds,
            )
        )
    )


def _solve(
    sep: np.ndarray,
    other: np.ndarray,
    time_limit: float,
    reduce: bool,
    at_least: int | None = None,
) -> tuple[np.ndarray | None, float]:
    """One input's MILP (see [`exact_cover`][repinterp.core.cover.exact.exact_cover]).

    Args:
        sep: |R| x |Q| bool, whether each boundary separates each reference image from x.
        other: |R| bool, ``D(x)``.
        at_least: None: maximise the images covered. A count: cover at least that many and
            minimise ``sum_h (|Q|^2 + 1 + h) y_h`` instead, i.e. the fewest boundaries, then the
            smallest sum of their indices
            ([`fewest_boundaries`][repinterp.core.cover.exact.fewest_boundaries]).

    Returns:
        The chosen boundaries (ascending; None without an incumbent) and an upper bound on the
        representativeness (inf without one; with ``at_least``, ``at_least`` itself).
    """
    from scipy import sparse  # here: scipy.optimize takes seconds to import
    from scipy.optimize import Bounds, LinearConstraint, milp

    if reduce:
        columns, constant, cover, weight, hit = _reduce(sep, other)
        hit_z = sparse.csr_array((len(hit), len(cover)))
        budget, delta = [], []
    else:
        columns, constant, cover, hit = np.arange(sep.shape[1]), 0, sep, sep[other]
        weight = np.ones(len(sep), dtype=np.int64)
        hit_z = sparse.eye_array(len(sep), format="csr")[np.flatnonzero(other)]
        budget = [[None, sparse.csr_array(other[None].astype(np.float64))]]
        delta = [int((other & ~sep.any(1)).sum())]
    n_y = len(columns)
    g, h = np.nonzero(cover)
    a = sparse.block_array(
        [
            # z_g + y_h <= 1 for every h separating g
            [
                sparse.coo_array((np.ones(len(h)), (np.arange(len(h)), h)), shape=(len(h), n_y)),
                sparse.eye_array(len(cover), format="csr")[g],
            ],
            # (z_i +) the y_h of the h separating i >= 1 for i in D
            [sparse.csr_array(hit.astype(np.float64)), hit_z],
            # sum of z_i over D <= delta
            *budget,
        ],
        format="csr",
        dtype=np.float64,
    )
    lower = np.concatenate(
        [np.full(len(h), -np.inf), np.ones(len(hit)), np.full(len(delta), -np.inf)]
    )
    upper = np.concatenate([np.ones(len(h)), np.full(len(hit), np.inf), delta])
    objective = np.concatenate([np.zeros(n_y), -weight])
    if at_least is not None:
        # sum_g weight_g z_g >= at_least - constant; the cost of P instead of its coverage
        a = sparse.vstack([a, sparse.csr_array(np.concatenate([np.zeros(n_y), weight])[None])])
        lower = np.append(lower, at_least - constant)
        upper = np.append(upper, np.inf)
        objective = np.concatenate([sep.shape[1] ** 2 + 1 + columns, np.zeros(len(cover))])
    res = milp(
        objective,
        integrality=np.concatenate([np.ones(n_y), np.zeros(len(cover))]),
        bounds=Bounds(0, 1),
        constraints=LinearConstraint(a.tocsr(), lower, upper),
        options={"time_limit": time_limit, "mip_rel_gap": 0.0},
    )
    if at_least is not None:
        return (None if res.x is None else columns[res.x[:n_y] > 0.5]), float(at_least)
    dual = res.mip_dual_bound
    bound = (
        math.inf if dual is None or not math.isfinite(dual) else math.floor(constant - dual + 1e-6)
    )
    return (None if res.x is None else columns[res.x[:n_y] > 0.5]), bound


def fewest_boundaries(
    reference_sides: Tensor,
    input_sides: Tensor,
    other_class: Tensor,
    result: ExactCoverResult,
    time_limit: float = 5.0,
) -> ExactCoverResult:
    """[`exact_cover`][repinterp.core.cover.exact.exact_cover]'s ``result`` made canonical: among
    the ``P`` that cover as many images (with ``|P ∩ D| <= delta``), the fewest boundaries, then the
    smallest sum of their indices (a second MILP per input; ``result``'s ``P`` stays where it finds
    nothing better in ``time_limit``). The MILP's optima differ by boundaries that separate nothing
    more, and HiGHS picks one; this fixes ``P``, and the heat map drawn from it, up to equal index
    sums. ``covered`` (same size, maybe another set), ``conflicts`` and ``seconds`` are updated."""
    ref, inputs = reference_sides.cpu().numpy(), input_sides.cpu().numpy()
    others = other_class.cpu().numpy().astype(bool)
    order, covered = result.order.cpu().numpy().copy(), result.covered.cpu().numpy().copy()
    seconds = result.seconds.cpu().numpy().copy()
    for b in range(len(inputs)):
        start, current = time.perf_counter(), order[b][order[b] >= 0]
        sep, value = ref != inputs[b], int(covered[b].sum())
        chosen, _ = _solve(sep, others[b], time_limit, True, at_least=value)
        now = np.zeros_like(covered[b]) if chosen is None else ~sep[:, chosen].any(1)
        cheaper = chosen is not None and (len(chosen), chosen.sum()) < (len(current), current.sum())
        if cheaper and now.sum() >= value and (now & others[b]).sum() <= int(result.delta[b]):
            order[b], covered[b] = -1, now
            order[b, : len(chosen)] = np.sort(chosen)
        seconds[b] += time.perf_counter() - start
    as_tensor = lambda a: torch.from_numpy(a).to(reference_sides.device)  # noqa: E731
    return dataclasses.replace(
        result,
        order=as_tensor(order),
        covered=as_tensor(covered),
        conflicts=as_tensor((covered & others).sum(1)),
        seconds=as_tensor(seconds),
    )


def _reduce(
    sep: np.ndarray, other: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """The reduced model of one input, exact because ``delta = tau(x)``.

    Every image of D(x) that some boundary separates must be separated by P, so P must hit the
    minimal separation patterns of D(x) (rows ``hit``); boundaries in none of them never help (P
    keeps to ``columns``). An image outside D(x) is always covered when no kept boundary
    separates it, never when its pattern contains one of ``hit``; the others, merged by pattern
    (rows ``cover``, with counts ``weight``), are what the MILP decides. ``constant`` counts the
    always-covered images, those of D(x) no boundary separates included.
    """
    separated = sep.any(1)
    hit = _minimal(sep[separated & other])
    columns = np.flatnonzero(hit.any(0))
    hit = hit[:, columns]
    rows = sep[~other][:, columns]
    free = ~rows.any(1)
    alive = _count_contained(rows, hit) == 0
    constant = int(free.sum()) + int((other & ~separated).sum())
    cover, weight = np.unique(rows[alive & ~free], axis=0, return_counts=True)
    return columns, constant, cover, weight, hit


def _minimal(patterns: np.ndarray) -> np.ndarray:
    """The distinct rows of a bool matrix that contain no other row (as sets of columns)."""
    rows = np.unique(patterns, axis=0)
    return rows[_count_contained(rows, rows) == 1]


def _count_contained(rows: np.ndarray, sets: np.ndarray, max_cells: int = 1 << 22) -> np.ndarray:
    """How many rows of ``sets`` each row of ``rows`` contains (bool matrices, as sets of
    columns), by matrix products over chunks of at most ``max_cells`` cells."""
    r, s = rows.astype(np.float32), sets.astype(np.float32)  # exact for counts below 2**24
    size = s.sum(1)
    counts = np.zeros(len(r), dtype=np.int64)
    step = max(1, max_cells // max(1, len(s)))
    for i in range(0, len(r), step):
        counts[i : i + step] = (r[i : i + step] @ s.T == size).sum(1)
    return counts
