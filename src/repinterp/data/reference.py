"""What the engine reads: reference sets (their size, batches and single images) and batches
of images, checked and converted to the engine's dtype.

A reference set is what [`build_index`][repinterp.store.index_build.build_index] indexes.
[`as_reference`][repinterp.data.reference.as_reference] accepts, and the engine reads by index
(``Q``'s sources are drawn by position):

- an N x C x H x W tensor;
- a NumPy array, N x C x H x W, or N x H x W x C when its last dimension is 1 or 3 and its
  second is not (read without a copy);
- a map-style ``Dataset``, or a list of images, whose items are an image tensor, an
  ``(image, label, ...)`` tuple, or a dict with the image under one of `IMAGE_KEYS`
  (and the label, if any, under one of `LABEL_KEYS`);
- a ``DataLoader`` over such a Dataset, read in the Dataset's order with the loader's
  ``collate_fn``, ``num_workers`` and ``worker_init_fn`` (its batch size and ``drop_last``
  are not used: every image is indexed). A shuffling loader (``shuffle=True``) or one with
  another sampler is refused: the index's rows must follow one order that a later pass can
  reproduce;
- a ``DataLoader`` over an ``IterableDataset`` (or that Dataset itself): it has no random
  access, so it is read once, in order, into memory.

A set is wrapped once, where it enters the engine (`as_reference` gives a
[`ReferenceSet`][repinterp.data.reference.ReferenceSet], and gives one back unchanged), and the
wrapped set is passed down: its size, batches and single images are read through it, and every
kind is told apart there and nowhere else. Every batch the engine computes on passes
[`as_batch`][repinterp.data.reference.as_batch].
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
    default_collate,
)

from .inputs import channels_first, check_dense

__all__ = [
    "IMAGE_KEYS",
    "LABEL_KEYS",
    "Reference",
    "ReferenceSet",
    "all_finite",
    "as_batch",
    "as_reference",
    "check_finite_rows",
    "check_images",
    "first_image",
    "gather_images",
]

Reference = Tensor | np.ndarray | Dataset | DataLoader | Sequence[Any]


def all_finite(tensor: Tensor) -> bool:
    """Whether every value of ``tensor`` is finite: one sum (a NaN or an Inf makes it NaN or
    Inf), then, only if that sum is not finite (it may overflow), the values one by one."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def check_images(
    images: Tensor,
    shape: Sequence[int] | None = None,
    what: str = "images",
    pixels: bool = False,
    nonempty: bool = False,
    expected_by: str | None = None,
) -> None:
    """Raise ``ValueError`` unless ``images`` is a finite floating N x C x H x W batch (dense,
    with values: not sparse, not on the meta device).

    Args:
        images: the batch.
        shape: the expected C x H x W, if known.
        what: how to name the batch in the message.
        pixels: the values must also lie in [0, 1] (pixel space, before normalisation).
        nonempty: N must be at least 1.
        expected_by: who expects ``shape``, to say so in the message (e.g. ``"the index"``:
            "... the index expects (1, 28, 28)"); None: "... expected (1, 28, 28)".
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"{what} must be a tensor, got {type(images).__name__}")
    check_dense(images, what)
    if images.ndim != 4:
        one = " (one image: image[None])" if images.ndim == 3 else ""
        raise ValueError(f"{what} must be N x C x H x W{one}, got shape {tuple(images.shape)}")
    if not images.is_floating_point():
        todo = "" if pixels else " and normalise them as the model expects"
        raise ValueError(
            f"{what} must be floating point, got {images.dtype}: scale the pixels to [0, 1] "
            f"(x / 255){todo}"
        )
    if nonempty and images.shape[0] == 0:
        raise ValueError(f"{what} holds no image")
    if shape is not None and tuple(images.shape[1:]) != tuple(shape):
        expects = f"{expected_by} expects" if expected_by else "expected"
        raise ValueError(
            f"{what} have C x H x W = {tuple(images.shape[1:])}, {expects} {tuple(shape)}"
        )
    if pixels:
        inside = ((images >= 0) & (images <= 1)).flatten(1).all(1)
        if not bool(inside.all()):
            bad = (~inside).nonzero().flatten()[:5].tolist()
            raise ValueError(
                f"{what} must be in [0, 1] pixel space, before normalisation (NaN or values "
                f"outside it at batch positions {bad})"
            )
        return
    if not all_finite(images):
        finite = torch.isfinite(images).flatten(1).all(1)
        bad = (~finite).nonzero().flatten()[:5].tolist()
        raise ValueError(f"{what} contain NaN or Inf values (batch positions {bad})")


IMAGE_KEYS = ("image", "pixel_values", "img", "input", "inputs")
LABEL_KEYS = ("label", "labels", "target")


def _from_numpy(array: np.ndarray) -> Tensor:
    if array.ndim != 4:
        raise ValueError(
            f"a NumPy reference set must be N x C x H x W or N x H x W x C, got shape {array.shape}"
        )
    with warnings.catch_warnings():  # a read-only (memory-mapped) array is only ever read
        warnings.filterwarnings("ignore", message=".*not writable.*")
        tensor = torch.from_numpy(array)
    return channels_first(tensor)


def _read_all(loader: DataLoader) -> Tensor | TensorDataset:
    """An iterable loader's images (and labels), read once, in order."""
    images, labels = [], []
    for batch in loader:
        image, label = _split_item(batch)
        images.append(image.unsqueeze(0) if image.ndim == 3 else image)
        if label is not None:
            labels.append(label.reshape(-1))
    if not images:
        return torch.empty(0)
    if labels and len(labels) != len(images):
        raise ValueError("the reference DataLoader yields labels for some images only")
    return TensorDataset(torch.cat(images), torch.cat(labels)) if labels else torch.cat(images)


