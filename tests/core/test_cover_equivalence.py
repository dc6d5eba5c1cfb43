"""The greedy cover's paths against the implementation they replaced, on random instances.

``previous_greedy_cover`` is the matrix-product implementation of ``greedy_cover`` before the
incremental and masked paths (kept here only as the reference): every result field must match
it exactly, for every path, with and without a prepared :class:`CoverIndex`, and with the
embedding-bag row sums or their numpy fallback.
"""

import pytest
import torch

from repinterp.core.cover import (
    CoverIndex,
    CoverResult,
    exact_cover,
    greedy,
    greedy_cover,
    incremental,
    masked,
)


def previous_greedy_cover(ref: torch.Tensor, x: torch.Tensor, other: torch.Tensor) -> CoverResult:
    """The former implementation: float32 indicator matrices, full recount at every step."""
    n_in, n_q = x.shape
    negative, positive = (ref < 0).float(), (ref > 0).float()
    x_neg, x_pos = (x < 0).float(), (x > 0).float()
    agree = (
        x_neg @ negative.T + x_pos @ positive.T + (1 - x_neg - x_pos) @ (1 - negative - positive).T
    )
    delta = (other & (agree == n_q)).sum(1)
    covered = torch.ones(other.shape, dtype=torch.bool)
    conflicts = other.sum(1)
    chosen = torch.zeros(n_in, n_q, dtype=torch.bool)
    order = torch.full((n_in, n_q), -1, dtype=torch.long)
    for step in range(n_q + 1):
        rows = (conflicts > delta).nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        assert step < n_q
        xr = torch.cat([x[rows], x[rows]])
        inside = covered[rows]
        inside_other = inside & other[rows]
        weights = torch.cat([inside, inside_other]).float()
        on_neg, on_pos = weights @ negative, weights @ positive
        totals = weights.sum(1, keepdim=True)
        kept = torch.where(xr < 0, on_neg, torch.where(xr > 0, on_pos, totals - on_neg - on_pos))
        num, den = (totals - kept).long().split(rows.numel())
        candidate = (den > 0) & ~chosen[rows]
        assert bool(candidate.any(1).all())
        ratio = torch.where(candidate, num.double() / den.clamp(min=1), torch.inf)
        tie = candidate & (ratio == ratio.min(1, keepdim=True).values)
        tie &= den == torch.where(tie, den, -1).max(1, keepdim=True).values
        h = tie.to(torch.uint8).argmax(1)
        chosen[rows, h] = True
        order[rows, step] = h
        separated = ref.T[h] != x[rows].gather(1, h.unsqueeze(1))
        covered[rows] = inside & ~separated
        conflicts[rows] -= (inside_other & separated).sum(1)
    return CoverResult(order, covered, delta, conflicts)


