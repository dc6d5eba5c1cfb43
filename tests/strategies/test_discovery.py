"""A class's strategies (strategies/discovery.py): discovery without labels, separators."""

import numpy as np
import pytest
import torch
from safetensors.torch import load, save

from repinterp.strategies.discovery import (
    MIN_GAIN,
    SEPARATOR_CLASSES,
    Strategies,
    discover_strategies,
    ledoit_wolf_shrinkage,
    strategy_pairs,
    strategy_separators,
)


def _blobs(sizes: list[int], dim: int, seed: int, spread: float = 10.0) -> torch.Tensor:
    """Gaussian blobs (unit variance) ``spread`` apart along random directions, in order."""
    generator = torch.Generator().manual_seed(seed)
    centres = spread * torch.randn(len(sizes), dim, generator=generator)
    return torch.cat(
        [c + torch.randn(n, dim, generator=generator) for c, n in zip(centres, sizes, strict=True)]
    )


@pytest.fixture(scope="module")
def three_classes(one_thread):
    """Class 0: three blobs; class 1: one blob; class 2: two blobs (rows shuffled)."""
    sizes = {0: [40, 30, 25], 1: [60], 2: [35, 45]}
    vectors, classes, groups = [], [], []
    for c, blob_sizes in sizes.items():
        vectors.append(_blobs(blob_sizes, 12, seed=c))
        classes += [c] * sum(blob_sizes)
        groups += [(c, g) for g, n in enumerate(blob_sizes) for _ in range(n)]
    order = torch.randperm(len(classes), generator=torch.Generator().manual_seed(7))
    groups = [groups[i] for i in order.tolist()]
    return torch.cat(vectors)[order], torch.tensor(classes)[order], groups


def _same_partition(labels: list, groups: list) -> bool:
    pairs = set(zip(labels, groups, strict=True))
    return len(pairs) == len(set(labels)) == len(set(groups))


def test_finds_k_and_the_groups_of_blobs(three_classes):
    vectors, classes, groups = three_classes
    found = discover_strategies(vectors, classes, seed=0)
    assert found.k == {0: 3, 1: 1, 2: 2}
    assert _same_partition(found.assignment.tolist(), groups)
    # a strategy holds rows of one class, and ids run class by class
    assert torch.equal(found.classes[found.assignment], classes)
    assert found.classes.tolist() == [0, 0, 0, 1, 2, 2]


def test_assign_puts_new_rows_in_their_blob(three_classes):
    vectors, classes, _ = three_classes
    found = discover_strategies(vectors, classes, seed=0)
    noisy = vectors + 0.1 * torch.randn(vectors.shape, generator=torch.Generator().manual_seed(1))
    assert torch.equal(found.assign(noisy, classes), found.assignment)
    assert found.assign(vectors[:3], torch.tensor([9, 9, 9])).tolist() == [-1, -1, -1]


def test_one_blob_is_one_strategy(one_thread):
    vectors = _blobs([200], 8, seed=3)
    found = discover_strategies(vectors, torch.zeros(200, dtype=torch.long), seed=0)
    assert found.k == {0: 1}
    assert found.assignment.eq(0).all()
    silhouette, gaussian = found.criterion[0]
    best = silhouette.nan_to_num(-2).argmax()  # the k of the highest silhouette fell short
    assert silhouette[best] - gaussian[best] < MIN_GAIN


def test_columns_standardisation_is_per_column(three_classes):
    vectors, classes, _ = three_classes
    scaled = vectors * torch.linspace(0.01, 100, vectors.shape[1])
    found = discover_strategies(scaled, classes, seed=0, standardise="columns")
    assert torch.allclose(found.standardised(scaled).std(0, unbiased=False), torch.ones(12))
    assert found.k == {0: 3, 1: 1, 2: 2}


def test_small_groups_are_not_strategies(one_thread):
    vectors = torch.cat([_blobs([100], 6, seed=4), 50 + torch.zeros(3, 6)])
    classes = torch.zeros(103, dtype=torch.long)
    assert discover_strategies(vectors, classes, seed=0, min_size=5).k == {0: 1}
    assert discover_strategies(vectors, classes, seed=0, min_size=3).k == {0: 2}


def test_same_seed_same_strategies(three_classes):
    vectors, classes, _ = three_classes
    a, b = (discover_strategies(vectors, classes, seed=3) for _ in range(2))
    assert torch.equal(a.assignment, b.assignment) and torch.equal(a.centres, b.centres)


