"""The groupings below the class on hand-built cases whose groups are known."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from repinterp.evaluation.groupings import ami
from repinterp.evaluation.subclass import (
    domino_groups,
    eigengap_k,
    gap_groups,
    gap_k,
    groups_per_class,
    kmeans_groups,
    matched_k,
    pcx_groups,
    polytope_grouping,
    spray_groups,
)


def _blobs(per: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two classes of two sub-concepts each: points around (+-6, 0, 0, 0) for class 0 and
    (0, +-6, 0, 0) for class 1 (unit noise); sub-concept = 2 * class + which blob."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[6.0, 0, 0, 0], [-6, 0, 0, 0], [0, 6, 0, 0], [0, -6, 0, 0]])
    concepts = torch.arange(4).repeat_interleave(per)
    points = centres[concepts] + torch.randn(len(concepts), 4, generator=g)
    return points, concepts // 2, concepts


def _check_recovers(grouping, classes, concepts) -> None:
    assert ami(grouping.unseen.tolist(), concepts, classes) == pytest.approx(1.0)
    for g in np.unique(grouping.unseen):  # a group holds one predicted class
        assert len(np.unique(classes.numpy()[grouping.unseen == g])) == 1
    assert grouping.k == {0: 2, 1: 2}


def test_matched_k_counts_the_sub_concepts_of_each_class() -> None:
    assert matched_k([0, 1, 1, 2, 2, 2], [0, 0, 0, 1, 1, 1]) == {0: 2, 1: 1}


def test_groups_per_class_is_the_mean_effective_count_within_a_class() -> None:
    # class 0: two equal groups (2); class 1: one group of 3 (1); unequal class sizes
    assert groups_per_class([5, 5, 6, 6, 7, 7, 7], [0, 0, 0, 0, 1, 1, 1]) == pytest.approx(1.5)
    uneven = groups_per_class([0, 0, 0, 1], [0, 0, 0, 0])
    assert 1 < uneven < 2


def test_kmeans_finds_the_blobs_of_each_class() -> None:
    ref, ref_classes, ref_concepts = _blobs(30, 0)
    new, classes, concepts = _blobs(10, 1)
    k = matched_k(ref_concepts, ref_classes)
    grouping = kmeans_groups(ref, ref_classes, new, classes, k)
    _check_recovers(grouping, classes, concepts)
    assert ami(grouping.reference.tolist(), ref_concepts, ref_classes) == pytest.approx(1.0)


def test_gap_statistic_counts_blobs_and_one_gaussian_is_one() -> None:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, 5)) * 10
    three = np.concatenate([c + rng.standard_normal((40, 5)) for c in centres])
    assert gap_k(three, seed=0) == 3
    assert gap_k(rng.standard_normal((120, 5)), seed=0) == 1
    assert gap_k(three, k_max=2, seed=0) == 2  # the budget caps it
    with pytest.raises(ValueError, match=r"^k_max and draws must be >= 1, got 0 and 5$"):
        gap_k(three, k_max=0)


def test_gap_and_domino_find_the_blobs_of_each_class_without_k() -> None:
    ref, ref_classes, _ = _blobs(30, 0)
    new, classes, concepts = _blobs(10, 1)
    _check_recovers(gap_groups(ref, ref_classes, new, classes), classes, concepts)
    # Domino's embeddings are unit vectors: blobs in four directions (12 dimensions), not
    # around one point (a blob then lies on an arc, which the BIC splits)
    g = torch.Generator().manual_seed(0)
    directions = 10 * torch.eye(12)[:4]
    ref = directions[torch.arange(4).repeat_interleave(30)] + 0.5 * torch.randn(
        120, 12, generator=g
    )
    new = directions[concepts] + 0.5 * torch.randn(len(concepts), 12, generator=g)
    _check_recovers(domino_groups(ref, ref_classes, new, classes), classes, concepts)


def test_eigengap_counts_the_blocks_of_a_graph() -> None:
    blocks = torch.block_diag(torch.ones(5, 5), torch.ones(4, 4), torch.ones(6, 6)).numpy()
    np.fill_diagonal(blocks, 0)
    assert eigengap_k(blocks) == 3
    assert eigengap_k(np.ones((6, 6)) - np.eye(6)) == 1


def _maps(per: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Heat maps 16 x 16: sub-concept 0 / 2 hot in the top-left quarter, 1 / 3 in the
    bottom-right, plus noise; class = sub-concept // 2."""
    g = torch.Generator().manual_seed(seed)
    concepts = torch.arange(4).repeat_interleave(per)
    maps = 0.2 * torch.rand(len(concepts), 16, 16, generator=g)
    maps[concepts % 2 == 0, :8, :8] += 1
    maps[concepts % 2 == 1, 8:, 8:] += 1
    return maps, concepts // 2, concepts


def test_spray_finds_the_two_heat_map_patterns_by_the_eigengap() -> None:
    ref, ref_classes, _ = _maps(25, 0)
    new, classes, concepts = _maps(8, 1)
    _check_recovers(spray_groups(ref, ref_classes, new, classes), classes, concepts)
    one = spray_groups(ref, ref_classes, new, classes, k=1)
    assert one.k == {0: 1, 1: 1} and len(np.unique(one.unseen)) == 2


def test_pcx_finds_the_relevance_directions_whatever_their_scale() -> None:
    """Sub-concept j's relevance is along axis j (plus noise), scaled by 0.1 to 10: the
    mixture over unit vectors separates the directions, with k given or by BIC."""

    def relevance(per: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        concepts = torch.arange(4).repeat_interleave(per)
        vectors = torch.eye(4)[concepts] + 0.05 * torch.randn(len(concepts), 4, generator=g)
        scale = 10 ** (2 * torch.rand(len(concepts), 1, generator=g) - 1)
        return vectors * scale, concepts // 2, concepts

    ref, ref_classes, _ = relevance(30, 0)
    new, classes, concepts = relevance(10, 1)
    _check_recovers(pcx_groups(ref, ref_classes, new, classes, k=2), classes, concepts)
    _check_recovers(pcx_groups(ref, ref_classes, new, classes), classes, concepts)


def test_polytope_grouping_numbers_the_distinct_polytopes() -> None:
    def fake(c: int, boundaries: list[int], projections: list[float]) -> SimpleNamespace:
        return SimpleNamespace(
            predicted_class=c,
            boundary_ids=torch.tensor(boundaries),
            projections=torch.tensor(projections),
        )

    same = fake(0, [2, 0], [1.0, -1.0, -3.0])
    labels = polytope_grouping(
        [same, fake(0, [0, 2], [2.0, 5.0, -1.0]), fake(0, [0, 2], [2.0, 5.0, 1.0]), same]
    )
    assert labels.tolist() == [0, 0, 1, 0]  # the order of P's boundaries does not matter
