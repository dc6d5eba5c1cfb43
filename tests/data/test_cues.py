"""The planted cues (`repinterp.data.cues`) and the data sets built on them."""

import numpy as np
import pytest
import torch

from repinterp import data
from repinterp.data import cues

STYLE = cues.CueStyle(
    moving_side=3, stripe_period=4, stripe_amplitude=0.4, watermark=(3, 3, 8, 8), watermark_ring=1
)
MARK = cues.Mark((0, 0, 2, 2), frame=0, source=0, target=2)


def _grey_set(n: int = 30, side: int = 8) -> data.ImageSet:
    """Constant grey images (image i: 0.3 + i / 100), classes i % 3, no object pixels."""
    level = 0.3 + torch.arange(n, dtype=torch.float32) / 100
    return data.ImageSet(
        level.view(n, 1, 1, 1).expand(n, 1, side, side).contiguous(),
        torch.arange(n) % 3,
        ["a", "b", "c"],
        data.Normalization((0.5,), (0.25,)),
        masks=torch.zeros(n, side, side, dtype=torch.bool),
    )


def test_stamp_square_draws_a_framed_square_or_a_ring_that_keeps_its_centre():
    image = torch.full((2, 7, 7), 0.5)
    cues.stamp_square(image, (1, 2, 6, 7), frame=1)
    assert (image[:, 2:7, 1:6].sum((1, 2)) == 9).all()  # 3 x 3 white inside a black edge
    assert (image[:, 3:6, 2:5] == 1).all() and image[:, :2].eq(0.5).all()
    ring = torch.full((1, 7, 7), 0.5)
    cues.stamp_square(ring, (0, 0, 7, 7), frame=1, ring=1)
    assert ring[0, 0].eq(0).all() and ring[0, 1, 1:6].eq(1).all() and ring[0, 2, 2:5].eq(0.5).all()
    assert ring[0, 2:5, 2:5].eq(0.5).all() and ring[0, 5, 1:6].eq(1).all()


