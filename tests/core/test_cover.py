import pytest
import torch

from repinterp.core.cover import greedy_cover
from repinterp.core.paper import algorithm_1


def random_instance(seed: int, n_ref: int = 40, n_q: int = 8, n_in: int = 5):
    g = torch.Generator().manual_seed(seed)
    ref = (torch.randint(0, 2, (n_ref, n_q), generator=g) * 2 - 1).to(torch.int8)
    ref[torch.rand(n_ref, n_q, generator=g) < 0.02] = 0
    x = (torch.randint(0, 2, (n_in, n_q), generator=g) * 2 - 1).to(torch.int8)
    classes = torch.randint(0, 3, (n_ref,), generator=g)
    x_class = torch.randint(0, 3, (n_in,), generator=g)
    other = classes.unsqueeze(0) != x_class.unsqueeze(1)
    return ref, x, other


@pytest.mark.parametrize("seed", range(60))
def test_greedy_matches_plain_algorithm(seed: int) -> None:
    ref, x, other = random_instance(seed, n_q=3 + seed % 9)
    result = greedy_cover(ref, x, other)
    for i in range(x.shape[0]):
        chosen, covered, delta = algorithm_1(ref, x[i], other[i])
        assert result.boundaries(i).tolist() == chosen
        assert result.covered[i].nonzero().flatten().tolist() == covered
        assert int(result.delta[i]) == delta
        assert int(result.conflicts[i]) <= delta
        assert int(result.conflicts[i]) == int((result.covered[i] & other[i]).sum())
        assert len(chosen) <= ref.shape[1]


def test_chunked_equals_whole() -> None:
    ref, x, other = random_instance(3, n_ref=200, n_q=12, n_in=30)
    whole = greedy_cover(ref, x, other)
    chunked = greedy_cover(ref, x, other, max_elements=200 * 12 * 4)
    for a, b in zip(vars(whole).values(), vars(chunked).values(), strict=True):
        assert torch.equal(a, b)


def _sides(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int8)


def test_zero_numerator_prefers_largest_denominator() -> None:
    # images 0-2 are of D; boundary 0 removes {0}, boundary 1 removes {0, 1}: both cost nothing.
    ref = _sides([[-1, -1, 1], [1, -1, 1], [1, 1, -1], [1, 1, 1]])
    other = torch.tensor([[True, True, True, False]])
    result = greedy_cover(ref, _sides([[1, 1, 1]]), other)
    assert result.boundaries(0).tolist() == [1, 2]


def test_equal_ratio_prefers_larger_denominator_then_lower_index() -> None:
    # The numerator counts every removed image. Boundary 0 removes {0, 1, 4}, two of D: 3/2;
    # boundary 1 removes {0, ..., 5}, four of D: 6/4. Equal ratios: the larger denominator wins.
    ref = _sides(
        [[-1, -1, -1], [-1, -1, -1], [1, -1, -1], [1, -1, -1], [-1, -1, -1], [1, -1, -1], [1, 1, 1]]
    )
    other = torch.tensor([[True, True, True, True, False, False, False]])
    result = greedy_cover(ref, _sides([[1, 1, 1]]), other)
    assert result.boundaries(0).tolist() == [1]
    # boundaries 1 and 2 are identical: the lower index wins.
    assert int(result.delta[0]) == 0


def test_no_other_class_gives_empty_polytope() -> None:
    ref, x, _ = random_instance(0)
    other = torch.zeros(x.shape[0], ref.shape[0], dtype=torch.bool)
    result = greedy_cover(ref, x, other)
    assert (result.order == -1).all()
    assert result.covered.all()
    assert (result.delta == 0).all()


def test_shape_errors() -> None:
    ref, x, other = random_instance(0)
    with pytest.raises(ValueError, match="input_sides must be B x 8"):
        greedy_cover(ref, x[:, :3], other)
    with pytest.raises(ValueError, match="other_class must be 5 x 40"):
        greedy_cover(ref, x, other[:, :3])
