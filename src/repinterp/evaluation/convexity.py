"""How convex the class regions are: why RI's cover finds one polytope per class, or not.

Eq. 1's cover holds the most images of a class and excludes the other classes: when a class's
images all lie on their class's side of every boundary of ``Q`` between it and another class,
that whole region is one polytope and RI returns it. `q_convexity` measures that on the
reference images; `segment_convexity` measures the class regions' convexity in the feature
space itself, along segments between two images of a class, and `graph_convexity` along
shortest paths of a nearest-neighbour graph of the images (the Euclidean and graph convexity of
Tětková et al., *On convex decision regions in deep network representations*, Nature
Communications 2025).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["graph_convexity", "q_convexity", "segment_convexity"]


def q_convexity(top_classes: Tensor, sides: Tensor, predictions: Tensor) -> dict[str, float]:
    """How much of each predicted class c ``Q`` can carve, in %.

    Args:
        top_classes: |Q| x 2, the two classes of each boundary (``Boundaries.top_classes``).
        sides: |R| x |Q|, each reference image's side of each boundary (-1, 0 or 1).
        predictions: |R|, the reference images' predicted classes.

    Returns:
        ``boundaries_with_class_min`` and ``_max``: the least and most over the classes of
        ``Q``'s boundaries whose two classes include c (their mean is 2 / classes); averaged
        over the classes, ``same_side``: c's reference images on c's side of every one of those
        (100 when the class region is convex with respect to ``Q``), and ``largest_cell``: c's
        reference images in the most common sign pattern over all of ``Q``.
    """
    out: dict[str, list[float]] = {"boundaries_with_class": [], "same_side": [], "largest_cell": []}
    for c in predictions.unique().tolist():
        members = sides[predictions == c]
        involved = (top_classes == c).any(1)
        side = torch.where(top_classes[involved, 0] == c, 1, -1).to(members.dtype)
        out["boundaries_with_class"].append(float(involved.double().mean()))
        out["same_side"].append(float((members[:, involved] == side).all(1).double().mean()))
        counts = torch.unique(members, dim=0, return_counts=True)[1]
        out["largest_cell"].append(float(counts.max()) / len(members))
    share = out.pop("boundaries_with_class")
    return {
        "boundaries_with_class_min": 100 * min(share),
        "boundaries_with_class_max": 100 * max(share),
        **{key: 100 * float(np.mean(values)) for key, values in out.items()},
    }


def segment_convexity(
    head: nn.Module,
    features: Tensor,
    classes: Tensor,
    pairs: int = 100,
    points: int = 5,
    seed: int = 0,
) -> float:
    """The class regions' Euclidean convexity in feature space, in %: for ``pairs`` random
    pairs of distinct images of each predicted class c, the share of the ``points`` equally
    spaced points strictly inside the segment between their feature maps that the head
    classifies c; averaged over the classes with two images or more (NaN: none).

    Args:
        head: ``G``, feature maps -> logits.
        features: N x K x h x w feature maps.
        classes: N predicted classes (``head``'s argmax on ``features``).
        pairs: pairs drawn per class (with replacement, NumPy generator seeded with ``seed``).
        points: points per segment.
        seed: the draw's seed.
    """
    rng = np.random.default_rng(seed)
    t = torch.linspace(0, 1, points + 2, dtype=features.dtype, device=features.device)[1:-1]
    t = t.view(1, points, *[1] * (features.dim() - 1))
    shares = []
    for c in classes.unique().tolist():
        rows = (classes == c).nonzero().flatten().cpu().numpy()
        if len(rows) < 2:
            continue
        a = rng.choice(rows, pairs)
        b = np.array([rng.choice(rows[rows != i]) for i in a])
        start, end = features[torch.as_tensor(a)], features[torch.as_tensor(b)]
        between = (1 - t) * start[:, None] + t * end[:, None]
        with torch.no_grad():
            predicted = head(between.flatten(0, 1)).argmax(1)
        shares.append(float((predicted == c).double().mean()))
    return 100 * float(np.mean(shares)) if shares else float("nan")


def graph_convexity(
    features: Tensor, classes: Tensor, neighbours: int = 10, pairs: int = 100, seed: int = 0
) -> float:
    """The class regions' graph convexity, in %: on the symmetric ``neighbours``-nearest-
    neighbour graph of the images (Euclidean distances on the flattened feature maps, edges
    weighted by them), for ``pairs`` random pairs of distinct images of each predicted class c
    joined by a path, the share of the images strictly inside their shortest path that are
    predicted c (a pair of adjacent images counts as 100); averaged over the classes with such
    pairs (NaN: none).

    Args:
        features: N x ... feature maps.
        classes: N predicted classes.
        neighbours: neighbours per image in the graph.
        pairs: pairs drawn per class (with replacement, NumPy generator seeded with ``seed``).
        seed: the draw's seed.
    """
    from scipy.sparse.csgraph import dijkstra
    from sklearn.neighbors import kneighbors_graph

    data = features.detach().flatten(1).double().cpu().numpy()
    labels = classes.cpu().numpy()
    graph = kneighbors_graph(data, min(neighbours, len(data) - 1), mode="distance")
    graph = graph.maximum(graph.T)
    rng = np.random.default_rng(seed)
    shares = []
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c)
        if len(rows) < 2:
            continue
        starts = rng.choice(rows, pairs)
        ends = np.array([rng.choice(rows[rows != i]) for i in starts])
        sources, inverse = np.unique(starts, return_inverse=True)
        _, previous = dijkstra(graph, indices=sources, return_predecessors=True)
        kept = []
        for source_row, end in zip(inverse, ends, strict=True):
            inside, node = [], previous[source_row, end]
            if node < 0:  # not joined
                continue
            while node != sources[source_row]:
                inside.append(node)
                node = previous[source_row, node]
            kept.append(float(np.mean(labels[inside] == c)) if inside else 1.0)
        if kept:
            shares.append(float(np.mean(kept)))
    return 100 * float(np.mean(shares)) if shares else float("nan")
