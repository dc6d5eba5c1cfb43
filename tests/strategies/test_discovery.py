"""A class's strategies (strategies/discovery.py): discovery without labels, cell bisectors."""

import numpy as np
import pytest
import torch
from safetensors.torch import load, save

from repinterp.strategies.discovery import (
    MIN_GAIN,
    SEPARATOR_CLASSES,
    Strategies,
    cell_bisectors,
    discover_strategies,
    mean_silhouette,
    strategy_pairs,
)
from repinterp.strategies.granularity import bisector_boundaries, strategy_vectors


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


@pytest.mark.filterwarnings("error")  # nor a k-means warning of fewer distinct points than k
def test_a_class_of_one_picture_or_one_image_is_one_strategy(one_thread):
    """Issue 44, item 3: a class whose images are all one picture ended in scikit-learn's
    "Number of labels is 1"."""
    vectors = torch.cat([torch.ones(20, 6), _blobs([1, 30, 30], 6, seed=4)])
    classes = torch.tensor([0] * 20 + [1] + [2] * 60)
    found = discover_strategies(vectors, classes, seed=0)
    assert found.k == {0: 1, 1: 1, 2: 2}
    assert found.assignment[:21].tolist() == [0] * 20 + [1]
    assert found.criterion[:2].isnan().all()  # no split tried in either


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


@pytest.mark.parametrize("standardise", ["global", "columns"])
def test_bisectors_are_the_cells_of_assign(three_classes, standardise):
    """Brute force: a row's side of each bisector of its class is whether it is nearer the
    first centre of the pair, so the rows `assign` puts in a strategy are exactly those on its
    side of all its bisectors."""
    vectors, classes, _ = three_classes
    found = discover_strategies(vectors, classes, standardise=standardise)
    pairs, u, c = cell_bisectors(found)
    assert pairs.tolist() == [[0, 1], [0, 2], [1, 2], [4, 5]]  # class 0: 0-2, class 2: 4, 5
    new = vectors + torch.randn(vectors.shape, generator=torch.Generator().manual_seed(3))
    assigned = found.assign(new, classes)
    z = found.standardised(new).double()
    for (a, b), weight, bias in zip(pairs.tolist(), u, c, strict=True):
        own = classes == int(found.classes[a])
        side = new.double() @ weight + bias > 0
        nearer = (z - found.centres[a].double()).norm(dim=1) < (z - found.centres[b].double()).norm(
            dim=1
        )
        assert torch.equal(side[own], nearer[own])
        assert bool(side[assigned == a].all()) and not bool(side[assigned == b].any())


@pytest.mark.parametrize("kind", ["features", "pooled"])
def test_bisectors_on_feature_maps_equal_those_on_vectors(one_thread, kind):
    generator = torch.Generator().manual_seed(1)
    maps = torch.randn(90, 3, 2, 2, generator=generator)
    maps[:45, 0] += 6.0
    classes = torch.zeros(90, dtype=torch.long)
    vectors = strategy_vectors(maps, kind)
    found = discover_strategies(vectors, classes, min_gain=-1)
    _, u, c = cell_bisectors(found)
    q = bisector_boundaries(found, (3, 2, 2), kind)
    assert q.top_classes.eq(SEPARATOR_CLASSES).all() and q.weight.shape == (len(u), 3, 2, 2)
    on_maps = maps.double().flatten(1) @ q.weight.flatten(1).T + q.bias
    assert torch.allclose(on_maps, vectors.double() @ u.T + c, atol=1e-9)


def test_one_strategy_a_class_no_bisector(one_thread):
    found = discover_strategies(_blobs([40], 4, seed=0), torch.zeros(40, dtype=torch.long))
    assert strategy_pairs(found.classes).shape == (0, 2)
    assert len(bisector_boundaries(found, (4, 1, 1), "features")) == 0


@pytest.mark.parametrize(("n", "k"), [(60, 2), (300, 4), (1500, 3)])
def test_mean_silhouette_is_scikit_learns(one_thread, n, k):
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(n)
    data = rng.standard_normal((n, 6))
    labels = rng.integers(0, k, n)
    labels[0] = k  # a group of one row
    data[labels == 1] += 3.0
    expected = silhouette_score(data, labels, sample_size=min(1000, n), random_state=4)
    assert mean_silhouette(data, labels, 4) == pytest.approx(expected, abs=1e-9)
    with pytest.raises(ValueError, match=r"^a silhouette needs 2 to n - 1 groups, got 1 of "):
        mean_silhouette(data, np.zeros(n, dtype=int), 0)