def instance(seed: int, n_ref: int, n_q: int, n_in: int, kind: str):
    """Random sides with correlated boundaries, classes, and D(x) = another class.

    kinds: ``"plain"`` (sides +-1, and 0 where a hyperplane's own point rounds to 0); ``"zero"``
    (10% zeros, in the inputs too); ``"few zeros"`` (zeros in a few reference rows); ``"ties"`` (few
    distinct reference rows and duplicated boundaries, so ratios tie); ``"delta"`` (inputs copy
    reference rows, so images of D agree with x on every boundary).
    """
    g = torch.Generator().manual_seed(seed)
    n_classes = 2 + seed % 5
    dim = 3 + seed % 6
    means = torch.randn(n_classes, dim, generator=g) * 2
    ref_class = torch.randint(0, n_classes, (n_ref,), generator=g)
    x_class = torch.randint(0, n_classes, (n_in,), generator=g)
    features = means[ref_class] + torch.randn(n_ref, dim, generator=g)
    x_features = means[x_class] + torch.randn(n_in, dim, generator=g)
    normals = torch.randn(n_q, dim, generator=g)
    through = features[torch.randint(0, n_ref, (n_q,), generator=g)]
    bias = -(normals * through).sum(1)
    ref = torch.sign(features @ normals.T + bias).to(torch.int8)
    x = torch.sign(x_features @ normals.T + bias).to(torch.int8)
    if kind == "zero":
        ref[torch.rand(ref.shape, generator=g) < 0.1] = 0
        x[torch.rand(x.shape, generator=g) < 0.1] = 0
    elif kind == "few zeros":
        ref[torch.randint(0, n_ref, (1 + seed % 5,), generator=g)] = 0
    elif kind == "ties":
        patterns = ref[torch.randint(0, n_ref, (4 + seed % 7,), generator=g)]
        ref = patterns[torch.randint(0, len(patterns), (n_ref,), generator=g)]
        copies = torch.randint(0, n_q, (n_q,), generator=g)
        keep = torch.rand(n_q, generator=g) < 0.5
        ref[:, keep] = ref[:, copies[keep]]
        x[:, keep] = x[:, copies[keep]]
    elif kind == "delta":
        x = ref[torch.randint(0, n_ref, (n_in,), generator=g)].clone()
        x_class = torch.randint(0, n_classes, (n_in,), generator=g)
    other = ref_class.unsqueeze(0) != x_class.unsqueeze(1)
    if seed % 4 == 3:  # D(x) not made of classes
        other = torch.rand(n_in, n_ref, generator=g) < torch.rand(n_in, 1, generator=g)
    return ref, x, other


KINDS = ("plain", "zero", "few zeros", "ties", "delta")


def assert_same(result: CoverResult, expected: CoverResult) -> None:
    for name, value in vars(expected).items():
        assert torch.equal(getattr(result, name).cpu(), value), name


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(12))
def test_small_instances(seed: int, kind: str) -> None:
    ref, x, other = instance(seed, n_ref=3 + 17 * seed % 60, n_q=1 + seed % 13, n_in=7, kind=kind)
    expected = previous_greedy_cover(ref, x, other)
    index = CoverIndex(ref)
    for method in ("incremental", "masked"):
        assert_same(greedy_cover(index, x, other, method=method), expected)
        first = CoverResult(*(value[:1] for value in vars(expected).values()))
        assert_same(greedy_cover(ref, x[:1], other[:1], method=method), first)
    assert_same(greedy_cover(ref, x, other), expected)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_medium_instances(seed: int, kind: str, one_thread: None) -> None:
    ref, x, other = instance(100 + seed, n_ref=1500 + 700 * seed, n_q=50, n_in=6, kind=kind)
    expected = previous_greedy_cover(ref, x, other)
    index = CoverIndex(ref)
    assert_same(greedy_cover(index, x, other, method="incremental"), expected)
    assert_same(greedy_cover(index, x, other, method="masked", max_elements=1), expected)


