"""A class's strategies: groups of the images a model predicts one class for, found without
labels, and the bisectors of their k-means cells, the separators that let a cover cut one out.

`discover_strategies` groups each predicted class's rows of ``vectors`` (one vector per
image, e.g. its flattened feature map at the target layer) by k-means in a standardised space:
the columns are centred and scaled (`STANDARDISATIONS`), and for each class k-means (3 starts,
seeded) runs for every k in ``2 .. k_max`` whose clusters all hold at least ``min_size`` rows.
The silhouette is undefined at k = 1, and a fixed threshold on it depends on the dimension (one
Gaussian blob of 60 rows in 12 dimensions reaches 0.15 at k = 4), so each k's mean silhouette
is set against the best silhouette k-means reaches at the same k on `NULL_DRAWS` draws of as
many rows of *one* Gaussian with the class's mean and covariance (`_gaussian_like`): the k of
the highest silhouette is kept when its gain over the Gaussian's reaches ``min_gain``
(`MIN_GAIN`), else the class is one strategy. The silhouettes are read in the class's
`PCA_DIM` principal axes; the k kept is then fitted on the standardised rows themselves (k-means
started from its clusters' means). Strategies get global ids, class by class in ascending class
order; `Strategies.assign` puts new rows in the nearest strategy of their class.

`cell_bisectors` gives, for each pair of strategies of one class, the bisector of their centres
as a hyperplane on the raw vectors (the standardisation is affine): a class's k-means cells are
the intersections of these half-spaces, so a polytope that holds its strategy's bisectors holds
every image `assign` puts in that strategy and none it puts in another strategy of the class.

The rule was chosen by a criterion written before the measurements (docs/method.md, issue 36):
among the vectors (flattened features, spatially pooled features, channel relevances), the
standardisations and ``min_gain`` in {0.02, 0.05, 0.1} (and, beside them, a diagonal Gaussian
mixture with k by BIC, `repinterp.evaluation.subclass.pcx_groups`), keep the candidate that
passes most of: within-class AMI of the unseen images' strategies against the sub-concepts at
least half the k-means ceiling and 0.05 above the shuffle null's 95th percentile, on
``mnist-super`` and on ``shapes`` (bundled models), and F1 >= 0.8 of the strategy holding most
marked images on the marked sets; ties broken by the mean AMI of the first two.

Measured (one model per data set, seed 0, its default layer; strategies found on 2,000
reference images, AMI and F1 on 1,000 unseen ones assigned by `Strategies.assign`; AMI null
p95 <= 0.005 everywhere; ceiling: k-means at matched k on the unseen features; F1 on
``mnist-mark:0.3`` and ``shapes-mark:0.3``; S: strategies found on ``mnist-mark:0`` (10
classes) and ``shapes-mark:0`` (3 classes)):

| vectors, standardise, min_gain | AMI super | AMI shapes | F1 mnist | F1 shapes | S at F=0 |
|---|---|---|---|---|---|
| features, global, 0.02 (chosen) | 0.555 | 0.009 | 0.967 | 1.000 | 18, 9 |
| features, global, 0.05 | 0.424 | 0.009 | 0.967 | 1.000 | 12, 7 |
| features, columns, 0.02 | 0.463 | 0.014 | 1.000 | 1.000 | 22, 17 |
| features, columns, 0.05 | 0.463 | 0.008 | 1.000 | 1.000 | 13, 17 |
| channel relevance, global, 0.02 | 0.497 | 0.034 | 1.000 | 0.981 | 23, 7 |
| channel relevance, global, 0.05 | 0.416 | 0.034 | 1.000 | 0.981 | 17, 6 |
| pooled, global, 0.05 | 0.219 | 0.000 | 0.951 | 0.941 | 18, 4 |
| Gaussian mixture, BIC, channel relevance | 0.378 | 0.090 | 0.760 | 0.793 | 57, 24 |
| ceiling (k-means, matched k) | 0.404 | 0.053 | | | |

Every k-means candidate passes three rows (mnist-super, both marked sets) and fails ``shapes``,
whose features at this layer hardly follow its sub-concepts (the ceiling itself is 0.053); the
mixture passes two. The first tie-break keeps the flattened features, global standardisation,
``min_gain`` 0.02: the defaults here.

The table was measured with the silhouettes read on all the columns against one Gaussian draw.
Two changes came after it, neither tuned on it: the principal axes (the fit of ``mnist-super``'s
4,000 reference images took 81 s of discovery, 8 s with them), and the best of `NULL_DRAWS`
draws (one draw let a single Gaussian blob of 100 rows in 8 dimensions split in three at
``min_gain`` 0.02: its silhouette beat one draw's by 0.0205). On the bundled ``mnist-super``
model (4,000 reference images) the within-class AMI of the reference images' strategies with
the digit is 0.81, 0.91, 0.62, 0 (one strategy) and 0.50 in its five classes, with or without
the principal axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "K_MAX",
    "MIN_GAIN",
    "MIN_SIZE",
    "SEPARATOR_CLASSES",
    "STANDARDISATIONS",
    "Strategies",
    "cell_bisectors",
    "discover_strategies",
    "mean_silhouette",
    "strategy_pairs",
]

K_MAX = 8
"""The most strategies per class."""
MIN_GAIN = 0.02
"""How much a split's mean silhouette must exceed that of one Gaussian of the class's shape
to be kept (below it: one strategy)."""
MIN_SIZE = 5
"""The fewest rows a strategy may hold."""
NULL_DRAWS = 5
"""Draws of one Gaussian of a class's shape; a split must beat the best of their silhouettes."""
PCA_DIM = 32
"""The principal axes of a class's rows in which the number of its strategies is chosen."""
SILHOUETTE_SAMPLE = 1000
"""The silhouette of a class is read on at most this many of its rows (seeded)."""
STANDARDISATIONS = ("columns", "global")
"""``columns``: each column centred and divided by its standard deviation (1 where it is 0);
``global``: centred, all divided by one scale, the root mean square of the centred values (the
geometry of the raw vectors)."""
SEPARATOR_CLASSES = -2
"""The ``top_classes`` of a separator between two strategies, a cell's bisector (it separates
no pair of classes)."""


