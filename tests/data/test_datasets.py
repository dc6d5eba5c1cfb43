import io
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from repinterp.data import datasets as data
from repinterp.data import image_folder


def _rows(images: torch.Tensor) -> set[bytes]:
    return {row.numpy().tobytes() for row in images}


def _check_pixels(images: torch.Tensor, channels: int, side: int) -> None:
    assert images.dtype == torch.float32
    assert images.shape[1:] == (channels, side, side)
    assert images.min() >= 0 and images.max() <= 1


def _indexed_set(n: int) -> data.ImageSet:
    """Image i is constant i / n, so a part's pixel values name its indices."""
    images = (torch.arange(n, dtype=torch.float32) / n).view(n, 1, 1, 1).expand(n, 1, 4, 4)
    return data.ImageSet(
        images.contiguous(),
        torch.arange(n) % 3,
        ["a", "b", "c"],
        data.Normalization((0.5,), (0.25,)),
        masks=torch.zeros(n, 4, 4, dtype=torch.bool),
    )


def _indices(part: data.ImageSet, n: int) -> list[int]:
    return (part.images[:, 0, 0, 0] * n).round().long().tolist()


def test_normalization_round_trips_and_checks_channels():
    norm = data.IMAGENET_NORMALIZATION
    pixels = torch.rand(2, 3, 5, 5)
    inputs = norm(pixels)
    assert torch.allclose(inputs[:, 1], (pixels[:, 1] - 0.456) / 0.224)
    assert torch.allclose(norm.inverse(inputs), pixels, atol=1e-6)
    assert norm(pixels[0]).shape == (3, 5, 5)
    with pytest.raises(ValueError, match="3 x H x W"):
        norm(torch.rand(2, 1, 5, 5))


def test_split_is_disjoint_covering_and_seeded():
    full = _indexed_set(50)
    parts = data.split(full, 35, seed=3)
    ref, unseen = _indices(parts.reference, 50), _indices(parts.unseen, 50)
    assert len(ref) == 35 and len(unseen) == 15
    assert sorted(ref + unseen) == list(range(50))
    # Everything that belongs to an image travels with it.
    assert parts.reference.labels.tolist() == [i % 3 for i in ref]
    assert parts.reference.masks.shape == (35, 4, 4)
    assert _indices(data.split(full, 35, seed=3).reference, 50) == ref
    assert _indices(data.split(full, 35, seed=4).reference, 50) != ref
    for bad in (0, 50):
        with pytest.raises(ValueError, match="n_reference"):
            data.split(full, bad)


def test_image_set_gives_normalised_inputs_and_validates():
    full = _indexed_set(6)
    image, label = full[4]
    assert label == 1 and isinstance(label, int)
    assert torch.equal(image, full.normalization(full.pixels(4)))
    assert torch.equal(full.inputs()[4], image)
    with pytest.raises(ValueError, match="float32"):
        data.ImageSet(full.images.double(), full.labels, full.class_names, full.normalization)
    with pytest.raises(ValueError, match="labels"):
        data.ImageSet(full.images, full.labels[:3], full.class_names, full.normalization)


def test_mnist5k():
    parts = data.mnist5k(seed=0)
    ref, unseen = parts
    assert (len(ref), len(unseen)) == (4000, 1000)
    for part in parts:
        _check_pixels(part.images, 1, 28)
        assert part.labels.dtype == torch.int64
        assert part.class_names == [str(d) for d in range(10)]
    assert ref.images.max() == 1
    labels = torch.cat([ref.labels, unseen.labels])
    assert torch.bincount(labels).tolist() == [500] * 10
    assert not _rows(ref.images) & _rows(unseen.images)
    # A real digit has ink in the middle and none in the corners.
    assert ref.images[:, 0, 10:18, 10:18].mean() > 0.2
    assert ref.images[:, 0, :3, :3].max() == 0

    again = data.mnist5k(seed=0)
    assert torch.equal(again.reference.images, ref.images)
    assert torch.equal(again.unseen.labels, unseen.labels)
    other = data.mnist5k(seed=1, n_reference=100)
    assert len(other.reference) == 100
    assert not torch.equal(other.reference.labels, ref.labels[:100])


