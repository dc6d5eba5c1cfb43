"""The exact (MILP) cover: brute-force optimum, reductions, time limit, and the interpreter."""

import itertools
import json
import math

import pytest
import torch

from repinterp import FitConfig, RepresentativeInterpreter
from repinterp.core.cover import exact_cover, greedy_cover, sides

from ..networks import random_setup


def random_instance(seed: int, n_q: int, n_ref: int, n_in: int = 2, n_patterns: int | None = None):
    """Sides in {-1, 0, 1}; reference rows drawn from ``n_patterns`` rows when given, so that
    many rows repeat; ``D(x)`` of varying density."""
    g = torch.Generator().manual_seed(seed)

    def signs(*shape: int) -> torch.Tensor:
        s = torch.randint(0, 2, shape, generator=g) * 2 - 1
        return torch.where(torch.rand(shape, generator=g) < 0.1, 0, s).to(torch.int8)

    ref = signs(n_ref, n_q)
    if n_patterns is not None:
        ref = signs(n_patterns, n_q)[torch.randint(0, n_patterns, (n_ref,), generator=g)]
    x = signs(n_in, n_q)
    other = torch.rand(n_in, n_ref, generator=g) < torch.rand(n_in, 1, generator=g)
    return ref, x, other


def brute_force(ref: torch.Tensor, x: torch.Tensor, other: torch.Tensor) -> int:
    """max |P ∩ R| over all P ⊆ Q with |P ∩ D| <= tau(x)."""
    sep = ref != x
    delta = int((other & ~sep.any(1)).sum())
    best = -1
    for size in range(sep.shape[1] + 1):
        for p in itertools.combinations(range(sep.shape[1]), size):
            covered = ~sep[:, list(p)].any(1)
            if int((covered & other).sum()) <= delta:
                best = max(best, int(covered.sum()))
    return best


def check_consistent(ref, x, other, result, i: int) -> None:
    """``covered`` follows from ``P`` (ascending), and ``|P ∩ D| <= delta``."""
    p = result.boundaries(i)
    assert torch.equal(p, p.sort().values)
    assert torch.equal(result.covered[i], ~(ref[:, p] != x[i, p]).any(1))
    conflicts = int((result.covered[i] & other[i]).sum())
    assert conflicts == int(result.conflicts[i]) <= int(result.delta[i])


@pytest.mark.parametrize("block", range(10))
def test_exact_finds_brute_force_optimum(block: int) -> None:
    for seed in range(10 * block, 10 * block + 10):
        n_q, n_ref = 1 + seed % 8, 5 + (7 * seed) % 36
        ref, x, other = random_instance(seed, n_q, n_ref, n_in=1)
        greedy = greedy_cover(ref, x, other)
        exact = exact_cover(ref, x, other)
        for i in range(x.shape[0]):
            optimum = brute_force(ref, x[i], other[i])
            value = int(exact.covered[i].sum())
            assert value == optimum, f"seed {seed}"
            assert bool(exact.optimal[i]) and float(exact.gap[i]) == 0.0
            assert int(exact.bound[i]) == optimum
            g = int(greedy.covered[i].sum())
            assert g == int(exact.greedy_representativeness[i]) <= optimum
            assert int(greedy.conflicts[i]) <= int(greedy.delta[i])
            assert torch.equal(exact.delta, greedy.delta)
            check_consistent(ref, x, other, exact, i)


def test_exact_beats_a_greedy_tie_break() -> None:
    """x = (+, +, +); D = {1, 3}; every boundary removes 2 images, 1 of D: Algorithm 1 takes h0
    (lowest index), then must take h1 and covers nothing; {h1, h2} keeps image 0."""
    ref = torch.tensor([[-1, 1, 1], [-1, 1, -1], [1, -1, -1], [1, -1, 1]], dtype=torch.int8)
    x = torch.ones(1, 3, dtype=torch.int8)
    other = torch.tensor([[False, True, False, True]])
    exact = exact_cover(ref, x, other)
    assert greedy_cover(ref, x, other).boundaries(0).tolist() == [0, 1]
    assert exact.greedy_representativeness.tolist() == [0]
    assert exact.boundaries(0).tolist() == [1, 2]
    assert exact.covered[0].tolist() == [True, False, False, False]
    assert exact.optimal.all() and not exact.from_greedy.any()


@pytest.mark.parametrize("seed", range(8))
def test_reductions_keep_the_optimum(seed: int) -> None:
    ref, x, other = random_instance(seed, n_q=10, n_ref=300, n_in=3, n_patterns=25)
    reduced = exact_cover(ref, x, other, reduce=True)
    literal = exact_cover(ref, x, other, reduce=False)
    assert reduced.optimal.all() and literal.optimal.all()
    assert torch.equal(reduced.covered.sum(1), literal.covered.sum(1))
    assert torch.equal(reduced.bound, literal.bound)
    for i in range(x.shape[0]):
        check_consistent(ref, x, other, reduced, i)
        check_consistent(ref, x, other, literal, i)