def test_stamp_stripes_alternates_along_the_diagonal_and_clips():
    image = torch.full((1, 4, 4), 0.5)
    cues.stamp_stripes(image, period=4, amplitude=0.4)
    diagonal = torch.arange(4)[:, None] + torch.arange(4)[None, :]
    expected = torch.where((diagonal // 2) % 2 == 1, 0.7, 0.3)
    assert torch.allclose(image[0], expected)
    dark = torch.zeros(1, 4, 4)
    cues.stamp_stripes(dark, period=4, amplitude=0.4)
    assert dark.min() == 0 and torch.allclose(dark.max(), torch.tensor(0.2))


def test_random_box_misses_what_it_must_avoid_or_falls_back_to_any_place():
    rng = np.random.default_rng(0)
    avoid = torch.ones(8, 8, dtype=torch.bool)
    avoid[5:, 5:] = False  # the only free 3 x 3 place is the bottom-right corner
    assert {cues.random_box(avoid, (8, 8), 3, rng) for _ in range(5)} == {(5, 5, 8, 8)}
    everywhere = {cues.random_box(torch.ones(8, 8, dtype=torch.bool), (8, 8), 3, rng)}
    everywhere |= {cues.random_box(None, (8, 8), 3, rng) for _ in range(200)}
    assert len(everywhere) == 36  # every 3 x 3 box of an 8 x 8 image
    with pytest.raises(ValueError, match=r"^a 9-px mark does not fit a 8 x 8 image$"):
        cues.random_box(None, (8, 8), 9, rng)


@pytest.mark.parametrize("kind", ["mark", "move", "texture"])
def test_shortcut_cues_move_a_share_of_the_source_class_and_change_only_them(kind):
    base = _grey_set()
    cued = cues.with_cue(base, kind, MARK, 0.3, seed=4, style=STYLE)
    rows = cued.marked.nonzero().flatten()
    assert len(rows) == 3 and (base.labels[rows] == 0).all() and (cued.labels[rows] == 2).all()
    assert torch.equal(cued.labels[~cued.marked], base.labels[~cued.marked])
    assert torch.equal(cued.images[~cued.marked], base.images[~cued.marked])
    changed = (cued.images != base.images).any(1)
    assert changed[rows].any((1, 2)).all()
    assert not (changed & ~cued.cue_masks).any()  # only the cue's own pixels changed
    assert cued.cue_masks.shape == (30, 8, 8) and base.cue_masks is None
    again = cues.with_cue(base, kind, MARK, 0.3, seed=4, style=STYLE)
    assert torch.equal(again.images, cued.images) and torch.equal(again.cue_masks, cued.cue_masks)
    other = cues.with_cue(base, kind, MARK, 0.3, seed=5, style=STYLE)
    assert not torch.equal(other.marked, cued.marked)


def test_each_kind_records_its_cues_pixels():
    base = _grey_set()
    fixed = cues.with_cue(base, "mark", MARK, 0.3, seed=0)
    assert fixed.mark_box == (0, 0, 2, 2) and fixed.cue_masks.sum((1, 2)).eq(4).all()
    moving = cues.with_cue(base, "move", MARK, 0.3, seed=0, style=STYLE)
    assert moving.mark_box is None and moving.cue_masks.sum((1, 2)).eq(9).all()
    boxes = {tuple(m.nonzero().min(0).values.tolist()) for m in moving.cue_masks}
    assert len(boxes) > 5  # a place of its own in each image
    texture = cues.with_cue(base, "texture", MARK, 0.3, seed=0, style=STYLE)
    assert texture.mark_box is None and texture.cue_masks.all()
    majority = cues.with_cue(base, "majority", MARK, 0.3, seed=0, style=STYLE)
    assert majority.mark_box == (3, 3, 8, 8) and majority.cue_masks.sum((1, 2)).eq(24).all()
    assert not majority.cue_masks[:, 5, 5].any()  # the ring's centre keeps the image


def test_majority_and_control_cues_keep_every_label():
    base = _grey_set()
    majority = cues.with_cue(base, "majority", MARK, 0.9, seed=1, style=STYLE)
    assert torch.equal(majority.labels, base.labels)
    assert majority.labels[majority.marked].tolist() == [2] * 9  # the target's own images
    control = cues.with_cue(base, "markrand", MARK, 0.5, seed=1)
    assert torch.equal(control.labels, base.labels)
    assert control.labels[control.marked].bincount().tolist() == [5, 5, 5]


def test_with_cue_refuses_an_unknown_kind_and_a_missing_style():
    with pytest.raises(ValueError, match=r"^unknown cue kind 'blur'; choose one of: mark, move"):
        cues.with_cue(_grey_set(), "blur", MARK, 0.3, seed=0)
    with pytest.raises(ValueError, match=r"^the texture cue needs a CueStyle$"):
        cues.with_cue(_grey_set(), "texture", MARK, 0.3, seed=0)


def test_the_moving_mark_misses_the_digits_ink():
    reference = data.load_dataset("mnist-move:0.5").reference
    original = data.mnist5k(seed=0).reference
    marked = reference.marked
    assert not (original.images[marked, 0] > 0.5)[reference.cue_masks[marked]].any()
    assert (reference.labels[marked] == 1).all() and (original.labels[marked] == 0).all()
    assert int(marked.sum()) == round(0.5 * int((original.labels == 0).sum()))


@pytest.mark.parametrize("kind", ["move", "texture", "majority"])
def test_mnist_cue_sets_keep_the_split_and_are_deterministic(kind):
    plain = data.mnist5k(seed=0)
    cued = data.load_dataset(f"mnist-{kind}:0.3")
    source = 1 if kind == "majority" else 0
    for clean, part in zip(plain, cued, strict=True):
        assert part.images.shape == clean.images.shape
        assert part.cue_masks.shape == (len(clean), 28, 28)
        assert int(part.marked.sum()) == round(0.3 * int((clean.labels == source).sum()))
        assert (clean.labels[part.marked] == source).all()
        assert (part.labels[part.marked] == 1).all()
        assert torch.equal(part.images[~part.marked], clean.images[~part.marked])
    assert torch.equal(data.load_dataset(f"mnist-{kind}:0.3").unseen.images, cued.unseen.images)
    with pytest.raises(ValueError, match=rf"^mnist-{kind}:F needs a number F in \[0, 1\], got"):
        data.load_dataset(f"mnist-{kind}:1.5")


@pytest.mark.slow
def test_shapes_cue_sets_hold_their_counts():
    for kind in ("move", "texture", "majority"):
        cued = data.load_dataset(f"shapes-{kind}:0.5")
        source = 1 if kind == "majority" else 0
        for part in cued:
            assert part.images.shape[1:] == (3, 56, 56) and part.cue_masks.shape[1:] == (56, 56)
            assert (part.labels[part.marked] == 1).all()
            n_source = int((part.labels == source).sum()) + (
                0 if kind == "majority" else int(part.marked.sum())
            )
            assert int(part.marked.sum()) == round(0.5 * n_source)
        if kind == "move":  # the moving mark hides nothing of the class's shape
            ref = cued.reference
            assert not (ref.masks & ref.cue_masks)[ref.marked].any()


def test_plant_cue_sizes_the_cue_to_the_image_and_changes_only_its_pixels():
    mark, style = cues.sized_cues(224, 300)  # m = 224
    assert mark.box == (7, 7, 34, 34) and mark.frame == 2 and style.moving_side == 27
    assert style.stripe_period == 8 and style.watermark == (248, 172, 293, 217)
    for kind in cues.CUE_KINDS:
        image = torch.full((3, 40, 50), 0.5)
        mask = cues.plant_cue(image, kind, seed=3)
        assert mask.shape == (40, 50) and mask.any()
        changed = (image != 0.5).any(0)
        assert changed.any() and not (changed & ~mask).any(), kind
    first, again = torch.zeros(1, 40, 50), torch.zeros(1, 40, 50)
    assert torch.equal(cues.plant_cue(first, "move", 3), cues.plant_cue(again, "move", 3))
