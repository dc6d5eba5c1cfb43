"""The in-memory data set and how its pixels become model inputs.

`ImageSet` keeps images in [0, 1] pixel space with the `Normalization` that maps pixels to
model inputs, so that code which edits pixels (e.g. blacking out all but the most important
ones) can do so in [0, 1] space and normalise afterwards; indexing it gives what a model
consumes: ``(normalised image C x H x W float32, label int)``. `ImageTransform` reads an image
file as the model takes it.
"""

import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

from .image_files import load_image_file


@dataclass(frozen=True)
class Normalization:
    """Per-channel affine map from [0, 1] pixels to model inputs: ``(x - mean) / std``.

    Attributes:
        mean: one value per channel, in pixel units.
        std: one value per channel, in pixel units.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __call__(self, images: Tensor) -> Tensor:
        """Normalise pixels.

        Args:
            images: ... x C x H x W in [0, 1] (a single image or a batch).

        Returns:
            A tensor of the same shape and dtype, in model-input units.
        """
        mean, std = self._stats(images)
        return (images - mean) / std

    def inverse(self, inputs: Tensor) -> Tensor:
        """Map model inputs (... x C x H x W) back to [0, 1] pixel space."""
        mean, std = self._stats(inputs)
        return inputs * std + mean

    def _stats(self, like: Tensor) -> tuple[Tensor, Tensor]:
        if like.dim() < 3 or like.shape[-3] != len(self.mean):
            raise ValueError(
                f"expected ... x {len(self.mean)} x H x W images, got shape {tuple(like.shape)}"
            )
        mean = torch.tensor(self.mean, dtype=like.dtype, device=like.device).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=like.dtype, device=like.device).view(-1, 1, 1)
        return mean, std


IMAGENET_NORMALIZATION = Normalization(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
MNIST_NORMALIZATION = Normalization(mean=(0.1307,), std=(0.3081,))
DIGITS_NORMALIZATION = Normalization(mean=(0.3053,), std=(0.3760,))
SHAPES_NORMALIZATION = Normalization(mean=(0.49, 0.49, 0.49), std=(0.32, 0.32, 0.32))


@dataclass(frozen=True)
class ImageTransform:
    """The command line's reading of an image
    ([`load_image_file`][repinterp.workspace.load_image_file], then the data set's
    normalisation), as an interpreter's ``transform``: an index made by ``repinterp fit``
    records it (`record`), and every way of loading that index gives it back
    ([`open_index`][repinterp.workspace.open_index],
    [`RepresentativeInterpreter.load`][repinterp.interpreter.RepresentativeInterpreter.load]),
    so that ``explain`` takes a PIL image or a NumPy array of pixels and explains it as
    ``repinterp explain FILE`` does.

    Attributes:
        shape: the index's C x H x W.
        normalization: the data set's.
    """

    shape: tuple[int, int, int]
    normalization: Normalization

    def __call__(self, image: Image.Image) -> Tensor:
        """``image`` as the model takes it: C x H x W, normalised."""
        return self.normalization(load_image_file(image, self.shape))

    def record(self) -> dict[str, Any]:
        """What an index's manifest keeps of it (JSON-ready)."""
        return {
            "reads": "image file",
            "shape": list(self.shape),
            "mean": list(self.normalization.mean),
            "std": list(self.normalization.std),
        }

    @classmethod
    def from_record(cls, record: Any) -> "ImageTransform":
        """The transform a manifest recorded (`record`).

        Raises:
            ValueError: ``record`` is not one (a damaged manifest).
        """
        try:
            shape = tuple(int(n) for n in record["shape"])
            mean = tuple(float(v) for v in record["mean"])
            std = tuple(float(v) for v in record["std"])
            ok = record["reads"] == "image file" and len(shape) == 3
            ok = ok and len(mean) == len(std) == shape[0] and all(v > 0 for v in std)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok or not all(np.isfinite(mean + std)):
            raise ValueError(f"the recorded transform {reprlib.repr(record)} is not one")
        return cls(shape, Normalization(mean, std))  # type: ignore[arg-type]


@dataclass(eq=False, repr=False)
class ImageSet(Dataset):
    """Images held in memory, with labels and optional ground truth.

    Attributes:
        images: N x C x H x W float32 in [0, 1].
        labels: N int64 class indices into `class_names`.
        class_names: one name per class.
        normalization: maps `images` to model inputs.
        concepts: N int64 sub-concept indices into `concept_names`, or None.
        masks: N x H x W bool, the pixels of the class-defining object, or None.
        concept_names: one name per sub-concept, or None.
        marked: N bool, True on the images that carry a planted mark (`with_mark`), or None;
            for evaluation only (``set[i]`` does not give it).
        mark_box: the mark's box ``(x0, y0, x1, y1)`` in pixels (x1, y1 exclusive), or None.
        cue_masks: N x H x W bool, the pixels each image's planted cue covers (or would
            cover, on an image without it; `repinterp.data.cues`), or None; evaluation only.

    ``set[i]`` is ``(normalization(images[i]), int(labels[i]))``.
    """

    images: Tensor
    labels: Tensor
    class_names: list[str]
    normalization: Normalization
    concepts: Tensor | None = None
    masks: Tensor | None = None
    concept_names: list[str] | None = None
    marked: Tensor | None = None
    mark_box: tuple[int, int, int, int] | None = None
    cue_masks: Tensor | None = None

    def __post_init__(self) -> None:
        n = len(self.images)
        if self.images.dim() != 4 or self.images.dtype != torch.float32:
            raise ValueError("images must be an N x C x H x W float32 tensor")
        if self.labels.shape != (n,) or self.labels.dtype != torch.int64:
            raise ValueError(f"labels must be an int64 tensor of shape ({n},)")
        if self.concepts is not None and self.concepts.shape != (n,):
            raise ValueError(f"concepts must have shape ({n},)")
        if self.marked is not None and (
            self.marked.shape != (n,) or self.marked.dtype != torch.bool
        ):
            raise ValueError(f"marked must be a bool tensor of shape ({n},)")
        for name in ("masks", "cue_masks"):
            value = getattr(self, name)
            if value is not None and (
                value.shape != (n, *self.images.shape[2:]) or value.dtype != torch.bool
            ):
                raise ValueError(f"{name} must be an N x H x W bool tensor, matching images")

    def __repr__(self) -> str:
        extras = [n for n in ("concepts", "masks", "marked") if getattr(self, n) is not None]
        return (
            f"ImageSet({len(self)} images {'x'.join(map(str, self.images.shape[1:]))}, "
            f"{len(self.class_names)} classes{''.join(f', {e}' for e in extras)})"
        )

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.normalization(self.images[index]), int(self.labels[index])

    def pixels(self, index: int) -> Tensor:
        """Image `index` in [0, 1] pixel space, C x H x W."""
        return self.images[index]

    def inputs(self) -> Tensor:
        """All images as model inputs: N x C x H x W float32, normalised."""
        return self.normalization(self.images)

    def subset(self, indices: Sequence[int] | Tensor) -> "ImageSet":
        """The images at `indices`, in that order, with everything that belongs to them."""
        index = torch.as_tensor(indices, dtype=torch.int64)
        return ImageSet(
            images=self.images[index],
            labels=self.labels[index],
            class_names=self.class_names,
            normalization=self.normalization,
            concepts=None if self.concepts is None else self.concepts[index],
            masks=None if self.masks is None else self.masks[index],
            concept_names=self.concept_names,
            marked=None if self.marked is None else self.marked[index],
            mark_box=self.mark_box,
            cue_masks=None if self.cue_masks is None else self.cue_masks[index],
        )
