"""What RI finds: images grouped by their polytope (distinct polytopes, effective groups,
largest group per class, singletons, sub-concept purity), on hand-built covers and on regions."""

from __future__ import annotations

import math

import pytest
import torch

from repinterp.core.groups import polytope_key
from repinterp.core.interpretation import Interpretation
from repinterp.evaluation.groupings import (
    GroupStats,
    ami,
    ami_ceiling,
    ami_null,
    majority_share,
    merged_groups,
    outside_main,
    polytope_groups,
    region_groups,
    within_class_null,
)

from ..networks import fit_random

pytestmark = pytest.mark.usefixtures("one_thread")


def _cover(
    predicted_class: int, boundaries: list[int], signs: list[int], covered: range = range(3)
) -> Interpretation:
    """An interpretation with ``P = boundaries`` (in that order) and the input on ``signs``'
    sides of them, |Q| = 4, covering the reference images ``covered``; what `polytope_key`
    and the groups read is all that is real."""
    projections = torch.full((4,), 0.5)
    projections[boundaries] = torch.tensor(signs, dtype=torch.float32)
    return Interpretation(
        predicted_class=predicted_class,
        score=1.0,
        boundary_ids=torch.tensor(boundaries, dtype=torch.long),
        covered=torch.tensor(list(covered), dtype=torch.long),
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
KEYS = [polytope_key(e) for e in IMAGES]
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
    # every hand-built polytope covers the same three reference images: one merged group
    assert (stats.merged_groups, stats.merged_effective_groups) == (1, 1.0)
    assert stats.ami == pytest.approx(ami(KEYS, SUBCONCEPTS, [key[0] for key in KEYS]))
    assert stats.to_dict() == pytest.approx(
        {
            "distinct_polytopes": 4,
            "effective_groups": math.exp(entropy),
            "largest_group_share": 100 * 19 / 24,
            "singletons": 2,
            "subconcept_purity": 80.0,
            "subconcept_purity_class": 60.0,
            "merged_groups": 1,
            "merged_effective_groups": 1.0,
            "ami": stats.ami,
            "ami_null": stats.ami_null[0],
            "ami_null_p95": stats.ami_null[1],
        }
    )


def test_without_subconcepts_no_purity_is_reported() -> None:
    stats = polytope_groups(IMAGES)
    assert stats.subconcept_purity is None and stats.subconcept_purity_class is None
    assert not {"subconcept_purity", "ami", "ami_null", "ami_ceiling"} & set(stats.to_dict())


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


def _set(values: range) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.long)


def test_merged_groups_join_covers_of_jaccard_at_least_0_9_transitively() -> None:
    # A ~ B at 20 / 21 = 0.95, B ~ C at 10 / 20 = 0.5 (A ~ C at 10 / 21): two groups
    a, b, c = _set(range(21)), _set(range(20)), _set(range(10))
    assert merged_groups([a, b, c]) == [0, 0, 1]
    assert merged_groups([c, a, b]) == [0, 1, 1]
    # A ~ B and B ~ C at 10 / 11 = 0.91, A ~ C at 9 / 11 = 0.82: one group through B
    a, b, c = _set(range(10)), _set(range(11)), _set(range(1, 11))
    assert merged_groups([a, c]) == [0, 1] and merged_groups([a, b, c]) == [0, 0, 0]
    assert merged_groups([a, b, c], threshold=0.95) == [0, 1, 2]
    assert merged_groups([]) == []
    with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\], got 0"):
        merged_groups([a], threshold=0)


def test_polytope_groups_merge_polytopes_that_cover_the_same_images() -> None:
    # three polytopes of class 0 (A ~ B, not C) and one of class 1, 2 + 2 + 1 + 1 images
    p = _cover(0, [0], [1], range(21))
    q = _cover(0, [1], [1], range(20))
    r = _cover(0, [2], [1], range(10))
    s = _cover(1, [3], [1], range(30, 40))
    stats = polytope_groups([p, p, q, q, r, s])
    assert (stats.distinct_polytopes, stats.merged_groups) == (4, 3)
    # merged sizes 4, 1, 1 of 6
    expected = math.exp(-(4 / 6 * math.log(4 / 6) + 2 * (1 / 6) * math.log(1 / 6)))
    assert stats.merged_effective_groups == pytest.approx(expected)


def test_ami_is_1_for_the_sub_concepts_and_about_0_for_independent_groups() -> None:
    generator = torch.Generator().manual_seed(0)
    classes = torch.arange(600) // 300  # two classes of 300 images
    concepts = 2 * classes + torch.randint(0, 2, (600,), generator=generator)
    named = [f"group {int(c)}" for c in (concepts + 1) % 4]  # the same partition, renamed
    assert ami(named, concepts, classes) == pytest.approx(1.0)
    independent = torch.randint(0, 3, (600,), generator=generator).tolist()
    assert abs(ami(independent, concepts, classes)) < 0.01
    # weighted by class size: 1 on a class of 300, about 0 on one of 900
    more = torch.cat([classes, torch.full((600,), 2)])
    concepts_more = torch.cat([concepts, 4 + torch.randint(0, 2, (600,), generator=generator)])
    groups = concepts.tolist() + torch.randint(0, 3, (600,), generator=generator).tolist()
    mixed = ami(groups[:300] + groups[600:], concepts_more[more != 1], more[more != 1])
    assert mixed == pytest.approx(300 / 900, abs=0.01)
    # a class whose images hold one sub-concept says nothing and is left out; none left: NaN
    one = torch.zeros(50, dtype=torch.long)
    assert ami(named + [0] * 50, torch.cat([concepts, 9 + one]), torch.cat([classes, 5 + one])) == (
        pytest.approx(1.0)
    )
    assert math.isnan(ami([0, 1, 0], [2, 2, 2], [0, 0, 0]))