def _check_rows(vectors: Tensor, classes: Tensor, name: str = "vectors") -> None:
    if vectors.ndim != 2:
        raise ValueError(f"{name} must be N x D, got shape {tuple(vectors.shape)}")
    if classes.shape != (len(vectors),):
        raise ValueError(
            f"classes must have shape ({len(vectors)},) for {len(vectors)} {name}, "
            f"got {tuple(classes.shape)}"
        )
    if classes.dtype.is_floating_point or classes.dtype == torch.bool:
        raise ValueError(f"classes must be integers, got {classes.dtype}")
    if not torch.isfinite(vectors).all():
        raise ValueError(f"{name} hold NaN or infinite values")


@dataclass(frozen=True)
class Strategies:
    """The strategies of each predicted class.

    Attributes:
        classes: S int64, the predicted class of each strategy (ascending; a class's
            strategies are consecutive ids).
        centres: S x D float32 centres, in the standardised space.
        mean: D float32, subtracted from a vector before ``scale`` divides it.
        scale: D float32, positive.
        assignment: N int64, the strategy of each row ``discover_strategies`` was given.
        criterion: C x 2 x (k_max - 1) float32, per fitted class (``fitted``) the mean
            silhouette at k = 2 .. k_max (NaN where k was not tried), and at the k of the
            highest that of one Gaussian of the class's shape (NaN at the other k).
        fitted: C int64, the classes of ``criterion``'s rows (ascending).
        settings: how they were found (seed, k_max, min_gain, min_size, standardise).
    """

    classes: Tensor
    centres: Tensor
    mean: Tensor
    scale: Tensor
    assignment: Tensor
    criterion: Tensor
    fitted: Tensor
    settings: dict[str, Any]

    def __len__(self) -> int:
        return len(self.classes)

    @property
    def k(self) -> dict[int, int]:
        """class -> its number of strategies."""
        values, counts = self.classes.unique(return_counts=True)
        return dict(zip(values.tolist(), counts.tolist(), strict=True))

    def standardised(self, vectors: Tensor) -> Tensor:
        """``vectors`` (N x D) in the space of the centres."""
        return (vectors.float().cpu() - self.mean) / self.scale

    def assign(self, vectors: Tensor, classes: Tensor) -> Tensor:
        """The strategy of each row: the nearest centre (Euclidean, standardised space) among
        the strategies of its predicted class; -1 for a class without strategies (no fitted
        row was predicted it).

        Args:
            vectors: N x D, computed as the fitted ones were.
            classes: N predicted classes.

        Returns:
            N int64.

        Raises:
            ValueError: shapes that do not match, NaN or infinite values.
        """
        _check_rows(vectors, classes)
        if vectors.shape[1] != self.centres.shape[1]:
            raise ValueError(
                f"vectors have {vectors.shape[1]} columns, the strategies {self.centres.shape[1]}"
            )
        z, classes = self.standardised(vectors), classes.cpu()
        out = torch.full((len(z),), -1, dtype=torch.long)
        for c in classes.unique().tolist():
            ids = (self.classes == c).nonzero().flatten()
            rows = (classes == c).nonzero().flatten()
            if len(ids):
                out[rows] = ids[torch.cdist(z[rows], self.centres[ids]).argmin(1)]
        return out

    def tensors(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """Plain tensors (for safetensors) and a JSON-able dict that `from_tensors` reads."""
        names = ("classes", "centres", "mean", "scale", "assignment", "criterion", "fitted")
        return {n: getattr(self, n).contiguous() for n in names}, dict(self.settings)

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], settings: dict[str, Any]) -> Strategies:
        """The strategies `tensors` gave.

        Raises:
            ValueError: a tensor missing.
        """
        names = ("classes", "centres", "mean", "scale", "assignment", "criterion", "fitted")
        missing = [n for n in names if n not in tensors]
        if missing:
            raise ValueError(f"strategies: tensors missing: {', '.join(missing)}")
        return cls(**{n: tensors[n] for n in names}, settings=dict(settings))