def test_round_trip_through_safetensors(three_classes):
    vectors, classes, _ = three_classes
    found = discover_strategies(vectors, classes, seed=0)
    tensors, settings = found.tensors()
    back = Strategies.from_tensors(load(save(tensors)), settings)
    for name in ("classes", "centres", "mean", "scale", "assignment", "fitted"):
        assert torch.equal(getattr(back, name), getattr(found, name))
    assert torch.equal(back.criterion.isnan(), found.criterion.isnan())
    assert (
        back.settings
        == found.settings
        == {
            "seed": 0,
            "k_max": 8,
            "min_gain": MIN_GAIN,
            "min_size": 5,
            "standardise": "global",
        }
    )
    assert torch.equal(back.assign(vectors, classes), found.assignment)
    with pytest.raises(ValueError, match=r"^strategies: tensors missing: centres$"):
        Strategies.from_tensors({k: v for k, v in tensors.items() if k != "centres"}, settings)


@pytest.mark.parametrize(
    ("vectors", "classes", "message"),
    [
        (torch.tensor([[0.0, float("nan")]]), torch.tensor([0]), "vectors hold NaN or infinite"),
        (
            torch.zeros(4),
            torch.zeros(4, dtype=torch.long),
            r"vectors must be N x D, got shape \(4,\)",
        ),
        (
            torch.zeros(4, 2),
            torch.zeros(3, dtype=torch.long),
            r"classes must have shape \(4,\) for 4",
        ),
        (torch.zeros(2, 2), torch.zeros(2), "classes must be integers, got torch.float32"),
        (torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), "no vectors to find strategies in"),
    ],
)
def test_bad_input_is_refused(vectors, classes, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        discover_strategies(vectors, classes)


def test_bad_settings_are_refused(three_classes):
    vectors, classes, _ = three_classes
    with pytest.raises(
        ValueError, match=r"^unknown standardise 'z'; choose one of columns, global$"
    ):
        discover_strategies(vectors, classes, standardise="z")
    with pytest.raises(ValueError, match=r"^k_max and min_size must be >= 1 and min_gain"):
        discover_strategies(vectors, classes, k_max=0)
    found = discover_strategies(vectors, classes)
    with pytest.raises(ValueError, match=r"^vectors have 3 columns, the strategies 12$"):
        found.assign(vectors[:, :3], classes)


def test_ledoit_wolf_shrinkage_is_scikit_learns(one_thread):
    from sklearn.covariance import ledoit_wolf_shrinkage as reference

    for n, d in ((30, 80), (200, 5)):
        x = torch.randn(n, d, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
        x[:, : d // 2] *= 3
        x = x - x.mean(0)
        assert ledoit_wolf_shrinkage(x) == pytest.approx(reference(x.numpy()), rel=1e-9)


def test_a_separator_cuts_two_separable_strategies_of_one_class(one_thread):
    generator = torch.Generator().manual_seed(0)
    # two groups of one class in a 3 x 4 x 4 feature space, apart along a direction that is
    # not the axis of largest variance; a second class with two strategies of its own
    direction = torch.randn(48, generator=generator)
    noise = torch.randn(120, 48, generator=generator) * torch.linspace(0.1, 4.0, 48)
    first = noise[:60] + 2.0 * direction
    second = noise[60:] - 2.0 * direction
    other = _blobs([30, 30], 48, seed=9)
    features = torch.cat([first, second, other]).reshape(-1, 3, 4, 4)
    strategy = torch.tensor([4] * 60 + [2] * 60 + [5] * 30 + [7] * 30)
    classes = torch.tensor([1] * 120 + [0] * 60)
    q = strategy_separators(features, strategy, classes)
    assert strategy_pairs(strategy, classes).tolist() == [[2, 4], [5, 7]]
    assert q.weight.shape == (2, 3, 4, 4) and q.top_classes.eq(SEPARATOR_CLASSES).all()
    sides = (features.flatten(1) @ q.weight.flatten(1).T + q.bias).sign()
    # pair (2, 4): strategy 2 (rows 60..119) on the positive side, strategy 4 on the negative
    assert sides[60:120, 0].eq(1).all() and sides[:60, 0].eq(-1).all()
    assert sides[120:150, 1].eq(1).all() and sides[150:, 1].eq(-1).all()


def test_no_pair_no_separator(one_thread):
    q = strategy_separators(
        torch.ones(4, 2, 1, 1), torch.tensor([0, 0, 1, 2]), torch.tensor([0, 0, 1, 2])
    )
    assert len(q) == 0 and q.weight.shape == (0, 2, 1, 1)


def test_separator_input_is_checked(one_thread):
    features, classes = torch.zeros(4, 2, 1, 1), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"^strategy 0 holds rows of classes 0 and 1$"):
        strategy_separators(features, torch.zeros(4, dtype=torch.long), classes)
    with pytest.raises(ValueError, match=r"^features must be N x K x h x w, got shape \(4, 2\)$"):
        strategy_separators(features.flatten(1), torch.tensor([0, 0, 1, 1]), classes)
    with pytest.raises(ValueError, match=r"^features hold NaN or infinite values$"):
        strategy_separators(features * np.nan, torch.tensor([0, 0, 1, 1]), classes)
