"""ACE baseline: segmentation rules, patches, concept tests, reuse and the 20% rule."""

from collections import OrderedDict
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from repinterp.evaluation.ace import (
    ACE,
    GREY_FILL,
    assign_to_concepts,
    grey_patch,
    keep_segments,
    passes_spread_test,
    segment,
    slic_label_maps,
    tcav_score,
    unique_segments,
)

from ..networks import normalize


def tiny_cnn(seed: int = 0, classes: int = 3) -> nn.Sequential:
    """3 x 32 x 32 input; target layer "conv2" (8 x 16 x 16), followed by an in-place ReLU."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(
            OrderedDict(
                conv1=nn.Conv2d(3, 8, 3, padding=1),
                relu1=nn.ReLU(),
                pool=nn.MaxPool2d(2),
                conv2=nn.Conv2d(8, 8, 3, padding=1),
                relu2=nn.ReLU(inplace=True),
                flatten=nn.Flatten(),
                fc=nn.Linear(8 * 16 * 16, classes),
            )
        )


def squares(n: int, seed: int, size: int = 32) -> torch.Tensor:
    """N x 3 x size x size: a flat background and two coloured squares, slight noise."""
    rng = np.random.default_rng(seed)
    images = np.empty((n, 3, size, size))
    for image in images:
        image[:] = rng.uniform(0.2, 0.8, (3, 1, 1))
        for _ in range(2):
            side = rng.integers(size // 4, size // 2)
            top, left = rng.integers(0, size - side, 2)
            image[:, top : top + side, left : left + side] = rng.uniform(0, 1, (3, 1, 1))
    images += rng.normal(0, 0.02, images.shape)
    return torch.from_numpy(images.clip(0, 1)).float()


def _keys_to_masks(label_maps, keys):
    return [(r, label_maps[r] == label) for r, label in keys]


# --- segmentation ------------------------------------------------------------------------------


def test_unique_segments_applies_area_and_jaccard_rules_with_labels_from_one():
    coarse = np.ones((32, 32), dtype=np.int64)
    coarse[:, 16:] = 2  # left half 1, right half 2: labels start at 1, the last is kept
    fine = np.full((32, 32), 2)
    fine[:16, :16] = 1  # top-left quadrant: Jaccard with the left half exactly 0.5 -> kept
    fine[:, 16:] = 3  # right half but one pixel: Jaccard 511/512 -> duplicate
    fine[0, 31] = 4  # 1 pixel = 0.098% of the image -> too small
    fine[31, 0:2] = 5  # 2 pixels = 0.195% -> kept
    keys = unique_segments([coarse, fine])
    assert keys == [(0, 1), (0, 2), (1, 1), (1, 2), (1, 5)]


def test_unique_segments_compares_only_with_earlier_resolutions():
    # Two resolutions that are the same map: the second adds nothing.
    labels = np.arange(1, 65).reshape(8, 8).repeat(4, 0).repeat(4, 1)
    assert unique_segments([labels, labels]) == [(0, int(label)) for label in range(1, 65)]


@pytest.mark.parametrize("channels", [3, 1])
def test_segment_on_two_squares_follows_the_rules(channels):
    image = squares(1, seed=3)[0]
    if channels == 1:
        image = image.mean(0, keepdim=True)
    label_maps = slic_label_maps(image)
    assert label_maps.shape == (3, 32, 32) and label_maps.min() == 1
    keys = unique_segments(label_maps)
    masks = _keys_to_masks(label_maps, keys)
    assert all(mask.mean() > 0.001 for _, mask in masks)
    for r, mask in masks:
        for r_earlier, earlier in masks:
            if r_earlier < r:
                assert (mask & earlier).sum() <= 0.5 * (mask | earlier).sum()
    # The first resolution has no earlier one: every label SLIC returned is there, the last too.
    first = [label for r, label in keys if r == 0]
    assert first == [int(label) for label in np.unique(label_maps[0])]
    assert [m.tolist() for m in segment(image)] == [m.tolist() for _, m in masks]


def test_segment_of_a_grey_image_matches_its_rgb_copy():
    grey = squares(1, seed=4)[0].mean(0, keepdim=True)
    as_grey = segment(grey)
    as_rgb = segment(grey.expand(3, -1, -1))
    assert len(as_grey) == len(as_rgb)
    assert all(np.array_equal(a, b) for a, b in zip(as_grey, as_rgb, strict=True))


# --- patches -----------------------------------------------------------------------------------


def test_grey_patch_fills_outside_the_segment_and_crops_to_the_bounding_box():
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))
    mask = np.zeros((32, 32), dtype=bool)
    mask[3:8, 10:17] = True  # bounding box rows 3..7, cols 10..16 (5 x 7), inclusive
    mask[3:5, 10:12] = False  # an L-shape: the box's corner is outside the segment
    patch = grey_patch(image, mask, size=(5, 7))  # no resizing
    inside = torch.from_numpy(mask[3:8, 10:17])
    assert torch.equal(patch[:, inside], image[:, 3:8, 10:17][:, inside])
    assert torch.all(patch[:, ~inside] == torch.tensor(117 / 255))
    assert GREY_FILL == 117 / 255


def test_grey_patch_is_resized_to_the_input_size_by_pils_bicubic():
    image = torch.rand(1, 32, 32, generator=torch.Generator().manual_seed(1))
    mask = np.zeros((32, 32), dtype=bool)
    mask[4:13, 7:20] = True
    mask[4, 7] = False
    patch = grey_patch(image, mask)
    assert patch.shape == (1, 32, 32) and patch.min() >= 0 and patch.max() <= 1
    crop = torch.where(torch.from_numpy(mask), image[0], GREY_FILL)[4:13, 7:20].numpy()
    pil = np.array(Image.fromarray(crop, mode="F").resize((32, 32), Image.BICUBIC))
    np.testing.assert_allclose(patch[0].numpy(), pil.clip(0, 1), atol=1e-5)


def test_grey_patch_of_one_pixel_is_that_pixel():
    image = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(2))
    mask = np.zeros((8, 8), dtype=bool)
    mask[7, 7] = True  # the last row and column belong to the bounding box
    patch = grey_patch(image, mask, size=(4, 4))
    assert torch.allclose(patch, image[:, 7:8, 7:8].expand(3, 4, 4))


# --- concept tests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "u", "n_discovery", "expected"),
    [
        (10, 6, 100, True),  # u > 0.5 n
        (10, 5, 100, False),  # u = 0.5 n, not above; too few images for the other rules
        (10, 3, 8, True),  # u > 0.25 n and u > 0.25 D
        (12, 3, 8, False),  # u = 0.25 n
        (10, 3, 12, False),  # u = 0.25 D
        (20, 3, 4, True),  # u > 0.1 n and u > 0.5 D
        (30, 3, 4, False),  # u = 0.1 n
        (20, 3, 6, False),  # u = 0.5 D
    ],
)
def test_spread_test_branches(n, u, n_discovery, expected):
    image_numbers = np.arange(n) % u
    assert passes_spread_test(image_numbers, n_discovery) is expected


def test_tcav_counts_positive_derivatives_along_the_concept():
    rng = np.random.default_rng(0)
    axis = np.array([1.0, 0.0, 0.0])
    concept = rng.normal(0, 0.1, (20, 3)) + axis
    random = rng.normal(0, 0.1, (20, 3)) - axis
    toward = np.tile([1.0, 0.2, 0.0], (7, 1))
    score, accuracy = tcav_score(concept, random, toward, seed=0)
    assert score == 1.0 and accuracy == 1.0
    assert tcav_score(concept, random, -toward, seed=0)[0] == 0.0
    mixed = np.concatenate([toward[:3], -toward[:4]])
    assert tcav_score(concept, random, mixed, seed=0)[0] == pytest.approx(3 / 7)


@pytest.mark.parametrize("output", ["logit", "log_prob"])
def test_gradients_are_of_the_class_output_at_the_target_layer(output):
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(flatten=nn.Flatten(), fc=nn.Linear(12, 3)))
    images = torch.rand(5, 3, 2, 2)
    ace = ACE(model, "flatten", None, tcav_output=output)
    gradients = ace._gradients(images, target_class=1)
    weights = model.fc.weight.detach()
    if output == "logit":
        expected = weights[1].expand(5, -1)
    else:
        probs = torch.softmax(model(images), 1).detach()
        expected = weights[1] - probs @ weights
    np.testing.assert_allclose(gradients, expected.numpy(), rtol=1e-5, atol=1e-6)


# --- reuse -------------------------------------------------------------------------------------


def test_assign_to_concepts_drops_segments_outside_every_radius():
    centres = np.array([[0.0, 0.0], [10.0, 0.0]])
    radii = np.array([1.0, 3.0])
    features = np.array([[0.5, 0.0], [8.0, 0.0], [5.0, 0.0], [1.0, 0.0], [0.0, 5.0]])
    assert assign_to_concepts(features, centres, radii).tolist() == [0, 1, -1, 0, -1]
    assert assign_to_concepts(features, centres[:0], radii[:0]).tolist() == [-1] * 5


def test_assign_to_concepts_takes_the_nearest_centre_once_inside_any_radius():
    centres = np.array([[0.0], [10.0]])
    # 3 is outside concept 0's radius 1 but inside concept 1's 20; concept 0 is nearer.
    assert assign_to_concepts(np.array([[3.0]]), centres, np.array([1.0, 20.0])).tolist() == [0]


def _rect(top, left, height, width, size=10):
    mask = np.zeros((size, size), dtype=bool)
    mask[top : top + height, left : left + width] = True
    return mask


def test_keep_segments_in_importance_order_stops_right_after_crossing():
    a, b, c, d = _rect(0, 0, 1, 10), _rect(1, 0, 1, 5), _rect(2, 0, 3, 10), _rect(9, 0, 1, 5)
    # Importance a > (b = c) > d; c is larger than b, so c comes second: 10, then 40 > 20.
    kept = keep_segments([a, b, c, d], [0.9, 0.5, 0.5, 0.1], fraction=0.2)
    assert np.array_equal(kept, a | c)


def test_keep_segments_needs_more_than_the_fraction_and_counts_overlaps_once():
    a, b = _rect(0, 0, 2, 10), _rect(5, 0, 1, 1)
    assert np.array_equal(keep_segments([a, b], [1.0, 0.5]), a | b)  # 20 is not > 20
    inner, c = _rect(0, 0, 1, 10), _rect(6, 0, 1, 10)
    big = _rect(0, 0, 1, 10) | _rect(1, 0, 1, 5)  # 15 pixels, holding all of inner
    kept = keep_segments([big, inner, c], [0.9, 0.8, 0.1])
    assert np.array_equal(kept, big | c) and kept.sum() == 25
    # All segments together not enough: all are kept.
    assert np.array_equal(keep_segments([b, _rect(7, 0, 1, 3)], [1, 1]), b | _rect(7, 0, 1, 3))


# --- end to end --------------------------------------------------------------------------------


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_fit_and_keep_masks_end_to_end():
    model = tiny_cnn().train()
    discovery = squares(12, seed=0)
    random_images = squares(30, seed=1)
    ace = ACE(model, "conv2", normalize, min_imgs=3, max_imgs=10, n_random=3, p_value=1.0)
    ace.fit(discovery, target_class=1, random_images01=random_images)
    assert _hooks(model) == 0 and all(m.training for m in model.modules())
    assert ace.target_class == 1 and ace.random_tcav_scores.shape == (3,)
    assert ace.candidates and len(ace.concepts) == len(ace.candidates)  # p_value = 1 keeps all
    importance = [c.importance for c in ace.concepts]
    assert importance == sorted(importance, reverse=True)
    for concept in ace.concepts:
        m = len(concept.member_images)
        assert 3 < concept.size and m == min(10, concept.size)
        assert concept.member_masks.shape == (m, 32, 32) and concept.centre.shape == (8,)
        assert concept.radius >= 0 and concept.tcav_scores.shape == (3,)
        assert 0 <= concept.importance <= 1
    new = squares(3, seed=2)
    keep = ace.keep_masks(new)
    assert _hooks(model) == 0 and all(m.training for m in model.modules())
    assert keep.dtype == torch.bool and keep.shape == (3, 32, 32)
    # Segments near no concept are dropped, so fewer than 20% may be left; with every segment
    # inside a concept, more than 20% is kept.
    near = ACE(model, "conv2", normalize)
    near.input_shape = ace.input_shape
    near.concepts = [replace(c, radius=np.inf) for c in ace.concepts]
    assert torch.all(near.keep_masks(new).float().mean((1, 2)) > 0.2)
    # Same seed, same result.
    again = ACE(model, "conv2", normalize, min_imgs=3, max_imgs=10, n_random=3, p_value=1.0)
    again.fit(discovery, target_class=1, random_images01=random_images)
    assert [c.importance for c in again.concepts] == importance
    assert torch.equal(again.keep_masks(new), keep)


def test_no_concept_keeps_nothing_and_the_majority_class_is_explained():
    model = tiny_cnn().eval()
    images = squares(4, seed=5)
    ace = ACE(model, model.conv2, normalize, n_concepts=5, min_imgs=10_000, n_random=2)
    ace.fit(images)  # random sets of discovery patches
    assert ace.random_tcav_scores.shape == (2,)
    predicted = model(normalize(images)).argmax(1)
    assert ace.target_class == int(torch.bincount(predicted).argmax())
    assert ace.candidates == [] and ace.concepts == []
    assert not ace.keep_masks(images).any()


def test_hooks_are_released_when_a_forward_pass_fails():
    model = tiny_cnn()
    ace = ACE(model, "conv2", lambda x: x[:, :1], min_imgs=3, max_imgs=6, n_random=2)
    with pytest.raises(RuntimeError):
        ace.fit(squares(4, seed=6), target_class=0)
    assert _hooks(model) == 0


def test_bad_arguments_are_refused():
    model = tiny_cnn()
    with pytest.raises(ValueError, match="n_random"):
        ACE(model, "conv2", None, n_random=1)
    with pytest.raises(ValueError, match="not part of the model"):
        ACE(model, nn.ReLU(), None)
    with pytest.raises(ValueError, match="is not a module of the model"):
        ACE(model, "conv9", None)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ACE(model, "conv2", None).fit(squares(2, seed=0) * 2)
    with pytest.raises(RuntimeError, match="fit"):
        ACE(model, "conv2", None).keep_masks(squares(1, seed=0))
    fitted = ACE(model, "conv2", None, n_concepts=2, min_imgs=10_000, n_random=2)
    fitted.fit(squares(2, seed=0), target_class=0)
    assert fitted.input_shape == (3, 32, 32)
    with pytest.raises(ValueError, match="channels"):
        fitted.keep_masks(squares(1, seed=0)[:, :1])
