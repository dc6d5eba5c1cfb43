"""What the engine reads: reference sets (their size, batches and single images) and batches
of images, checked.

A reference set is what :func:`repinterp.build.build_index` indexes: an N x C x H x W tensor,
or a map-style Dataset of images or ``(image, label)`` pairs (read with a DataLoader). Every
kind of reference set is handled by the three functions here (:func:`reference_size`,
:func:`iter_batches`, :func:`gather_images`) and nowhere else, so that accepting another kind
(a DataLoader, a NumPy array, a list of images) means one more branch in each of them.
Every batch the engine computes on passes :func:`check_batch`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from .utils import check_images

__all__ = ["Reference", "check_batch", "gather_images", "iter_batches", "reference_size"]

Reference = Tensor | Dataset


def reference_size(reference: Reference) -> int:
    """Number of images in a tensor or a sized Dataset."""
    if isinstance(reference, Tensor):
        return reference.shape[0]
    try:
        return len(reference)  # type: ignore[arg-type]
    except TypeError as exc:
        raise TypeError("the reference Dataset must define __len__") from exc


def check_batch(images: Tensor, shape: Sequence[int] | None = None, what: str = "images") -> None:
    """Raise ``ValueError`` unless ``images`` is a finite floating N x C x H x W batch (and of
    the index's C x H x W ``shape``, if given); see :func:`repinterp.utils.check_images`."""
    check_images(images, shape, what=what, expected_by="the index")


def _split_item(item: Any) -> tuple[Tensor, Tensor | None]:
    if isinstance(item, (tuple, list)):
        images = item[0]
        labels = torch.as_tensor(item[1]) if len(item) > 1 else None
        return images, labels
    return item, None


class _RangeSampler(Sampler[list[int]]):
    """Batches of consecutive indices, one ``(start, stop)`` range each."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self.ranges = ranges

    def __iter__(self) -> Iterator[list[int]]:
        return (list(range(start, stop)) for start, stop in self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)


def iter_batches(
    reference: Reference,
    batch_size: int,
    num_workers: int = 0,
    ranges: Sequence[tuple[int, int]] | None = None,
    pin_memory: bool = False,
) -> Iterator[tuple[Tensor, Tensor | None]]:
    """Yield ``(images N x C x H x W, labels N or None)`` from a tensor or a Dataset.

    A Dataset may yield images or ``(image, label)`` pairs; it is read with a DataLoader
    (``num_workers`` worker processes, pinned memory if asked).

    Args:
        ranges: the ``(start, stop)`` of each batch; default: consecutive batches of
            ``batch_size`` over the whole set.
    """
    if ranges is None:
        n = reference_size(reference)
        ranges = [(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]
    if isinstance(reference, Tensor):
        for start, stop in ranges:
            yield reference[start:stop], None
        return
    loader = DataLoader(
        reference,
        batch_sampler=_RangeSampler(ranges),
        num_workers=num_workers,
        pin_memory=pin_memory,
    )
    for item in loader:
        yield _split_item(item)


def gather_images(reference: Reference, indices: Tensor) -> Tensor:
    """The images at ``indices`` (long), stacked: N x C x H x W."""
    if isinstance(reference, Tensor):
        return reference[indices.to(reference.device)]
    return torch.stack([_split_item(reference[int(i)])[0] for i in indices])
