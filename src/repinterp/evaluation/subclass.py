"""Groupings below the predicted class that a reviewer would name beside RI's polytopes.

Each function groups the images of each predicted class on what it is given of the reference
images, and gives every unseen image a group of its own predicted class (`Grouping`):

- `kmeans_groups`: k-means on the feature maps, per class; an unseen image joins the nearest
  centre of its class.
- `spray_groups`: SpRAy (Lapuschkin et al., *Unmasking Clever Hans predictors*, Nature
  Communications 2019): spectral clustering of the heat maps of a class (downsampled, a
  symmetric k-nearest-neighbour graph, the normalised Laplacian), k chosen by the eigengap
  (`eigengap_k`) or given; an unseen image joins the group of its nearest reference heat map
  of its class (SpRAy itself clusters a fixed set).
- `pcx_groups`: PCX-like (Dreyer et al., *Understanding the (extra-)ordinary: validating
  deep model decisions with prototypical concept-based explanations*, 2023): a Gaussian
  mixture (diagonal covariances) per class over the channel relevances (e.g. those of
  `repinterp.strategies.channel_relevance.channel_relevance`), each L2-normalised; k given or chosen
  by BIC; an unseen image joins its most probable component.
- `gap_groups`: k-means with k by the gap statistic (Tibshirani, Walther and Hastie, *Estimating
  the number of clusters in a data set via the gap statistic*, JRSS B 2001; `gap_k`), a
  standard label-free rule for k, beside the strategies' silhouette-against-a-Gaussian rule.
- `domino_groups`: Domino-like (Eyuboglu et al., *Domino: discovering systematic errors with
  cross-modal embeddings*, ICLR 2022, without its label and prediction terms): the PCX-like
  mixture (`pcx_groups`) on the feature maps themselves, in their `MIXTURE_DIM` principal axes
  (of the reference set) and L2-normalised as Domino's embeddings are, k by BIC.
- `polytope_grouping`: RI's own groups (the polytope explaining each image,
  `repinterp.core.groups.polytope_key`), at any layer or granularity.

``k`` is an int (every class), a dict class -> k (e.g. `matched_k`: the sub-concepts of each
class, for comparisons at matched group count), or None where the method chooses it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..core.groups import polytope_key
from ..core.interpretation import Interpretation

__all__ = [
    "Grouping",
    "domino_groups",
    "eigengap_k",
    "gap_groups",
    "gap_k",
    "groups_per_class",
    "kmeans_groups",
    "matched_k",
    "pcx_groups",
    "polytope_grouping",
    "spray_groups",
]

K_MAX = 8
"""The most groups per class `eigengap_k` and the BIC choose from."""
SPRAY_SIZE = 8
"""SpRAy's heat maps are average-pooled to at most this many pixels a side."""
SPRAY_NEIGHBOURS = 10
"""Neighbours per heat map in SpRAy's affinity graph."""
GAP_DRAWS = 5
"""Uniform reference draws of the gap statistic (the strategies' null draws are as many)."""
MIXTURE_DIM = 32
"""The principal axes `domino_groups` reads (the strategies read as many to choose k)."""


@dataclass(frozen=True)
class Grouping:
    """Group labels, unique across classes (group ``g`` holds images of one predicted class).

    Attributes:
        reference: |R| int64 labels of the reference images.
        unseen: N int64 labels of the unseen images (a group of the reference images of the
            same predicted class; a class without reference images: a group of its own).
        k: the groups of each class, class -> k.
    """

    reference: np.ndarray
    unseen: np.ndarray
    k: dict[int, int]


def matched_k(
    subconcepts: Sequence[int] | Tensor, classes: Sequence[int] | Tensor
) -> dict[int, int]:
    """class -> how many sub-concepts its images hold: k at matched group count."""
    concepts, classes = np.asarray(subconcepts), np.asarray(classes)
    return {int(c): len(np.unique(concepts[classes == c])) for c in np.unique(classes)}


def _as_numpy(values: Tensor | np.ndarray) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float64).reshape(len(values), -1)


def _k_of(k: int | dict[int, int] | None, c: int, n: int) -> int | None:
    """The k of class ``c`` (at most its ``n`` images; None: the method chooses)."""
    chosen = k.get(c, 1) if isinstance(k, dict) else k
    return None if chosen is None else max(1, min(int(chosen), n))