def _standardiser(x: Tensor, standardise: str) -> tuple[Tensor, Tensor]:
    mean = x.mean(0)
    centred = x - mean
    if standardise == "columns":
        scale = centred.pow(2).mean(0).sqrt()
        return mean, torch.where(scale > 0, scale, torch.ones_like(scale))
    rms = float(centred.pow(2).mean().sqrt())
    return mean, torch.full_like(mean, rms if rms > 0 else 1.0)


def _gaussian_like(z: np.ndarray, seed: int) -> np.ndarray:
    """n rows of one Gaussian with the mean and covariance of the rows ``z`` (drawn in their
    principal axes, seeded): what one strategy of this shape looks like."""
    centred = z - z.mean(0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    spread = singular / math.sqrt(max(len(z) - 1, 1))
    draw = np.random.default_rng(seed).standard_normal((len(z), len(singular)))
    return z.mean(0) + (draw * spread) @ axes


def _principal(z: np.ndarray, dim: int) -> np.ndarray:
    """The rows ``z`` (n x D) in their ``dim`` principal axes (fewer when they span fewer),
    centred: from the eigenvectors of the smaller of the n x n Gram and D x D covariance
    matrices."""
    centred = z - z.mean(0)
    if len(z) <= z.shape[1]:
        values, vectors = np.linalg.eigh(centred @ centred.T)
        top = np.argsort(values)[::-1][:dim]
        return vectors[:, top] * np.sqrt(np.clip(values[top], 0, None))
    values, axes = np.linalg.eigh(centred.T @ centred)
    return centred @ axes[:, np.argsort(values)[::-1][:dim]]


def mean_silhouette(data: np.ndarray, labels: np.ndarray, seed: int) -> float:
    """The mean silhouette of the rows ``data`` (n x D) grouped by ``labels`` (n), read on at
    most `SILHOUETTE_SAMPLE` rows drawn as scikit-learn's ``silhouette_score(...,
    sample_size, random_state=seed)`` draws them, with its value (a row alone in its group
    counts 0), from one n x n distance matrix rather than its per-call checks.

    Raises:
        ValueError: fewer than 2 groups, or as many as rows, among the rows read.
    """
    rows = np.random.RandomState(seed).permutation(len(data))[:SILHOUETTE_SAMPLE]
    _, groups = np.unique(labels[rows], return_inverse=True)
    counts = np.bincount(groups)
    if not 2 <= len(counts) < len(rows):
        raise ValueError(f"a silhouette needs 2 to n - 1 groups, got {len(counts)} of {len(rows)}")
    x = torch.from_numpy(np.ascontiguousarray(data[rows], dtype=np.float64))
    sums = torch.cdist(x, x).numpy() @ np.eye(len(counts))[groups]  # n x groups
    own = np.arange(len(rows)), groups
    with np.errstate(divide="ignore", invalid="ignore"):
        intra = sums[own] / (counts[groups] - 1)
        means = sums / counts
        means[own] = np.inf
        inter = means.min(1)
        values = (inter - intra) / np.maximum(intra, inter)
    return float(np.nan_to_num(values).mean())


def _split_class(
    z: np.ndarray, seed: int, k_max: int, min_gain: float, min_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, centres, criterion) of one class's standardised rows; the criterion is
    2 x (k_max - 1): the mean silhouette at k = 2 .. k_max (NaN where k was not tried), and at
    the k of the highest, the best of k-means on `NULL_DRAWS` draws of `_gaussian_like` rows
    (NaN elsewhere: it decides nothing there), both in the rows' `PCA_DIM` principal axes;
    the k kept is then fitted on the rows themselves, k-means started from the means of its
    clusters, so that the centres and labels are those of the standardised space."""
    from sklearn.cluster import KMeans  # here: sklearn is slow to import

    def silhouette(data: np.ndarray, k: int) -> tuple[float, KMeans]:
        model = KMeans(n_clusters=k, random_state=seed, n_init=3).fit(data)
        return mean_silhouette(data, model.labels_, seed), model

    criterion = np.full((2, k_max - 1), np.nan)
    best = None
    reduced = _principal(z, PCA_DIM)
    distinct = len(np.unique(reduced, axis=0))  # k-means finds no more clusters than points
    for k in range(2, min(k_max, len(z) // min_size, distinct) + 1):
        score, model = silhouette(reduced, k)
        if np.bincount(model.labels_, minlength=k).min() < min_size:
            continue
        criterion[0, k - 2] = score
        if best is None or score > criterion[0, best[0] - 2]:
            best = (k, model)
    if best is not None:  # the Gaussian's silhouette decides only at the k kept
        nulls = [_gaussian_like(reduced, seed + draw) for draw in range(NULL_DRAWS)]
        criterion[1, best[0] - 2] = max(silhouette(null, best[0])[0] for null in nulls)
    if best is None or criterion[0, best[0] - 2] - criterion[1, best[0] - 2] < min_gain:
        return np.zeros(len(z), dtype=np.int64), z.mean(0, keepdims=True), criterion
    k, labels = best[0], best[1].labels_
    start = np.stack([z[labels == j].mean(0) for j in range(k)])
    model = KMeans(n_clusters=k, init=start, n_init=1, random_state=seed).fit(z)
    return model.labels_.astype(np.int64), model.cluster_centers_, criterion


def discover_strategies(
    vectors: Tensor,
    classes: Tensor,
    seed: int = 0,
    k_max: int = K_MAX,
    min_gain: float = MIN_GAIN,
    min_size: int = MIN_SIZE,
    standardise: str = "global",
) -> Strategies:
    """Each predicted class's strategies, without labels (see the module's docstring).

    Args:
        vectors: N x D, one per image (e.g. flattened feature maps at the target layer).
        classes: N predicted classes.
        seed: k-means' and the silhouette sample's seed.
        k_max: the most strategies per class (>= 1; 1: one per class).
        min_gain: how much a split's silhouette must exceed the Gaussian's, in [-1, 1].
        min_size: the fewest rows of a strategy (>= 1).
        standardise: one of `STANDARDISATIONS`.

    Returns:
        `Strategies`, their ``assignment`` the strategy of every row.

    Raises:
        ValueError: no rows, shapes that do not match, NaN or infinite values, a setting out
            of range.
    """
    _check_rows(vectors, classes)
    if len(vectors) == 0:
        raise ValueError("no vectors to find strategies in")
    if standardise not in STANDARDISATIONS:
        raise ValueError(
            f"unknown standardise {standardise!r}; choose one of {', '.join(STANDARDISATIONS)}"
        )
    if k_max < 1 or min_size < 1 or not -1 <= min_gain <= 1:
        raise ValueError(
            f"k_max and min_size must be >= 1 and min_gain in [-1, 1], got {k_max}, "
            f"{min_size}, {min_gain}"
        )
    x = vectors.detach().float().cpu()
    mean, scale = _standardiser(x, standardise)
    z = ((x - mean) / scale).double().numpy()
    classes = classes.cpu().long()
    fitted = classes.unique()
    assignment = torch.zeros(len(x), dtype=torch.long)
    owners, centres, criteria = [], [], []
    for c in fitted.tolist():
        rows = (classes == c).nonzero().flatten()
        labels, class_centres, scores = _split_class(
            z[rows.numpy()], seed, k_max, min_gain, min_size
        )
        assignment[rows] = torch.from_numpy(labels) + len(owners)
        owners += [c] * len(class_centres)
        centres.append(torch.from_numpy(class_centres).float())
        criteria.append(torch.from_numpy(scores).float())
    settings = {
        "seed": seed,
        "k_max": k_max,
        "min_gain": min_gain,
        "min_size": min_size,
        "standardise": standardise,
    }
    return Strategies(
        classes=torch.tensor(owners, dtype=torch.long),
        centres=torch.cat(centres),
        mean=mean,
        scale=scale,
        assignment=assignment,
        criterion=torch.stack(criteria).reshape(len(fitted), 2, k_max - 1),
        fitted=fitted,
        settings=settings,
    )


def strategy_pairs(classes: Tensor) -> Tensor:
    """The pairs of strategies of one class, from each strategy's class (``classes``, S):
    P x 2 int64 ``(a, b)``, ``a < b``, in ascending order (the order of `cell_bisectors`)."""
    owner = classes.cpu().tolist()
    pairs = [
        (a, b) for a in range(len(owner)) for b in range(a + 1, len(owner)) if owner[a] == owner[b]
    ]
    return torch.tensor(pairs, dtype=torch.long).reshape(len(pairs), 2)


def cell_bisectors(strategies: Strategies) -> tuple[Tensor, Tensor, Tensor]:
    """For each pair ``(a, b)`` of strategies of one class (`strategy_pairs`), the bisector of
    their centres as a hyperplane in the space of the raw vectors: ``<u, v> + c > 0`` exactly
    when the standardised ``z = (v - mean) / scale`` is nearer centre ``a`` than ``b``
    (``|z - m_a|^2 < |z - m_b|^2``), so that ``assign``'s cell of ``a`` within its class is the
    intersection of the positive sides of its pairs (``a`` first) and negative ones (``a``
    second). ``u = (m_a - m_b) / scale``, ``c = -<mean / scale, m_a - m_b> - (|m_a|^2 -
    |m_b|^2) / 2``.

    Returns:
        (pairs P x 2 int64, u P x D float64, c P float64).
    """
    pairs = strategy_pairs(strategies.classes)
    centres = strategies.centres.double()
    first, second = centres[pairs[:, 0]], centres[pairs[:, 1]]
    scale, mean = strategies.scale.double(), strategies.mean.double()
    difference = first - second
    u = difference / scale
    c = -(difference @ (mean / scale)) - (first.pow(2).sum(1) - second.pow(2).sum(1)) / 2
    return pairs, u, c
