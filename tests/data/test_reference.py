"""Every kind of reference set a user already has gives the index of the same images as a
tensor, or a one-line error that says what to do."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    IterableDataset,
    SubsetRandomSampler,
    TensorDataset,
)

from repinterp import RepresentativeInterpreter
from repinterp.data.reference import (
    IMAGE_KEYS,
    ReferenceSet,
    all_finite,
    as_reference,
    check_finite_rows,
    check_images,
)

from ..networks import random_setup

N = 60
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    model, images = random_setup(n=N)
    labels = torch.arange(N) % 4
    expected = _fit(model, images)
    return model, images, labels, expected


def _fit(model, reference):
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=8, batch_size=16, progress=False)
    return ri.fit(reference).index


def _same(index, expected, labels=None) -> None:
    for name in ("projections", "logits", "predictions", "sources", "boundary_weight"):
        assert torch.equal(index.tensors()[name], expected.tensors()[name]), name
    if labels is None:
        assert index.labels is None
    else:
        assert torch.equal(index.labels, labels)


class DictDataset(Dataset):
    def __init__(self, images, labels, image_key: str) -> None:
        self.images, self.labels, self.key = images, labels, image_key

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i):
        return {self.key: self.images[i], "label": self.labels[i], "name": f"img{i}"}


class Stream(IterableDataset):
    def __init__(self, images, labels) -> None:
        self.images, self.labels = images, labels

    def __iter__(self):
        return iter(zip(self.images, self.labels, strict=True))


def test_dataloaders_of_tensors_tuples_and_dicts(setup) -> None:
    model, images, labels, expected = setup
    _same(_fit(model, DataLoader(images, batch_size=7)), expected)
    pairs = TensorDataset(images, labels)
    _same(_fit(model, DataLoader(pairs, batch_size=7, drop_last=True)), expected, labels)
    _same(_fit(model, DataLoader(pairs, batch_size=None)), expected, labels)
    for key in IMAGE_KEYS:
        loader = DataLoader(DictDataset(images, labels, key), batch_size=5)
        _same(_fit(model, loader), expected, labels)


def test_a_loader_s_collate_fn_is_used(setup) -> None:
    model, images, labels, expected = setup

    def collate(items):  # the loader gives (labels, images): its collate_fn must be used
        return {
            "pixel_values": torch.stack([x for x, _ in items]),
            "labels": torch.stack([y for _, y in items]),
        }

    loader = DataLoader(TensorDataset(images, labels), batch_size=9, collate_fn=collate)
    _same(_fit(model, loader), expected, labels)


def test_list_dataset_and_iterable(setup) -> None:
    model, images, labels, expected = setup
    _same(_fit(model, list(images)), expected)
    _same(_fit(model, TensorDataset(images, labels)), expected, labels)
    _same(_fit(model, Stream(images, labels)), expected, labels)
    _same(_fit(model, DataLoader(Stream(images, labels), batch_size=11)), expected, labels)


def test_a_tensor_dataset_is_sliced_not_read_item_by_item(setup, monkeypatch) -> None:
    model, images, labels, expected = setup

    def by_item(self, i):
        raise AssertionError("a TensorDataset read item by item")

    monkeypatch.setattr(TensorDataset, "__getitem__", by_item)
    _same(_fit(model, TensorDataset(images, labels)), expected, labels)
    _same(_fit(model, TensorDataset(images)), expected)
    _same(_fit(model, DataLoader(TensorDataset(images, labels), batch_size=7)), expected, labels)


def test_numpy_channels_first_and_last(setup) -> None:
    model, images, _, expected = setup
    _same(_fit(model, images.numpy()), expected)
    channels_last = np.ascontiguousarray(images.numpy().transpose(0, 2, 3, 1))
    assert channels_last.shape == (N, 12, 12, 1)
    _same(_fit(model, channels_last), expected)
    readonly = images.numpy().copy()
    readonly.flags.writeable = False
    _same(_fit(model, readonly), expected)


@pytest.mark.parametrize("kind", ["tensor", "numpy", "dataloader"])
def test_a_fit_wraps_the_reference_set_once_where_it_enters(setup, kind, monkeypatch) -> None:
    model, images, labels, expected = setup
    reference = {
        "tensor": images,
        "numpy": images.numpy(),
        "dataloader": DataLoader(TensorDataset(images, labels), batch_size=7),
    }[kind]
    wrapped: list[ReferenceSet] = []
    init = ReferenceSet.__post_init__

    def counted(self: ReferenceSet) -> None:
        wrapped.append(self)
        init(self)

    monkeypatch.setattr(ReferenceSet, "__post_init__", counted)
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=8, batch_size=16, progress=False)
    _same(ri.fit(reference).index, expected, labels if kind == "dataloader" else None)
    assert len(wrapped) == 1 and ri.reference is wrapped[0]
    assert torch.equal(ri.reference_images([3, 1]), images[[3, 1]])
    assert len(wrapped) == 1  # drawn from the set wrapped at fit


def test_numpy_rule_keeps_channels_first_when_both_could_be_channels() -> None:
    array = np.zeros((2, 3, 5, 3), np.float32)
    assert as_reference(array).source.shape == (2, 3, 5, 3)
    assert as_reference(np.zeros((2, 5, 5, 3), np.float32)).source.shape == (2, 3, 5, 5)


@pytest.mark.parametrize(
    ("reference", "error", "message"),
    [
        (
            DataLoader(torch.zeros(4, 1, 12, 12), batch_size=2, shuffle=True),
            ValueError,
            r"shuffles \(shuffle=True\).*shuffle=False, or its dataset",
        ),
        (
            DataLoader(torch.zeros(4, 1, 12, 12), sampler=SubsetRandomSampler([0, 1])),
            ValueError,
            "has a SubsetRandomSampler: .* pass that dataset",
        ),
        (np.zeros((4, 12, 12), np.float32), ValueError, "N x C x H x W or N x H x W x C"),
        (np.zeros((4, 1, 12, 12), np.uint8), ValueError, "must be floating point"),
        ("images/", TypeError, "a reference set must be a tensor, a NumPy array"),
        (
            DictDataset(torch.zeros(4, 1, 12, 12), torch.zeros(4), "x"),
            ValueError,
            r"dict with keys \['label', 'name', 'x'\]; the image must be under one of image, ",
        ),
    ],
)
def test_unusable_references_are_refused(setup, reference, error, message) -> None:
    model = setup[0]
    with pytest.raises(error, match=message):
        _fit(model, reference)


def test_finite_checks_are_exact_when_the_sum_overflows() -> None:
    """The checks sum first (one pass); finite values whose float32 sum overflows still pass,
    and one NaN or Inf among them is refused with its batch position."""
    big = torch.full((3, 1, 4, 4), 3e38)
    assert not torch.isfinite(big.sum())
    assert all_finite(big) and all_finite(torch.empty(0, 5))
    check_images(big)
    check_finite_rows("logits", big.flatten(1), big[:, 0, 0])
    for value in (math.nan, math.inf, -math.inf):
        bad = big.clone()
        bad[2, 0, 1, 3] = value
        assert not all_finite(bad)
        with pytest.raises(ValueError, match=r"NaN or Inf values \(batch positions \[2\]\)"):
            check_images(bad)
        with pytest.raises(ValueError, match=r"positions \[2\] give non-finite logits"):
            check_finite_rows("logits", big.flatten(1), bad.flatten(1))


def test_images_that_cannot_be_batched_get_a_one_line_error(setup) -> None:
    """An ImageFolder given no transform yields PIL images: say what to do, not collate's
    TypeError."""
    from PIL import Image

    class Pictures(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int):
            return Image.new("L", (12, 12)), i % 2

    model = setup[0]
    for reference in (Pictures(), torch.utils.data.DataLoader(Pictures(), batch_size=4)):
        with pytest.raises(ValueError, match="yields Image images, which cannot be batched: give"):
            _fit(model, reference)