def as_reference(reference: Reference | ReferenceSet) -> ReferenceSet:
    """``reference`` wrapped in the form the engine reads by index (see the module's
    docstring); a `ReferenceSet` is given back as it is.

    Raises:
        ValueError: a shuffling DataLoader or one with another sampler; a NumPy array that is
            not 4-D.
        TypeError: anything else that is not a reference set.
    """
    if isinstance(reference, ReferenceSet):
        return reference
    if isinstance(reference, np.ndarray):
        return ReferenceSet(_from_numpy(reference))
    if isinstance(reference, IterableDataset):
        return ReferenceSet(_read_all(DataLoader(reference, batch_size=64)))
    if isinstance(reference, DataLoader):
        if isinstance(reference.dataset, IterableDataset):
            return ReferenceSet(_read_all(reference))
        shuffles = isinstance(reference.sampler, RandomSampler)
        if shuffles:
            raise ValueError(
                "the reference DataLoader shuffles (shuffle=True), but the index's rows must "
                "keep one order: pass a DataLoader with shuffle=False, or its dataset"
            )
        batches = reference.batch_sampler
        if not isinstance(reference.sampler, SequentialSampler) or not (
            batches is None or type(batches) is BatchSampler
        ):
            raise ValueError(
                f"the reference DataLoader has a {type(reference.sampler).__name__}: it is "
                "read in its dataset's order, so pass that dataset (e.g. a Subset) instead"
            )
        return ReferenceSet(reference)
    if isinstance(reference, (Tensor, Dataset, list, tuple)):
        return ReferenceSet(reference)
    raise TypeError(
        f"a reference set must be a tensor, a NumPy array, a Dataset, a DataLoader or a list of "
        f"images, got {type(reference).__name__}"
    )


def check_finite_rows(what: str, *tensors: Tensor) -> None:
    """Raise ``ValueError`` naming the batch positions (rows; the first five) where any of
    ``tensors`` (each N x ...) is not finite, and how many there are: what the model computed
    from finite images overflowed."""
    if all(all_finite(t) for t in tensors):
        return
    finite = torch.stack([torch.isfinite(t.flatten(1)).all(1) for t in tensors]).all(0)
    bad = (~finite).nonzero().flatten()
    raise ValueError(
        f"images at batch positions {bad[:5].tolist()} give non-finite {what} (NaN or Inf, "
        f"{len(bad)} of {len(finite)} images): their values are too large for the model"
    )


def as_batch(
    images: Tensor,
    dtype: torch.dtype,
    device: torch.device | None = None,
    shape: Sequence[int] | None = None,
    what: str = "images",
    non_blocking: bool = False,
) -> Tensor:
    """``images`` on ``device`` (None: where they are) in ``dtype`` (a floating batch of any
    precision is converted), then checked by [`check_images`][repinterp.data.reference.check_images]
    (against the index's C x H x W ``shape``, if given).

    Raises:
        TypeError: not a tensor.
        ValueError: see [`check_images`][repinterp.data.reference.check_images]; values that
            overflow ``dtype`` count as Inf.
    """
    if isinstance(images, Tensor):
        check_dense(images, what)
    if isinstance(images, Tensor) and images.is_floating_point():
        images = images.to(device=device, dtype=dtype, non_blocking=non_blocking)
    check_images(images, shape, what=what, expected_by="the index")
    return images


def _split_item(item: Any) -> tuple[Tensor, Tensor | None]:
    """``(images, labels or None)`` of a collated batch (or of one item)."""
    if isinstance(item, Mapping):
        image_key = next((k for k in IMAGE_KEYS if k in item), None)
        if image_key is None:
            raise ValueError(
                f"a reference item is a dict with keys {sorted(map(str, item))}; the image must "
                f"be under one of {', '.join(IMAGE_KEYS)}"
            )
        label_key = next((k for k in LABEL_KEYS if k in item), None)
        labels = torch.as_tensor(item[label_key]) if label_key else None
        return item[image_key], labels
    if isinstance(item, (tuple, list)):
        labels = torch.as_tensor(item[1]) if len(item) > 1 else None
        return item[0], labels
    return item, None