def _grouped(
    reference_classes: Tensor | np.ndarray,
    classes: Tensor | np.ndarray,
    k: int | dict[int, int] | None,
    fit_class: Callable[[np.ndarray, np.ndarray, int | None], tuple[np.ndarray, np.ndarray, int]],
) -> Grouping:
    """Run ``fit_class(rows, unseen_rows, k_c) -> (reference labels, unseen labels, k_c)`` on
    each predicted class and number the groups across classes."""
    ref_classes, classes = np.asarray(reference_classes), np.asarray(classes)
    reference = np.zeros(len(ref_classes), dtype=np.int64)
    unseen = np.zeros(len(classes), dtype=np.int64)
    ks, offset = {}, 0
    for c in np.union1d(np.unique(ref_classes), np.unique(classes)).tolist():
        rows, unseen_rows = np.flatnonzero(ref_classes == c), np.flatnonzero(classes == c)
        if len(rows) == 0:
            unseen[unseen_rows], ks[c], offset = offset, 1, offset + 1
            continue
        local, local_unseen, ks[c] = fit_class(rows, unseen_rows, _k_of(k, c, len(rows)))
        reference[rows], unseen[unseen_rows] = offset + local, offset + local_unseen
        offset += ks[c]
    return Grouping(reference, unseen, ks)


def kmeans_groups(
    reference_features: Tensor | np.ndarray,
    reference_classes: Tensor | np.ndarray,
    features: Tensor | np.ndarray,
    classes: Tensor | np.ndarray,
    k: int | dict[int, int],
    seed: int = 0,
) -> Grouping:
    """k-means (scikit-learn, 3 starts, ``random_state=seed``) on each class's reference
    feature maps (flattened), unseen images to the nearest centre of their class.

    Args:
        reference_features: |R| x ... feature maps; reference_classes: |R| predicted classes.
        features: N x ... feature maps of the unseen images; classes: their N predicted classes.
        k: groups per class (an int or class -> k).
        seed: k-means' seed.
    """
    from sklearn.cluster import KMeans  # here: sklearn is slow to import

    data, new = _as_numpy(reference_features), _as_numpy(features)

    def fit_class(rows, unseen_rows, k_c):
        model = KMeans(n_clusters=k_c, random_state=seed, n_init=3).fit(data[rows])
        assigned = model.predict(new[unseen_rows]) if len(unseen_rows) else np.zeros(0, int)
        return model.labels_, assigned, k_c

    return _grouped(reference_classes, classes, k, fit_class)


