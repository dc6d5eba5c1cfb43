"""The ``shapes`` benchmark's images: coloured shapes among distractors, drawn from a seed.

Each class is defined by either of two shapes (its sub-concepts), so that an interpretation can
be checked against known sub-concepts and ground-truth masks. `draw_shapes` draws the
images; [`shapes`][repinterp.data.datasets.shapes] makes them a data set.
"""

from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["DISTRACTORS", "SHAPE_CLASSES", "DrawnShapes", "draw_shapes", "shape_coverage"]

# Sub-concepts of each class, in class order; every shape fits in the unit disc.
SHAPE_CLASSES = (
    ("circle", "ring"),
    ("square", "cross"),
    ("triangle", "star"),
    ("diamond", "crescent"),
)
DISTRACTORS = ("line", "dots")
_CHUNK = 256


class DrawnShapes(NamedTuple):
    """What `draw_shapes` returns (the fields of a `repinterp.data.datasets.ImageSet`).

    Attributes:
        images: n x 3 x size x size float32 in [0, 1].
        labels: n int64 classes.
        class_names: one name per class ("circle or ring", ...).
        concepts: n int64 sub-concepts, indices into `concept_names`.
        masks: n x size x size bool, True on the class-defining shape's pixels.
        concept_names: one name per sub-concept.
    """

    images: Tensor
    labels: Tensor
    class_names: list[str]
    concepts: Tensor
    masks: Tensor
    concept_names: list[str]


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


def shape_coverage(name: str, partner: str, mix: float, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """How much of each pixel the class-defining object of sub-concept ``name`` covers, when
    it is mixed with the other sub-concept of its class, ``partner``, by ``mix`` in [0, 1]:
    ``m = (1 - mix / 2) * 1[name] + (mix / 2) * 1[partner]`` (float32, same shape as ``u``).

    ``mix = 0``: the shape itself (``m`` is its 0/1 indicator); ``mix = 1``: both shapes at
    half strength, the same for either sub-concept, so a class's two sub-concepts are drawn
    alike. The pixel is painted ``(1 - m) * background + m * colour``.
    """
    own = _class_shape(name, u, v).astype(np.float32)
    if mix == 0:
        return own
    other = _class_shape(partner, u, v).astype(np.float32)
    return np.float32(1 - mix / 2) * own + np.float32(mix / 2) * other


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


def draw_shapes(
    n: int,
    seed: int = 0,
    size: int = 56,
    n_classes: int = 3,
    max_distractors: int = 3,
    mix: float = 0.0,
) -> DrawnShapes:
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
        mix: how alike a class's two sub-concepts are drawn, in [0, 1] (`shape_coverage`):
            0 (the benchmark) draws each sub-concept's shape; 1 draws both shapes of its class
            at half strength, for either sub-concept, so that the sub-concept cannot be told
            from the image. The random draws do not depend on it: ``mix = 0`` gives the
            benchmark bit for bit, and every ``mix`` draws the same scenes.

    Returns:
        `DrawnShapes`: images n x 3 x size x size in [0, 1], labels, `concepts` (index into
        `concept_names`, which lists ``2 * n_classes`` shapes; class = concept // 2) and `masks`
        n x size x size (True on the class-defining shape's pixels: where its coverage is
        above 0, both shapes' pixels when ``mix > 0``).
    """
    if not 0 <= mix <= 1:
        raise ValueError(f"mix must be in [0, 1], got {mix}")
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
            partner = concept_names[c ^ 1]  # the other sub-concept of the class
            cover = shape_coverage(name, partner, mix, along / r, across / r)
            masks[idx] = cover > 0
            local = image[idx - start]
            alpha = cover[:, None]  # exact at 0 and 1: mix = 0 paints as the benchmark does
            image[idx - start] = (1 - alpha) * local + alpha * shape_colour[idx, :, None, None]

        image += 0.03 * rng.standard_normal(image.shape, dtype=np.float32)
        images[rows] = np.clip(image, 0, 1)

    return DrawnShapes(
        images=torch.from_numpy(images),
        labels=torch.from_numpy(concepts // 2),
        class_names=[" or ".join(pair) for pair in SHAPE_CLASSES[:n_classes]],
        concepts=torch.from_numpy(concepts),
        masks=torch.from_numpy(masks),
        concept_names=concept_names,
    )
