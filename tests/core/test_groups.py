"""What RI finds: images grouped by their polytope (distinct polytopes, effective groups,
largest group per class, singletons, sub-concept purity), on hand-built covers and on regions."""

from __future__ import annotations

import math

import pytest
import torch

from repinterp.core.groups import GroupStats, polytope_groups, polytope_key
from repinterp.core.interpretation import Interpretation

from ..networks import fit_random

pytestmark = pytest.mark.usefixtures("one_thread")


def _cover(predicted_class: int, boundaries: list[int], signs: list[int]) -> Interpretation:
    """An interpretation with ``P = boundaries`` (in that order) and the input on ``signs``'
    sides of them, |Q| = 4; what `polytope_key` reads is all that is real."""
    projections = torch.full((4,), 0.5)
    projections[boundaries] = torch.tensor(signs, dtype=torch.float32)
    return Interpretation(
        predicted_class=predicted_class,
        score=1.0,
        boundaries=torch.tensor(boundaries, dtype=torch.long),
        covered=torch.arange(3),
        delta=0,
        conflicts=0,
        projections=projections,
        channel_weights=torch.zeros(len(boundaries), 2),
        n_reference=10,
        interpreter=None,
    )


# Ten images, four polytopes: A (class 0) five times, once as B (A's boundaries chosen in the
# other order); C (class 0) once; D (class 1, A's boundaries and sides) three times; E once.
A, B, C = _cover(0, [0, 2], [1, -1]), _cover(0, [2, 0], [-1, 1]), _cover(0, [1], [1])
D, E = _cover(1, [0, 2], [1, -1]), _cover(1, [3], [-1])
IMAGES = [A, A, A, A, B, C, D, D, D, E]
SUBCONCEPTS = torch.tensor([0, 0, 0, 1, 0, 1, 2, 2, 3, 3])


def test_the_key_is_the_class_and_the_sides_whatever_the_order() -> None:
    assert polytope_key(A) == polytope_key(B) == (0, ((0, 1), (2, -1)))
    assert polytope_key(D) != polytope_key(A)  # another class: another polytope
    assert polytope_key(_cover(0, [0, 2], [1, 1])) != polytope_key(A)  # another side


def test_statistics_of_hand_built_covers() -> None:
    stats = polytope_groups(IMAGES, SUBCONCEPTS)
    assert (stats.images, stats.classes, stats.distinct_polytopes, stats.singletons) == (
        10,
        2,
        4,
        2,
    )
    # group sizes 5, 1, 3, 1 of 10
    entropy = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 2 * 0.1 * math.log(0.1))
    assert stats.effective_groups == pytest.approx(math.exp(entropy))
    assert stats.largest_group_share == pytest.approx((5 / 6 + 3 / 4) / 2)
    # majorities: A 4 of 5 (sub-concept 0), C 1, D 2 of 3, E 1; per class: 4 of 6, 2 of 4
    assert stats.subconcept_purity == pytest.approx(8 / 10)
    assert stats.subconcept_purity_class == pytest.approx(6 / 10)
    assert stats.to_dict() == pytest.approx(
        {
            "distinct_polytopes": 4,
            "effective_groups": math.exp(entropy),
            "largest_group_share": 100 * 19 / 24,
            "singletons": 2,
            "subconcept_purity": 80.0,
            "subconcept_purity_class": 60.0,
        }
    )


def test_without_subconcepts_no_purity_is_reported() -> None:
    stats = polytope_groups(IMAGES)
    assert stats.subconcept_purity is None and stats.subconcept_purity_class is None
    assert "subconcept_purity" not in stats.to_dict()


def test_extremes_one_polytope_per_class_and_one_per_image() -> None:
    per_class = polytope_groups([A] * 3 + [D] * 2)
    assert (per_class.distinct_polytopes, per_class.singletons) == (2, 0)
    assert per_class.largest_group_share == 1.0
    assert per_class.effective_groups == pytest.approx(
        math.exp(-(0.6 * math.log(0.6) + 0.4 * math.log(0.4)))
    )
    per_image = polytope_groups([A, C, D, E])
    assert per_image.effective_groups == pytest.approx(4.0)
    assert per_image.singletons == 4 and per_image.largest_group_share == 0.5


def test_the_sentence_says_what_ri_finds() -> None:
    assert polytope_groups([A] * 3 + [D] * 2).sentence() == (
        "2 polytopes for 2 classes: at this layer RI finds one decision region per class"
    )
    assert polytope_groups(IMAGES).sentence() == (
        "4 polytopes for 2 classes (3.2 effective groups, the largest of a class holding 79 % "
        "of its images, 2 of one image): at this layer RI finds mostly one decision region per "
        "class"
    )
    assert (
        polytope_groups([A, C, D, E])
        .sentence()
        .endswith("RI finds several decision regions per class")
    )


def test_bad_input_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="at least one interpretation"):
        polytope_groups([])
    with pytest.raises(ValueError, match="subconcepts must be 10 integers"):
        polytope_groups(IMAGES, SUBCONCEPTS[:9])
    with pytest.raises(ValueError, match="subconcepts must be 10 integers"):
        polytope_groups(IMAGES, SUBCONCEPTS.float())


@pytest.fixture(scope="module")
def fitted():
    """Regions of a random interpreter, and the images it was fitted on."""
    ri, pictures = fit_random(200, 10, keep_features=True)
    return pictures, ri.regions(n_regions=12, seed=0)


def test_reference_assignment_is_assign_on_the_reference_images(fitted) -> None:
    pictures, regions = fitted
    expected = regions.assign(pictures)
    found = regions.reference_assignment()
    assert torch.equal(found.region.cpu(), expected.region.cpu())
    assert torch.equal(found.covered.cpu(), expected.covered.cpu())
    assert 0 < int(found.covered.sum()) < len(pictures)  # both branches are exercised


def test_region_set_groups_by_polytope_not_by_region(fitted) -> None:
    pictures, regions = fitted
    region = regions.assign(pictures).region.cpu()
    stats = regions.group_stats()
    assert isinstance(stats, GroupStats) and stats.images == len(pictures)
    assert stats == polytope_groups([regions.regions[v] for v in region.tolist()])
    used = {polytope_key(regions.regions[v]) for v in region.unique().tolist()}
    assert stats.distinct_polytopes == len(used) <= len(regions)
    labels = torch.arange(len(pictures)) % 3
    assert regions.group_stats(region[:50], labels[:50]) == polytope_groups(
        [regions.regions[v] for v in region[:50].tolist()], labels[:50]
    )