def gap_k(data: np.ndarray, k_max: int = K_MAX, seed: int = 0, draws: int = GAP_DRAWS) -> int:
    """The number of k-means clusters of the rows ``data`` (n x D) by the gap statistic: the
    smallest ``k`` in ``[1, k_max]`` with ``Gap(k) >= Gap(k + 1) - s(k + 1)``, where ``Gap(k)``
    is the mean over ``draws`` uniform draws, in the box the rows span along their principal
    axes (Tibshirani et al.'s reference b), of ``log W*(k)`` less ``log W(k)``, ``W`` the
    k-means within-cluster sum of squares (scikit-learn, 3 starts, ``random_state=seed``), and
    ``s`` the draws' standard deviation times ``sqrt(1 + 1 / draws)``; ``k_max`` when none is.

    Raises:
        ValueError: ``k_max`` or ``draws`` below 1.
    """
    from sklearn.cluster import KMeans  # here: sklearn is slow to import

    if k_max < 1 or draws < 1:
        raise ValueError(f"k_max and draws must be >= 1, got {k_max} and {draws}")
    centred = data - data.mean(0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    rotated = centred @ axes.T
    low, high = rotated.min(0), rotated.max(0)
    uniform = np.random.default_rng(seed).uniform(size=(draws, *rotated.shape))
    references = low + uniform * (high - low)
    top = min(k_max, len(data) - 1)

    def log_w(x: np.ndarray, k: int) -> float:
        if k == 1:
            return float(np.log(((x - x.mean(0)) ** 2).sum()))
        return float(np.log(KMeans(n_clusters=k, random_state=seed, n_init=3).fit(x).inertia_))

    gaps, spreads = [], []
    for k in range(1, top + 2):
        null = np.array([log_w(r, k) for r in references])
        gaps.append(null.mean() - log_w(rotated, k))
        spreads.append(null.std() * np.sqrt(1 + 1 / draws))
        if k >= 2 and gaps[k - 2] >= gaps[k - 1] - spreads[k - 1]:
            return k - 1
    return max(top, 1)


def gap_groups(
    reference_features: Tensor | np.ndarray,
    reference_classes: Tensor | np.ndarray,
    features: Tensor | np.ndarray,
    classes: Tensor | np.ndarray,
    seed: int = 0,
    k_max: int = K_MAX,
) -> Grouping:
    """`kmeans_groups` with each class's k by `gap_k` (at most ``k_max``) on its reference
    feature maps in the reference set's `MIXTURE_DIM` principal axes."""
    data = _principal(_as_numpy(reference_features), _as_numpy(reference_features))[0]
    ref_classes = np.asarray(reference_classes)
    k = {int(c): gap_k(data[ref_classes == c], k_max, seed) for c in np.unique(ref_classes)}
    return kmeans_groups(reference_features, reference_classes, features, classes, k, seed)


def _principal(reference: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``reference`` and ``other`` (n x D, m x D) in the `MIXTURE_DIM` principal axes of
    ``reference`` (centred on its mean)."""
    mean = reference.mean(0)
    _, _, axes = np.linalg.svd(reference - mean, full_matrices=False)
    axes = axes[:MIXTURE_DIM].T
    return (reference - mean) @ axes, (other - mean) @ axes


def domino_groups(
    reference_features: Tensor | np.ndarray,
    reference_classes: Tensor | np.ndarray,
    features: Tensor | np.ndarray,
    classes: Tensor | np.ndarray,
    seed: int = 0,
) -> Grouping:
    """Domino-like slices (see the module's docstring): `pcx_groups` (k by BIC, at most
    `K_MAX`) on the feature maps in the reference set's `MIXTURE_DIM` principal axes."""
    reference, unseen = _principal(_as_numpy(reference_features), _as_numpy(features))
    return pcx_groups(reference, reference_classes, unseen, classes, seed=seed)


def eigengap_k(affinity: np.ndarray, k_max: int = K_MAX) -> int:
    """The number of clusters of a graph by the eigengap heuristic: the ``k`` in
    ``[1, k_max]`` after which the normalised Laplacian's ascending eigenvalues jump most,
    ``argmax_k (lambda_{k+1} - lambda_k)``.

    Args:
        affinity: n x n symmetric non-negative affinities.
        k_max: the largest k considered (at most n - 1).
    """
    n = len(affinity)
    if n < 3:
        return 1
    degree = affinity.sum(1)
    scale = np.where(degree > 0, 1 / np.sqrt(np.maximum(degree, 1e-12)), 0)
    laplacian = np.eye(n) - scale[:, None] * affinity * scale[None, :]
    values = np.linalg.eigvalsh(laplacian)[: min(k_max, n - 1) + 1]
    return int(np.argmax(np.diff(values))) + 1


def _knn_affinity(data: np.ndarray, neighbours: int) -> np.ndarray:
    """The symmetric 0/1 k-nearest-neighbour graph of the rows (Euclidean)."""
    from sklearn.neighbors import kneighbors_graph

    graph = kneighbors_graph(data, min(neighbours, len(data) - 1), include_self=False)
    graph = graph.toarray()
    return np.maximum(graph, graph.T)


def _pooled_maps(maps: Tensor | np.ndarray, size: int) -> np.ndarray:
    """N x H x W heat maps average-pooled to at most ``size`` pixels a side, flattened."""
    maps = torch.as_tensor(np.asarray(maps) if not isinstance(maps, Tensor) else maps)
    pooled = torch.nn.functional.adaptive_avg_pool2d(maps.detach().float().cpu()[:, None], size)
    return pooled.flatten(1).double().numpy()


def spray_groups(
    reference_maps: Tensor | np.ndarray,
    reference_classes: Tensor | np.ndarray,
    maps: Tensor | np.ndarray,
    classes: Tensor | np.ndarray,
    k: int | dict[int, int] | None = None,
    seed: int = 0,
    neighbours: int = SPRAY_NEIGHBOURS,
    size: int = SPRAY_SIZE,
) -> Grouping:
    """SpRAy: spectral clustering of each class's reference heat maps.

    Args:
        reference_maps: |R| x H x W heat maps (any method's: Grad-CAM, RI's, ...).
        reference_classes: |R| predicted classes.
        maps: N x H x W heat maps of the unseen images; classes: their predicted classes.
        k: groups per class; None: `eigengap_k` of each class's graph.
        seed: the spectral clustering's seed.
        neighbours: neighbours per map in the graph.
        size: maps pooled to ``size`` x ``size`` first.
    """
    from sklearn.cluster import SpectralClustering

    data, new = _pooled_maps(reference_maps, size), _pooled_maps(maps, size)

    def fit_class(rows, unseen_rows, k_c):
        if len(rows) < 3:
            return np.zeros(len(rows), int), np.zeros(len(unseen_rows), int), 1
        affinity = _knn_affinity(data[rows], neighbours)
        k_c = eigengap_k(affinity) if k_c is None else k_c
        if k_c == 1:
            return np.zeros(len(rows), int), np.zeros(len(unseen_rows), int), 1
        clustering = SpectralClustering(
            k_c, affinity="precomputed", random_state=seed, assign_labels="kmeans"
        )
        with warnings.catch_warnings():  # separate groups are what SpRAy looks for
            warnings.filterwarnings("ignore", "Graph is not fully connected")
            labels = clustering.fit_predict(affinity)
        nearest = (
            np.argmin(((new[unseen_rows, None, :] - data[None, rows, :]) ** 2).sum(2), axis=1)
            if len(unseen_rows)
            else np.zeros(0, int)
        )
        return labels, labels[nearest], k_c

    return _grouped(reference_classes, classes, k, fit_class)


def pcx_groups(
    reference_relevance: Tensor | np.ndarray,
    reference_classes: Tensor | np.ndarray,
    relevance: Tensor | np.ndarray,
    classes: Tensor | np.ndarray,
    k: int | dict[int, int] | None = None,
    seed: int = 0,
) -> Grouping:
    """PCX-like prototypes: a Gaussian mixture (diagonal covariances, scikit-learn, 3 starts,
    ``random_state=seed``) over each class's L2-normalised channel relevances.

    Args:
        reference_relevance: |R| x K channel relevances; reference_classes: |R| classes.
        relevance: N x K relevances of the unseen images; classes: their predicted classes.
        k: components per class; None: the k in [1, `K_MAX`] of the lowest BIC.
        seed: the mixture's seed.
    """
    from sklearn.mixture import GaussianMixture

    def unit(values):
        values = _as_numpy(values)
        return values / np.maximum(np.linalg.norm(values, axis=1, keepdims=True), 1e-12)

    data, new = unit(reference_relevance), unit(relevance)

    def mixture(rows, k_c):
        return GaussianMixture(
            k_c, covariance_type="diag", random_state=seed, n_init=3, reg_covar=1e-4
        ).fit(data[rows])

    def fit_class(rows, unseen_rows, k_c):
        if k_c is None:
            fits = [mixture(rows, j) for j in range(1, min(K_MAX, len(rows)) + 1)]
            model = min(fits, key=lambda m: m.bic(data[rows]))
        else:
            model = mixture(rows, k_c)
        labels = model.predict(data[rows])
        assigned = model.predict(new[unseen_rows]) if len(unseen_rows) else np.zeros(0, int)
        return labels, assigned, model.n_components

    return _grouped(reference_classes, classes, k, fit_class)


def groups_per_class(labels: Sequence[int] | np.ndarray, classes: Sequence[int] | Tensor) -> float:
    """The effective groups within each class (the exponential of the Shannon entropy of its
    images' group sizes: k for k equal groups), averaged over the classes: the number to match
    with the sub-concepts per class."""
    labels, classes = np.asarray(labels), np.asarray(classes)
    values = []
    for c in np.unique(classes):
        shares = np.unique(labels[classes == c], return_counts=True)[1] / (classes == c).sum()
        values.append(float(np.exp(-(shares * np.log(shares)).sum())))
    return float(np.mean(values))


def polytope_grouping(interpretations: Sequence[Interpretation]) -> np.ndarray:
    """RI's groups: N int64 labels, one per distinct polytope
    (`repinterp.core.groups.polytope_key`), numbered in order of first appearance."""
    ids: dict[object, int] = {}
    return np.array(
        [ids.setdefault(polytope_key(e), len(ids)) for e in interpretations], dtype=np.int64
    )