def test_empty_d_needs_no_boundary() -> None:
    ref, x, _ = random_instance(0, n_q=6, n_ref=30)
    other = torch.zeros(x.shape[0], 30, dtype=torch.bool)
    exact = exact_cover(ref, x, other)
    assert (exact.order == -1).all() and exact.covered.all()
    assert exact.optimal.all() and (exact.gap == 0).all()


def test_images_outside_d_that_no_cover_can_keep() -> None:
    """Image 1 (outside D) has the separation pattern of image 0 (in D): it is never covered, so
    the reduced model has no z at all; image 2 (in D, unseparated) makes delta 1."""
    ref = torch.tensor([[-1, 1], [-1, 1], [1, 1]], dtype=torch.int8)
    x = torch.ones(1, 2, dtype=torch.int8)
    other = torch.tensor([[True, False, True]])
    for reduce in (True, False):
        exact = exact_cover(ref, x, other, reduce=reduce)
        assert exact.covered[0].tolist() == [False, False, True]
        assert exact.optimal.all() and exact.delta.tolist() == exact.conflicts.tolist() == [1]
        assert exact.bound.tolist() == [1]


def test_time_limit_keeps_a_feasible_unproven_result() -> None:
    ref, x, other = random_instance(1, n_q=50, n_ref=2000, n_in=2)
    other = torch.rand(2, 2000, generator=torch.Generator().manual_seed(0)) < 0.5
    greedy = greedy_cover(ref, x, other)
    exact = exact_cover(ref, x, other, time_limit=1e-3, greedy=greedy)
    assert not exact.optimal.any()
    value = exact.covered.sum(1)
    assert (exact.bound > value).all()
    assert torch.allclose(exact.gap, (exact.bound - value) / value.clamp(min=1).double())
    assert (exact.gap > 0).all() and exact.gap.isfinite().all()
    # no incumbent (or a worse one) in 1 ms: the greedy's P, in ascending order
    assert exact.from_greedy.all()
    assert torch.equal(exact.covered, greedy.covered)
    for i in range(2):
        assert torch.equal(exact.boundaries(i), greedy.boundaries(i).sort().values)
        check_consistent(ref, x, other, exact, i)


def test_shapes_are_checked() -> None:
    ref, x, other = random_instance(0, n_q=4, n_ref=10)
    with pytest.raises(ValueError, match="input_sides"):
        exact_cover(ref, x[:, :3], other)
    with pytest.raises(ValueError, match="greedy covers 1 inputs"):
        exact_cover(ref, x, other, greedy=greedy_cover(ref, x[:1], other[:1]))


@pytest.fixture(scope="module")
def fitted():
    model, images = random_setup(n=300)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=12, seed=0, progress=False)
    return ri.fit(images[:240]), images[240:]


def test_interpreter_exact_solver(fitted) -> None:
    ri, inputs = fitted
    exact = ri.explain_batch(inputs[:12], solver="exact")
    greedy = ri.explain_batch(inputs[:12])
    assert len({e.predicted_class for e in greedy}) > 1
    for e, g in zip(exact, greedy, strict=True):
        assert g.solver == "greedy" and g.optimal is None and g.optimum is None
        assert e.solver == "exact"
        assert e.representativeness >= g.representativeness == e.greedy_representativeness
        assert e.optimal is True and e.gap == 0.0 and e.optimum == e.representativeness
        assert e.conflicts <= e.delta == g.delta
        assert torch.equal(e.boundary_ids, e.boundary_ids.sort().values)
        d = json.loads(json.dumps(e.to_dict()))
        assert d["solver"] == "exact" and d["optimum"] == e.representativeness
        assert d["greedy_representativeness"] == g.representativeness
    other = ri.index.predictions != exact[0].predicted_class
    x_sides = sides(exact[0].projections)
    assert exact[0].representativeness == brute_force(ri.index.sides, x_sides, other)
    one = ri.explain(inputs[0], solver="exact")
    assert one.representativeness == exact[0].representativeness
    assert one.representativeness >= ri.explain(inputs[0]).representativeness


def test_interpreter_default_solver_and_bad_names(fitted) -> None:
    ri, inputs = fitted
    config = FitConfig(n_boundaries=12, time_limit=2.0, progress=False)
    exact_ri = RepresentativeInterpreter(ri.model, "relu2", solver="exact", config=config)
    exact_ri.fit(ri.reference)  # the same reference set and Q as ri
    assert exact_ri.explain(inputs[1]).solver == "exact"
    assert exact_ri.explain(inputs[1], solver="greedy").solver == "greedy"
    assert exact_ri.explain_reference([3], solver="greedy")[0].solver == "greedy"
    with pytest.raises(ValueError, match="greedy, exact"):
        ri.explain(inputs[0], solver="milp")
    with pytest.raises(ValueError, match="greedy, exact"):
        RepresentativeInterpreter(ri.model, "relu2", solver="optimal")
    with pytest.raises(ValueError, match="time_limit"):
        RepresentativeInterpreter(ri.model, "relu2", config=FitConfig(time_limit=0))
    assert math.isfinite(exact_ri.explain(inputs[2]).gap)
