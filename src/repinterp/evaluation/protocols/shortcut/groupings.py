"""The groupings the ``shortcut`` protocol compares (`GROUPINGS`) and how well one isolates the
marked images (`f1_marked`, `grouping_scores`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np
import torch
from torch import Tensor

from ...groupings import ami, ami_ceiling, ami_null
from ...subclass import (
    Grouping,
    domino_groups,
    gap_groups,
    kmeans_groups,
    matched_k,
    pcx_groups,
    polytope_grouping,
    spray_groups,
)
from .images import ShortcutImages

__all__ = ["GROUPINGS", "assigned_strategies", "f1_marked", "grouping_scores"]


def f1_marked(groups: Sequence[Hashable] | np.ndarray, marked: Sequence[bool] | Tensor) -> float:
    """How well one group isolates the marked images: the F1 of the group holding most of them
    (ties: the one of highest F1) against the marked set, ``2 |G & M| / (|G| + |M|)``.

    Args:
        groups: N group labels (any hashable).
        marked: N booleans.

    Returns:
        F1 in [0, 1]: 1 when a group is exactly the marked images; NaN when none is marked.
    """
    flags = np.asarray(marked, dtype=bool)
    if len(flags) != len(groups):
        raise ValueError(f"{len(groups)} group labels for {len(flags)} marked flags")
    if not flags.any():
        return float("nan")
    ids = {key: i for i, key in enumerate(dict.fromkeys(groups))}
    group = np.array([ids[key] for key in groups])
    sizes = np.bincount(group)
    hits = np.bincount(group[flags], minlength=len(sizes))
    f1 = 2 * hits / (sizes + flags.sum())
    best = np.flatnonzero(hits == hits.max())
    return float(f1[best].max())


def grouping_scores(
    groups: Sequence[Hashable] | np.ndarray,
    marked: Sequence[bool] | Tensor,
    classes: Sequence[int] | Tensor,
    features: Tensor,
    seed: int = 0,
) -> dict[str, float]:
    """A grouping's isolation of the marked images, within each class.

    Args:
        groups: N group labels (a group holds images of one class).
        marked: N marked flags, the truth.
        classes: N (predicted) classes.
        features: N x ... feature maps, for the k-means ceiling.
        seed: of the null's shuffles and the ceiling's k-means.

    Returns:
        ``f1_marked`` (`f1_marked`), ``ami`` (`repinterp.evaluation.groupings.ami` of the
        groups and the flag, within each class holding marked and unmarked images), ``ami_null`` and
        ``ami_null_p95`` (the mean and 95th percentile with the flag shuffled within each
        class, `ami_null`), ``ami_ceiling`` (k-means with k = 2 on the features of each such
        class, `ami_ceiling`) and ``groups`` (how many groups); the AMIs are NaN where no class
        holds both.
    """
    flags = torch.as_tensor(np.asarray(marked, dtype=bool)).long()
    keys = [(int(c), g) for c, g in zip(np.asarray(classes), groups, strict=True)]
    null, p95 = ami_null(keys, flags, classes, seed=seed)
    return {
        "f1_marked": f1_marked(keys, marked),
        "ami": ami(keys, flags, classes),
        "ami_null": null,
        "ami_null_p95": p95,
        "ami_ceiling": ami_ceiling(features, flags, classes, seed),
        "groups": len(set(keys)),
    }


def _kmeans(images: ShortcutImages) -> np.ndarray:
    """k-means on the feature maps, k = 2 in a class holding marked images (matched to the
    marked / unmarked count; the flag gives the count only), else 1."""
    return _kmeans_at(images, matched_k(images.marked.long(), images.classes("unseen")))


def _kmeans_at(images: ShortcutImages, k: int | dict[int, int]) -> np.ndarray:
    """The unseen images' k-means groups on the feature maps, ``k`` per class (or for all)."""
    reference, unseen = images.classes("reference"), images.classes("unseen")
    features = (images.reference_features, reference, images.features, unseen)
    return kmeans_groups(*features, k, images.run.seed).unseen


def _spray(images: ShortcutImages) -> np.ndarray:
    """SpRAy on each image's own Grad-CAM, k by the eigengap."""
    grouping = spray_groups(
        images.cam("Grad-CAM", "reference"),
        images.classes("reference"),
        images.cam("Grad-CAM", "unseen"),
        images.classes("unseen"),
        seed=images.run.seed,
    )
    return grouping.unseen


def _pcx(images: ShortcutImages) -> np.ndarray:
    """PCX-like mixture over the channel relevances, k by BIC."""
    grouping = pcx_groups(
        images.relevance("reference"),
        images.classes("reference"),
        images.relevance("unseen"),
        images.classes("unseen"),
        seed=images.run.seed,
    )
    return grouping.unseen


def _kmeans_rule_k(images: ShortcutImages) -> np.ndarray:
    """k-means on the feature maps at the k RI+strategy's rule chose per class (no label)."""
    return _kmeans_at(images, images.interpreter("RI+strategy").index.granularity.strategies.k)


def _label_free(groups: Callable[..., Grouping]) -> Callable[[ShortcutImages], np.ndarray]:
    """A grouping that chooses its own k, on the feature maps (`gap_groups`,
    `domino_groups`)."""

    def unseen(images: ShortcutImages) -> np.ndarray:
        grouping = groups(
            images.reference_features,
            images.classes("reference"),
            images.features,
            images.classes("unseen"),
            seed=images.run.seed,
        )
        return grouping.unseen

    return unseen


def assigned_strategies(images: ShortcutImages) -> np.ndarray:
    """RI+strategy's strategies (`repinterp.strategies.granularity`): each unseen image's, the
    nearest centre among its predicted class's (found on the reference set, without labels)."""
    ri = images.interpreter("RI+strategy")
    inputs = images.inputs("unseen")
    features = ri.features(inputs)
    with torch.inference_mode():
        logits = ri.split.head(features)
    columns = ri.index.granularity.columns(ri.split.head, features, logits)
    return columns["strategy"].cpu().numpy()


def _ri_polytopes(name: str) -> Callable[[ShortcutImages], np.ndarray]:
    """The grouping by RI variant ``name``'s polytope of each unseen image."""
    return lambda images: polytope_grouping(images.polytopes(name))


GROUPINGS: dict[str, Callable[[ShortcutImages], np.ndarray]] = {
    "RI": _ri_polytopes("RI"),
    "RI+strategy": assigned_strategies,
    "k-means": _kmeans,
    "k-means at the rule's k": _kmeans_rule_k,
    "k-means, gap statistic": _label_free(gap_groups),
    "SpRAy": _spray,
    "PCX-like": _pcx,
    "Domino-like": _label_free(domino_groups),
}
"""Each grouping: the unseen images looked at -> their group labels (fitted without labels)."""