def _collate(items: list[Any]) -> Any:
    """torch's ``default_collate``, with a one-line error for items it cannot batch (e.g. the
    PIL images of an ImageFolder given no transform)."""
    try:
        return default_collate(items)
    except TypeError as exc:
        image = _split_item(items[0])[0] if items else None
        raise ValueError(
            f"the reference set yields {type(image).__name__} images, which cannot be batched: "
            "give it a transform that makes normalised tensors (e.g. torchvision's ToTensor and "
            "Normalize)"
        ) from exc


class _RangeSampler(Sampler[list[int]]):
    """Batches of consecutive indices, one ``(start, stop)`` range each."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self.ranges = ranges

    def __iter__(self) -> Iterator[list[int]]:
        return (list(range(start, stop)) for start, stop in self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)


@dataclass(frozen=True, eq=False)
class ReferenceSet:
    """A reference set as the engine reads it: wrapped once (`as_reference`), then passed down.

    Attributes:
        source: the set as given, or what it became to be read by index (a NumPy array's
            tensor, an iterable set read into memory); not a copy.
    """

    source: Tensor | Dataset | DataLoader | Sequence[Any]

    def __post_init__(self) -> None:
        source, collate, workers, init = self.source, _collate, None, None
        if isinstance(source, DataLoader):
            own = source.collate_fn if source.batch_sampler is not None else _collate
            collate = _collate if own is default_collate else own
            workers, init = source.num_workers, source.worker_init_fn
            source = source.dataset
        tensors = None
        if isinstance(source, Tensor):
            tensors = (source,)
        elif type(source) is TensorDataset and collate is _collate:
            tensors = source.tensors
        object.__setattr__(self, "_dataset", source)
        object.__setattr__(self, "_collate", collate)
        object.__setattr__(self, "_loader", (workers, init))
        # Images (and labels) held in tensors are sliced as a whole, never item by item.
        object.__setattr__(self, "_tensors", tensors)

    def __len__(self) -> int:
        if self._tensors is not None:
            return self._tensors[0].shape[0]
        try:
            return len(self._dataset)
        except TypeError as exc:
            raise TypeError("the reference Dataset must define __len__") from exc

    def batches(
        self,
        batch_size: int,
        num_workers: int = 0,
        ranges: Sequence[tuple[int, int]] | None = None,
        pin_memory: bool = False,
    ) -> Iterator[tuple[Tensor, Tensor | None]]:
        """Yield ``(images N x C x H x W, labels N or None)``.

        A Dataset is read with a DataLoader (``num_workers`` worker processes, pinned memory if
        asked); a DataLoader's dataset with its own ``collate_fn``, ``num_workers`` and
        ``worker_init_fn``.

        Args:
            ranges: the ``(start, stop)`` of each batch; default: consecutive batches of
                ``batch_size`` over the whole set.
        """
        if ranges is None:
            n = len(self)
            ranges = [(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]
        tensors = self._tensors
        if tensors is not None:
            for start, stop in ranges:
                yield tensors[0][start:stop], tensors[1][start:stop] if len(tensors) > 1 else None
            return
        workers, init = self._loader
        loader = DataLoader(
            self._dataset,
            batch_sampler=_RangeSampler(ranges),
            num_workers=num_workers if workers is None else workers,
            collate_fn=self._collate,
            pin_memory=pin_memory,
            worker_init_fn=init,
        )
        for item in loader:
            yield _split_item(item)

    def gather(self, indices: Tensor) -> Tensor:
        """The images at ``indices`` (long), stacked: N x C x H x W (0 x C x H x W for no
        index, an item's shape read off the first)."""
        if self._tensors is not None:
            return self._tensors[0][indices.to(self._tensors[0].device)]
        if not len(indices):
            return self.gather(torch.zeros(1, dtype=torch.long))[:0]
        return _split_item(self._collate([self._dataset[int(i)] for i in indices]))[0]


def first_image(reference: ReferenceSet, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The first image of a reference set, as a checked 1 x C x H x W batch (to find the target
    layer with its shape).

    Raises:
        ValueError: the reference set is empty, or its first image is bad.
    """
    if len(reference) == 0:
        raise ValueError("the reference set is empty")
    first = reference.gather(torch.zeros(1, dtype=torch.long))
    return as_batch(first, dtype, device, what="reference images")


def gather_images(
    reference: Reference | ReferenceSet | None, indices: Tensor | list[int], n: int
) -> Tensor | None:
    """Images of ``reference`` (anything `as_reference` takes) by index, checked to be a set of
    ``n`` images (the index's); None for no reference set.

    Raises:
        ValueError: ``reference`` holds another number of images than ``n``.
    """
    if reference is None:
        return None
    source = as_reference(reference)
    if len(source) != n:
        raise ValueError(
            f"the reference set holds {len(source)} images; the index was fitted on {n}"
        )
    return source.gather(torch.as_tensor(indices, dtype=torch.long))