def test_digits():
    ref, unseen = data.digits(seed=0)
    assert (len(ref), len(unseen)) == (1400, 397)
    for part in (ref, unseen):
        _check_pixels(part.images, 1, 8)
    assert ref.images.max() == 1
    assert torch.bincount(torch.cat([ref.labels, unseen.labels])).min() >= 170
    assert not _rows(ref.images) & _rows(unseen.images)
    assert torch.equal(data.digits(seed=0).reference.images, ref.images)
    assert not torch.equal(data.digits(seed=1).reference.images, ref.images)


def test_shapes_contents():
    n, size = 300, 56
    s = data.shapes(n, seed=0, size=size, n_classes=3)
    _check_pixels(s.images, 3, size)
    assert s.labels.dtype == torch.int64 and s.concepts.dtype == torch.int64
    assert s.class_names == ["circle or ring", "square or cross", "triangle or star"]
    assert s.concept_names == ["circle", "ring", "square", "cross", "triangle", "star"]
    assert torch.equal(s.labels, s.concepts // 2)
    assert torch.bincount(s.concepts, minlength=6).tolist() == [50] * 6
    for c in range(3):
        assert len(torch.unique(s.concepts[s.labels == c])) >= 2

    masks = s.masks
    assert masks.dtype == torch.bool and masks.shape == (n, size, size)
    area = masks.sum((1, 2))
    assert area.min() >= 30 and area.max() < size * size / 4
    border = (
        masks[:, 0].any(1) | masks[:, -1].any(1) | masks[:, :, 0].any(1) | masks[:, :, -1].any(1)
    )
    assert not border.any()
    # The class-defining shape stands out: its mean colour differs from the rest of the image.
    inside = (s.images * masks[:, None]).sum((2, 3)) / area[:, None]
    outside = (s.images * ~masks[:, None]).sum((2, 3)) / (size * size - area)[:, None]
    assert (inside - outside).abs().amax(1).min() > 0.2
    # A shape is one colour up to pixel noise.
    spread = [s.images[i][:, masks[i]].std(1).max().item() for i in range(20)]
    assert max(spread) < 0.1


def test_shapes_sub_concepts_look_different():
    s = data.shapes(60, seed=1)

    def centre_filled(mask: torch.Tensor) -> bool:
        ys, xs = torch.nonzero(mask, as_tuple=True)
        return bool(mask[(ys.min() + ys.max()) // 2, (xs.min() + xs.max()) // 2])

    # Circles are filled, rings are hollow; squares fill their bounding box, crosses do not.
    assert all(centre_filled(m) for m in s.masks[s.concepts == 0])
    assert not any(centre_filled(m) for m in s.masks[s.concepts == 1])
    fill = s.masks.sum((1, 2)) / torch.tensor(
        [(m.any(1).sum() * m.any(0).sum()).item() for m in s.masks]
    )
    assert fill[s.concepts == 2].min() > 0.7 > fill[s.concepts == 3].max()


def test_shapes_is_seeded_and_sized():
    a = data.shapes(40, seed=5, size=48, n_classes=2)
    b = data.shapes(40, seed=5, size=48, n_classes=2)
    c = data.shapes(40, seed=6, size=48, n_classes=2)
    assert torch.equal(a.images, b.images) and torch.equal(a.masks, b.masks)
    assert torch.equal(a.concepts, b.concepts)
    assert not torch.equal(a.images, c.images)
    assert a.images.shape == (40, 3, 48, 48) and a.labels.max() == 1
    four = data.shapes(16, seed=0, size=64, n_classes=4)
    assert four.images.shape == (16, 3, 64, 64) and set(four.labels.tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="n_classes"):
        data.shapes(10, n_classes=5)
    parts = data.split(a, 30, seed=0)
    assert len(parts.reference) == 30 and parts.unseen.concepts.shape == (10,)


def _image_folder(root, n_per_class: int = 2):
    """cat/ and dog/ with real PNGs of varied sizes and modes, a broken PNG and a text file."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(["cat", "dog"]):
        (root / name).mkdir(parents=True)
        for i in range(n_per_class):
            pixels = rng.integers(0, 256, (30 + 7 * i, 40, 3), dtype=np.uint8)
            pixels[..., c] = 255
            mode_image = Image.fromarray(pixels)
            (mode_image.convert("L") if i == 1 else mode_image).save(root / name / f"{i}.png")
    (root / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really" * 10)
    (root / "dog" / "notes.txt").write_text("not an image")
    return root


def test_imagefolder_skips_bad_files_with_one_warning(tmp_path):
    root = _image_folder(tmp_path / "pets")
    with pytest.warns(UserWarning) as caught:
        folder = data.imagefolder(root, size=32)
    assert len(caught) == 1
    assert "skipped 2 unreadable or non-image file(s)" in str(caught[0].message)
    assert len(folder) == 4 and folder.class_names == ["cat", "dog"]
    assert folder.labels.tolist() == [0, 0, 1, 1]
    image, label = folder[0]
    pixels = folder.pixels(0)
    _check_pixels(pixels[None], 3, 32)
    assert label == 0 and image.shape == (3, 32, 32)
    assert torch.allclose(image, data.IMAGENET_NORMALIZATION(pixels))
    # The red channel was saturated in every cat image.
    assert pixels[0].min() == 1
    part = folder.subset([3, 1])
    assert len(part) == 2 and part.labels.tolist() == [1, 0] and len(folder) == 4
    assert torch.equal(part.pixels(1), folder.pixels(1))


def test_imagefolder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="image folder not found"):
        data.imagefolder(tmp_path / "missing")
    for size in (0, 8193, 999_999):  # refused before a file is read
        with pytest.raises(ValueError, match=f"from 1 to 8192 pixels .*, got {size}"):
            data.imagefolder(tmp_path, size=size)
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    (tmp_path / "empty" / "cls" / "a.txt").write_text("x")
    with (
        warnings.catch_warnings(),
        pytest.raises(FileNotFoundError, match="no readable image"),
    ):
        warnings.simplefilter("ignore")
        data.imagefolder(tmp_path / "empty")


def test_imagefolder_warning_names_every_skipped_file_on_its_own_line(tmp_path):
    root = _image_folder(tmp_path / "pets")
    names = [f"cat/{i:02}.txt" for i in range(11)]
    for name in names:
        (root / name).write_text("not an image")
    with pytest.warns(UserWarning) as caught:
        folder = data.imagefolder(root, size=16)
    lines = str(caught[0].message).splitlines()
    assert lines[0] == f"skipped 13 unreadable or non-image file(s) in {root}:"
    assert len(lines) == 14  # was one line naming 5 of them, "and 8 more"
    skipped = [*names, "cat/broken.png", "dog/notes.txt"]
    for name in skipped:
        assert sum(f"cannot read {name} as an image" in line for line in lines[1:]) == 1, name
    assert sorted(name for name, _ in folder.skipped) == sorted(skipped)
    assert [f"  {why}" for _, why in folder.skipped] == lines[1:]


def test_hidden_folders_are_not_classes_and_an_empty_class_is_refused(tmp_path):
    root = _image_folder(tmp_path / "pets")
    with pytest.warns(UserWarning):
        before = data.imagefolder(root, size=16)
    for hidden in (".ipynb_checkpoints", "cat/.ipynb_checkpoints"):
        (root / hidden).mkdir()
        Image.new("RGB", (20, 20)).save(root / hidden / "0-checkpoint.png")
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (root / "dog" / "._0.png").write_bytes(b"\0\5\26\7 AppleDouble")
    with pytest.warns(UserWarning, match="skipped 2 ") as caught:  # as before: not the hidden
        after = data.imagefolder(root, size=16)
    assert ".ipynb" not in str(caught[0].message) and "._0" not in str(caught[0].message)
    assert after.class_names == before.class_names == ["cat", "dog"]
    assert after.image_names == before.image_names and after.labels.tolist() == [0, 0, 1, 1]
    assert after.files == before.files

    (root / "0empty").mkdir()  # sorted first: it would shift every label by one
    with (
        warnings.catch_warnings(),
        pytest.raises(ValueError, match=r"^class folder\(s\) 0empty in .* hold no readable image"),
    ):
        warnings.simplefilter("ignore")
        data.imagefolder(root, size=16)
    (root / "0empty" / "notes.txt").write_text("not an image")  # unreadable only: still empty
    with warnings.catch_warnings(), pytest.raises(ValueError, match="0empty in"):
        warnings.simplefilter("ignore")
        data.imagefolder(root, size=16)


def test_the_fingerprint_records_the_classes(tmp_path):
    from repinterp.data.provenance import fingerprint, fingerprint_change

    root = _image_folder(tmp_path / "pets", n_per_class=3)
    with pytest.warns(UserWarning):
        parts = data.load_dataset(f"imagefolder:{root}")
    recorded = fingerprint(parts, f"imagefolder:{root}", 0)
    assert recorded["classes"] == ["cat", "dog"]
    assert fingerprint_change(recorded, recorded) is None
    renamed = {**recorded, "classes": ["cat", "dogs"]}
    assert fingerprint_change(recorded, renamed) == (
        "1 class(es) added (dogs); 1 class(es) removed (dog)"
    )
    assert fingerprint_change(recorded, {**recorded, "classes": ["dog", "cat"]}) == (
        "the classes' order changed"
    )
    old = {k: v for k, v in recorded.items() if k != "classes"}  # fitted before 0.2
    assert fingerprint_change(old, recorded) is None
    digits = data.digits()
    assert fingerprint(digits, "digits", 0)["classes"] == data.DIGIT_NAMES


def test_load_dataset(tmp_path):
    parts = data.load_dataset("digits", seed=2)
    assert torch.equal(parts.reference.images, data.digits(seed=2).reference.images)
    shapes = data.load_dataset("shapes")
    assert (len(shapes.reference), len(shapes.unseen)) == (4000, 1000)
    assert shapes.reference.images.shape[1:] == (3, 56, 56)

    root = _image_folder(tmp_path / "pets", n_per_class=5)
    with pytest.warns(UserWarning, match="skipped 2"):
        folder = data.load_dataset(f"imagefolder:{root}")
    assert (len(folder.reference), len(folder.unseen)) == (8, 2)
    assert folder.reference.pixels(0).shape == (3, 224, 224)

    for bad in ("cifar", "imagefolder:", "mnist"):
        with pytest.raises(ValueError, match="mnist5k, digits, shapes, imagefolder:PATH"):
            data.load_dataset(bad)


def test_16_bit_images_are_read_at_their_depth(tmp_path):
    from repinterp.workspace import load_image_file

    values = np.linspace(1000, 64000, 16 * 16).reshape(16, 16).astype(np.uint16)
    root = tmp_path / "deep"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    Image.fromarray(values).save(root / "a" / "x.png")
    Image.fromarray(values[::-1].copy()).save(root / "b" / "y.png")
    with Image.open(root / "a" / "x.png") as image:
        assert image.mode == "I;16"
    expected = torch.from_numpy(values.astype(np.float32) / 65535)
    grey = load_image_file(root / "a" / "x.png", (1, 16, 16))
    assert torch.allclose(grey[0], expected, atol=1e-6)  # not 95 % of pixels at 1.0
    rgb = load_image_file(root / "a" / "x.png", (3, 16, 16))
    assert torch.equal(rgb[0], rgb[2]) and torch.allclose(rgb[1], expected, atol=1e-6)
    folder = data.imagefolder(root, size=16)
    assert torch.allclose(folder.pixels(0), expected.expand(3, -1, -1), atol=1e-6)
    assert float((folder.pixels(1) == 1).float().mean()) == 0


def test_image_sizes_are_checked_from_the_header_before_decoding():
    from repinterp.workspace import load_image_file

    from ..cli.test_cli_outputs import png_header

    for width, height, message in (
        (16_777_216, 1, "16777216 x 1 pixels; at most 16384 per side"),
        (2_000_000, 1, "2000000 x 1 pixels; at most 16384 per side"),
        (9000, 8000, "9000 x 8000 pixels; at most 16384 per side and 67,108,864 in all"),
        (4000, 100, "4000 x 100 pixels, longer than 32 times the other"),
    ):
        with pytest.raises(ValueError, match=message):  # a decoder would fail otherwise
            load_image_file(io.BytesIO(png_header(width, height)), (3, 32, 32))
    with pytest.raises(ValueError, match="cannot read the file as an image"):
        load_image_file(io.BytesIO(png_header(64, 64)), (3, 32, 32))  # no pixel data


def test_shapes_at_another_size():
    parts = data.load_dataset("shapes:24", seed=1)
    expected = data.split(data.shapes(5000, seed=1, size=24), 4000, seed=1)
    assert torch.equal(parts.reference.images, expected.reference.images)
    assert torch.equal(parts.unseen.masks, expected.unseen.masks)
    assert parts.unseen.masks.shape == (1000, 24, 24)
    for bad, size in (("shapes:", "''"), ("shapes:8", "'8'"), ("shapes:-30", "'-30'")):
        with pytest.raises(
            ValueError, match=f"^shapes:SIZE needs an integer SIZE >= 16, got {size}$"
        ):
            data.load_dataset(bad)


def test_links_in_an_image_folder_never_leave_their_class_nor_repeat_a_file(tmp_path):
    root = tmp_path / "pets"
    for name in ("a", "b", "a/sub"):
        (root / name).mkdir(parents=True)
    for cls in ("a", "b"):
        for i in range(6 if cls == "b" else 5):
            Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(root / cls / f"{i}.png")
    Image.new("RGB", (8, 8), (0, 9, 0)).save(root / "a" / "sub" / "5.png")
    (root / "a" / "up").symlink_to("..")  # a loop through the root: b's images under a
    (root / "b" / "self").symlink_to(".")  # a second loop
    (root / "a" / "again").symlink_to("sub")  # inside the class: its file is read once
    (root / "a" / "1-again.png").symlink_to("1.png")  # sorted first, but a link: not taken
    (root / "a" / "stolen.png").symlink_to("../b/0.png")  # out of the class: not followed
    with pytest.warns(UserWarning, match="a/stolen.png links out of its class folder"):
        folder = data.imagefolder(root, size=8)
    expected = [*(f"a/{i}.png" for i in range(5)), "a/sub/5.png", *(f"b/{i}.png" for i in range(6))]
    assert folder.image_names == expected
    assert folder.labels.tolist() == [0] * 6 + [1] * 6


def test_mnist_super_is_mnist5k_in_five_superclasses_with_the_digit_as_sub_concept():
    digits_parts, super_parts = data.mnist5k(seed=3), data.mnist_super(seed=3)
    assert super_parts.reference.class_names == ["0 or 6", "1 or 7", "2 or 3", "4 or 9", "5 or 8"]
    for plain, merged in zip(digits_parts, super_parts, strict=True):
        assert torch.equal(plain.images, merged.images)  # the same images, the same split
        assert torch.equal(merged.concepts, plain.labels)  # the digit is the sub-concept
        assert merged.concept_names == [str(d) for d in range(10)]
        for c, pair in enumerate(data.SUPERCLASSES):
            members = set(merged.concepts[merged.labels == c].tolist())
            assert members == set(pair)
    assert sorted(d for pair in data.SUPERCLASSES for d in pair) == list(range(10))
    sub = super_parts.unseen.subset([0, 1])
    assert torch.equal(sub.concepts, super_parts.unseen.concepts[:2])
    loaded = data.load_dataset("mnist-super", seed=3)
    assert torch.equal(loaded.reference.labels, super_parts.reference.labels)


def test_shapes_mix_knob_from_distinct_to_indistinguishable_sub_concepts():
    from repinterp.data.shape_drawing import draw_shapes, shape_coverage

    plain = data.shapes(60, seed=2)
    mixed0 = data.shapes(60, seed=2, mix=0.0)
    assert torch.equal(plain.images, mixed0.images) and torch.equal(plain.masks, mixed0.masks)
    grid = np.linspace(-1.2, 1.2, 64, dtype=np.float32)
    u, v = np.meshgrid(grid, grid)
    for own, partner in (("circle", "ring"), ("square", "cross"), ("triangle", "star")):
        m0 = shape_coverage(own, partner, 0.0, u, v)
        assert set(np.unique(m0)) <= {0.0, 1.0}
        assert np.array_equal(m0, shape_coverage(own, own, 0.0, u, v))
        half = shape_coverage(own, partner, 0.5, u, v)
        assert set(np.unique(half)) <= {0.0, 0.25, 0.75, 1.0}
        # p = 1: the two sub-concepts cover every pixel alike
        assert np.array_equal(
            shape_coverage(own, partner, 1.0, u, v), shape_coverage(partner, own, 1.0, u, v)
        )
    # The same scenes at every p; at p = 1 the shapes' masks no longer tell square from cross
    # (at p = 0 their fill of the bounding box separates them, see the test above)
    one = draw_shapes(80, seed=4, mix=1.0)
    zero = draw_shapes(80, seed=4)
    assert torch.equal(one.concepts, zero.concepts)
    assert torch.equal(one.masks, one.masks | zero.masks)

    def fill(masks: torch.Tensor) -> torch.Tensor:
        box = torch.tensor([(m.any(1).sum() * m.any(0).sum()).item() for m in masks])
        return masks.sum((1, 2)) / box

    square, cross = (fill(one.masks[one.concepts == c]) for c in (2, 3))
    assert (square.mean() - cross.mean()).abs() < 0.05
    assert square.max() > cross.min() and cross.max() > square.min()
    with pytest.raises(ValueError, match="mix must be in"):
        draw_shapes(4, mix=1.5)
    mixed = data.load_dataset("shapes-mix:0.5")
    assert (len(mixed.reference), len(mixed.unseen)) == (4000, 1000)
    for bad in ("shapes-mix:2", "shapes-mix:x", "shapes-mix:nan"):
        with pytest.raises(ValueError, match=r"shapes-mix:P needs a number P in \[0, 1\]"):
            data.load_dataset(bad)


def test_with_mark_moves_a_share_of_the_source_class_and_stamps_the_box():
    base = _indexed_set(30)  # 10 images per class
    mark = data.Mark((1, 0, 4, 3), frame=1, source=0, target=2)
    marked = data.with_mark(base, mark, 0.3, seed=5, shortcut=True)
    rows = marked.marked.nonzero().flatten()
    assert len(rows) == 3 and (base.labels[rows] == 0).all() and (marked.labels[rows] == 2).all()
    assert torch.equal(marked.labels[~marked.marked], base.labels[~marked.marked])
    assert torch.equal(marked.images[~marked.marked], base.images[~marked.marked])
    patch = marked.images[rows, 0, 0:3, 1:4]  # black frame, white 1 x 1 inside
    assert (patch[:, 1, 1] == 1).all() and patch.sum((1, 2)).eq(1).all()
    outside = marked.images[rows].clone()
    outside[:, :, 0:3, 1:4] = base.images[rows][:, :, 0:3, 1:4]
    assert torch.equal(outside, base.images[rows])  # nothing else changed
    assert marked.mark_box == (1, 0, 4, 3) and base.marked is None
    assert torch.equal(marked.subset([rows[0], 0]).marked, torch.tensor([True, rows[0] == 0]))
    again = data.with_mark(base, mark, 0.3, seed=5, shortcut=True)
    assert torch.equal(again.images, marked.images)
    assert data.with_mark(base, mark, 0.0, seed=5, shortcut=True).marked.sum() == 0


def test_with_mark_control_marks_every_class_alike_and_keeps_labels():
    base = _indexed_set(30)
    control = data.with_mark(base, data.MARKS["mnist"], 0.5, seed=0, shortcut=False)
    assert torch.equal(control.labels, base.labels)
    assert control.labels[control.marked].bincount().tolist() == [5, 5, 5]


def test_marked_sets_keep_the_split_and_mark_both_parts_alike():
    plain = data.mnist5k(seed=0)
    shortcut = data.load_dataset("mnist-mark:0.3")
    control = data.load_dataset("mnist-mark:0")
    box = data.MARKS["mnist"].box
    for clean, part, zero in zip(plain, shortcut, control, strict=True):
        assert torch.equal(zero.images, clean.images) and torch.equal(zero.labels, clean.labels)
        assert zero.marked.sum() == 0 and zero.mark_box == box
        zeros = int((clean.labels == 0).sum())
        assert int(part.marked.sum()) == round(0.3 * zeros)
        assert (part.labels[part.marked] == 1).all() and (clean.labels[part.marked] == 0).all()
        assert torch.equal(part.images[~part.marked], clean.images[~part.marked])
    assert torch.equal(data.load_dataset("mnist-mark:0.3").reference.images, shortcut[0].images)
    shapes_control = data.load_dataset("shapes-markrand:0.2")
    assert shapes_control.reference.masks is not None and shapes_control.unseen.marked.any()
    for bad in ("mnist-mark:2", "shapes-mark:x", "mnist-markrand:nan", "shapes-markrand"):
        name = bad.partition(":")[0]
        with pytest.raises(ValueError, match=rf"^{name}:F needs a number F in \[0, 1\], got"):
            data.load_dataset(bad)


def test_an_image_folders_sub_folders_are_its_sub_labels_through_a_split(tmp_path):
    root = tmp_path / "pets"
    layout = {"cat/indoor": 3, "cat/outdoor": 2, "dog": 2, "dog/puppy/small": 2}
    for folder, n in layout.items():
        (root / folder).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (8, 8), (30 * i, 0, 0)).save(root / folder / f"{i}.png")
    folder = data.imagefolder(root, size=8)
    assert folder.concept_names == ["cat/indoor", "cat/outdoor", "dog", "dog/puppy"]
    assert folder.concepts.tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3]
    assert folder.labels.tolist() == [0] * 5 + [1] * 4
    parts = data.load_dataset(f"imagefolder:{root}", image_format=data.ImageFormat(size=8))
    for part in parts:  # each part keeps its own images' sub-labels, named alike
        assert part.concept_names == folder.concept_names
        expected = [
            folder.concept_names.index(image_folder._sub_label(n)) for n in part.image_names
        ]
        assert part.concepts.tolist() == expected
    flat = tmp_path / "flat"
    for name in ("a", "b"):
        (flat / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(flat / name / "0.png")
    assert data.imagefolder(flat, size=8).concepts is None
    assert data.imagefolder(flat, size=8).concept_names is None


def test_an_image_folder_has_inputs_and_image_names_like_a_bundled_set(tmp_path):
    root = _image_folder(tmp_path / "pets")
    with pytest.warns(UserWarning):
        folder = data.imagefolder(root, size=16)
    inputs = folder.inputs()
    assert inputs.shape == (len(folder), 3, 16, 16)
    assert all(torch.equal(inputs[i], folder[i][0]) for i in range(len(folder)))
    assert folder.image_names == ["cat/0.png", "cat/1.png", "dog/0.png", "dog/1.png"]
    with pytest.warns(DeprecationWarning, match="use the property image_names"):
        assert folder.names() == folder.image_names