def test_ami_null_shuffles_sub_concepts_within_classes() -> None:
    generator = torch.Generator().manual_seed(1)
    classes = torch.arange(400) // 200
    concepts = 2 * classes + torch.randint(0, 2, (400,), generator=generator)
    # one group per class: no shuffle within a class changes it, AMI 0 every time
    assert ami_null(classes.tolist(), concepts, classes, seed=3) == (0.0, 0.0)
    # groups that are the sub-concepts: AMI 1, but about 0 once the labels are shuffled
    mean, p95 = ami_null(concepts.tolist(), concepts, classes, draws=50, seed=3)
    assert abs(mean) < 0.01 and mean < p95 < 0.02
    assert ami_null(concepts.tolist(), concepts, classes, draws=50, seed=3) == (mean, p95)
    assert ami_null(concepts.tolist(), concepts, classes, draws=50, seed=4) != (mean, p95)


def test_ami_ceiling_is_k_means_with_k_sub_concepts_per_class() -> None:
    generator = torch.Generator().manual_seed(2)
    classes = torch.arange(300) // 100
    concepts = 2 * classes + (torch.arange(300) % 2)
    centres = 10 * torch.randn(6, 8, generator=generator)
    separated = centres[concepts] + torch.randn(300, 8, generator=generator)
    assert ami_ceiling(separated.view(300, 2, 2, 2), concepts, classes) == pytest.approx(1.0)
    noise = torch.randn(300, 8, generator=generator)
    assert abs(ami_ceiling(noise, concepts, classes, seed=1)) < 0.05


def test_images_outside_the_main_polytope_have_their_margin_and_errors() -> None:
    # class 0: A three times (main), C twice; class 1: D twice (main), E once
    a = _cover(0, [0], [1], range(10))
    c = _cover(0, [1], [1], range(5, 10))  # Jaccard with A: 5 / 10
    d = _cover(1, [2], [1], range(20, 24))
    e = _cover(1, [3], [1], range(20, 23))  # Jaccard with D: 3 / 4
    images = [a, a, a, c, c, d, d, e]
    keys = [polytope_key(i) for i in images]
    covers = {polytope_key(i): i.covered for i in (a, c, d, e)}
    margins = torch.tensor([9.0, 8.0, 7.0, 2.0, 4.0, 6.0, 10.0, 1.0])
    logits = torch.stack([margins, torch.zeros(8), torch.full((8,), -5.0)], 1)
    labels = torch.tensor([0, 0, 1, 1, 0, 0, 0, 1])  # wrong: one main, two outside
    found = outside_main(keys, covers, logits, labels)
    assert found == pytest.approx(
        {
            "outside_share": 100 * 3 / 8,
            "margin_main": 8.0,  # lower median of 9, 8, 7, 6, 10
            "margin_outside": 2.0,  # of 2, 4, 1
            "error_main": 100 / 5,
            "error_outside": 200 / 3,
            "jaccard_outside": 0.5,  # of 0.5, 0.5, 0.75
        }
    )
    stats = polytope_groups(images, logits=logits, labels=labels)
    assert stats.outside == found and set(found) <= set(stats.to_dict())
    with pytest.raises(ValueError, match="logits must have 8 rows, one per image, got 7"):
        polytope_groups(images, logits=logits[:7], labels=labels)


def test_ami_fields_of_polytope_groups() -> None:
    features = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    stats = polytope_groups(IMAGES, SUBCONCEPTS, features=features, seed=2)
    classes = [key[0] for key in KEYS]
    assert stats.ami == pytest.approx(ami(KEYS, SUBCONCEPTS, classes))
    assert stats.ami_null == ami_null(KEYS, SUBCONCEPTS, classes, seed=2)
    assert stats.ami_ceiling == pytest.approx(ami_ceiling(features, SUBCONCEPTS, classes, 2))
    assert {"ami", "ami_null", "ami_null_p95", "ami_ceiling"} <= set(stats.to_dict())


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
    stats = region_groups(regions)
    assert isinstance(stats, GroupStats) and stats.images == len(pictures)
    assert stats == polytope_groups([regions.regions[v] for v in region.tolist()])
    used = {polytope_key(regions.regions[v]) for v in region.unique().tolist()}
    assert stats.distinct_polytopes == len(used) <= len(regions)
    labels = torch.arange(len(pictures)) % 3
    assert region_groups(regions, region[:50], labels[:50]) == polytope_groups(
        [regions.regions[v] for v in region[:50].tolist()], labels[:50]
    )


def test_within_class_null_moves_labels_only_within_their_class() -> None:
    classes = [0] * 5 + [1] * 5
    concepts = [0, 0, 1, 1, 2, 3, 3, 3, 4, 4]
    seen = []
    values = within_class_null(
        lambda s: seen.append(s.copy()) or float(s[0]), concepts, classes, draws=20, seed=0
    )
    assert values.tolist() == [float(s[0]) for s in seen] and len(seen) == 20
    for shuffled in seen:
        assert sorted(shuffled[:5]) == concepts[:5] and sorted(shuffled[5:]) == concepts[5:]
    assert any(shuffled.tolist() != concepts for shuffled in seen)


def test_majority_share_is_the_share_with_their_groups_most_common_label() -> None:
    assert majority_share(["a", "a", "b"], [1, 1, 2]) == 1.0
    assert majority_share(["a", "a", "a", "b"], [1, 2, 2, 3]) == 0.75