# (rows per plane word, rows per step) that make the host path update its counts by...
COUNT_UPDATES = {
    "plane passes": (0.0, 1),  # ... one pass over the planes at every step
    "field sums": (0.0, -float("inf")),  # ... field sums at every step
    "both": (0.0, -50),  # ... a pass when a step's images number over 50, else field sums
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("update", COUNT_UPDATES)
def test_count_updates(update: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host path's two ways of counting after a step, alone and mixed within one cover."""
    per_word, per_step = COUNT_UPDATES[update]
    monkeypatch.setattr(incremental, "_ROWS_PER_PLANE_WORD", per_word)
    monkeypatch.setattr(incremental, "_ROWS_PER_STEP", per_step)
    for seed in range(4):
        ref, x, other = instance(30 + seed, n_ref=600 + 500 * seed, n_q=40, n_in=6, kind=kind)
        expected = previous_greedy_cover(ref, x, other)
        assert_same(greedy_cover(ref, x, other, method="incremental"), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_row_sums_without_embedding_bags(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The numpy fallback of the field sums, and the float32 exactness split (forced small)."""
    ref, x, other = instance(7, n_ref=900, n_q=30, n_in=5, kind=kind)
    expected = previous_greedy_cover(ref, x, other)
    monkeypatch.setattr(incremental, "_ROWS_PER_STEP", -float("inf"))  # field sums every step
    monkeypatch.setattr(incremental, "FLOAT32_EXACT", 37)
    assert_same(greedy_cover(ref, x, other, method="incremental"), expected)
    monkeypatch.setattr(incremental, "_row_sum_op", lambda: None)
    assert_same(greedy_cover(ref, x, other, method="incremental"), expected)


def test_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Float32 products (torch without ``_int_mm`` on the host) and byte-table popcounts
    (numpy < 2)."""
    ref, x, other = instance(5, n_ref=700, n_q=20, n_in=12, kind="few zeros")
    expected = previous_greedy_cover(ref, x, other)
    monkeypatch.setattr(masked, "_product_kind", lambda device: "float")
    index = CoverIndex(ref)
    assert index.dense().fields.dtype == torch.float32
    assert_same(greedy_cover(index, x, other, method="masked"), expected)
    monkeypatch.delattr(incremental.np, "bitwise_count")
    assert_same(greedy_cover(ref, x, other, method="incremental"), expected)


def test_degenerate_shapes() -> None:
    ref, x, other = instance(0, n_ref=30, n_q=6, n_in=3, kind="plain")
    for method in ("incremental", "masked"):
        empty_q = greedy_cover(ref[:, :0], x[:, :0], other, method=method)
        assert (empty_q.order.shape == (3, 0)) and empty_q.covered.all()
        assert torch.equal(empty_q.delta, other.sum(1))
        one = greedy_cover(ref[:1], x, other[:, :1], method=method)
        assert_same(one, previous_greedy_cover(ref[:1], x, other[:, :1]))
        none = greedy_cover(ref[:0], x, other[:, :0], method=method)
        assert (none.order == -1).all() and none.covered.shape == (3, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", KINDS)
def test_cuda(kind: str) -> None:
    """Both paths on a CUDA index, and the captured graph replayed on other inputs."""
    for seed, n_ref, n_in in ((0, 50, 9), (1, 3000, 9), (2, 20_000, 3)):
        ref, x, other = instance(seed, n_ref=n_ref, n_q=37, n_in=2 * n_in, kind=kind)
        expected = previous_greedy_cover(ref, x, other)
        index = CoverIndex(ref.cuda())
        for method in ("masked", "incremental", "auto"):
            for part in (slice(0, n_in), slice(n_in, 2 * n_in), slice(0, 1), slice(1, 2)):
                result = greedy_cover(index, x[part].cuda(), other[part].cuda(), method=method)
                assert result.order.is_cuda
                assert_same(result, CoverResult(*(v[part] for v in vars(expected).values())))


def test_other_class_not_bool() -> None:
    ref, x, other = instance(4, n_ref=200, n_q=9, n_in=9, kind="plain")
    expected = previous_greedy_cover(ref, x, other)
    for method in ("incremental", "masked"):
        assert_same(greedy_cover(ref, x, other.to(torch.uint8) * 2, method=method), expected)


def test_exact_cover_takes_a_cover_index() -> None:
    ref, x, other = instance(3, n_ref=25, n_q=6, n_in=3, kind="plain")
    index = CoverIndex(ref)
    by_index, by_sides = exact_cover(index, x, other), exact_cover(ref, x, other)
    assert torch.equal(by_index.order, by_sides.order)
    assert torch.equal(by_index.covered, by_sides.covered)


def test_auto_method() -> None:
    index = CoverIndex(torch.ones(100_000, 4, dtype=torch.int8))
    assert greedy._auto_method(index, 1) == "incremental"
    with pytest.raises(ValueError, match="method must be"):
        greedy_cover(
            index,
            torch.ones(1, 4, dtype=torch.int8),
            torch.ones(1, 100_000, dtype=torch.bool),
            method="x",
        )
