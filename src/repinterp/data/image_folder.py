"""A user's folder of images, one subfolder per class: `ImageFolderSet` (files checked,
hidden and unreadable ones skipped, links followed only inside the folder), `imagefolder`, and
`ImageFormat`, the side and normalisation its images are read at.
"""

import copy
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch import Tensor
from torchvision import datasets, transforms

from ..runtime.checksums import file_sha256
from .containers import (
    IMAGENET_NORMALIZATION,
    Normalization,
)
from .image_files import MAX_PIXELS, image_tensor, read_image


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


def imagefolder(
    path: str | Path, size: int = 224, normalization: Normalization = IMAGENET_NORMALIZATION
) -> ImageFolderSet:
    """A user's folder of images, one subfolder per class; see `ImageFolderSet`."""
    return ImageFolderSet(path, size=size, normalization=normalization)


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


def _normalization(mean: Sequence[float], std: Sequence[float]) -> Normalization:
    if len(mean) != 3 or len(std) != 3:
        raise ValueError(f"--mean and --std need 3 values (R G B), got {len(mean)} and {len(std)}")
    if not all(s > 0 for s in std):
        raise ValueError(f"--std must be positive, got {list(std)}")
    return Normalization(tuple(map(float, mean)), tuple(map(float, std)))
