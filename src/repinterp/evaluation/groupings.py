"""How many polytopes RI finds: images grouped by the polytope ``P`` that explains them.

Two interpretations are the same polytope when they predict the same class and have the same
boundaries of ``Q`` with the same sides
([`polytope_key`][repinterp.core.groups.polytope_key]). Over N explained images,
`polytope_groups` counts the distinct polytopes, how evenly the images spread over them
(``effective_groups``: the exponential of the Shannon entropy of the group sizes, N when every
image has its own polytope, 1 when all share one), how much of a class its largest polytope
holds, the polytopes of one image, and, given sub-concept labels (the ``shapes`` data set's),
how pure the groups are in sub-concept beside one group per class, their within-class AMI with
the sub-concepts, its null (`within_class_null`) and a k-means reference point. A layer where
RI finds about one polytope per class makes P(x)'s heat map about a class average
(`GroupStats.sentence`). Analysis, not the method: the research studies and the protocols read
it; `region_groups` groups images by the region interpreting them.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..core.groups import PolytopeKey, polytope_key
from ..core.interpretation import Interpretation
from ..core.regions import RegionSet

__all__ = [
    "AMI_NULL_DRAWS",
    "MERGE_JACCARD",
    "GroupStats",
    "ami",
    "ami_ceiling",
    "ami_null",
    "majority_share",
    "merged_groups",
    "outside_main",
    "polytope_groups",
    "region_groups",
    "within_class_null",
]

MERGE_JACCARD = 0.9
"""Polytopes whose covered reference sets have at least this Jaccard index are merged."""

AMI_NULL_DRAWS = 50
"""Draws of `ami_null` (sub-concepts shuffled within each class)."""


@dataclass(frozen=True)
class GroupStats:
    """Images grouped by the polytope explaining them.

    Attributes:
        images: N, the images grouped.
        classes: the predicted classes among them (of the polytopes explaining them).
        distinct_polytopes: distinct polytopes
            ([`polytope_key`][repinterp.core.groups.polytope_key]) among the N.
        effective_groups: ``exp(-sum_g p_g ln p_g)``, ``p_g`` the share of the images in group
            ``g``: in [1, distinct_polytopes], equal to it when the groups are equally large.
        largest_group_share: for each class, the share of its images in its largest group,
            averaged over the classes; in (0, 1], 1 when each class is one polytope.
        singletons: groups of one image.
        subconcept_purity: the share of each group's images with the group's most common
            sub-concept, averaged over the groups weighted by size (in (0, 1]); None without
            sub-concept labels.
        subconcept_purity_class: the same for one group per class, the baseline; None without
            sub-concept labels.
        merged_groups: groups once polytopes whose covered reference sets overlap with
            Jaccard >= `MERGE_JACCARD` are merged (`merged_groups`).
        merged_effective_groups: ``effective_groups`` of the merged groups.
        ami: within-class AMI between the groups and the sub-concepts (`ami`); None without
            sub-concept labels.
        ami_null: `ami_null`'s mean and 95th percentile; None without sub-concept labels.
        ami_ceiling: `ami_ceiling`; None without sub-concept labels or feature maps.
        outside: `outside_main`'s statistics; None without logits and labels.
    """

    images: int
    classes: int
    distinct_polytopes: int
    effective_groups: float
    largest_group_share: float
    singletons: int
    subconcept_purity: float | None = None
    subconcept_purity_class: float | None = None
    merged_groups: int = 0
    merged_effective_groups: float = 0.0
    ami: float | None = None
    ami_null: tuple[float, float] | None = None
    ami_ceiling: float | None = None
    outside: dict[str, float] | None = None

    def to_dict(self) -> dict[str, float]:
        """The statistics as the protocols report them: counts, ``effective_groups``, the
        shares and purities in %, ``merged_groups`` and ``merged_effective_groups``; when
        measured, ``ami``, ``ami_null`` (mean), ``ami_null_p95``, ``ami_ceiling``, and
        `outside_main`'s keys. The sub-concept keys are absent without sub-concept labels."""
        out = {
            "distinct_polytopes": float(self.distinct_polytopes),
            "effective_groups": self.effective_groups,
            "largest_group_share": 100 * self.largest_group_share,
            "singletons": float(self.singletons),
            "merged_groups": float(self.merged_groups),
            "merged_effective_groups": self.merged_effective_groups,
        }
        if self.subconcept_purity is not None:
            out["subconcept_purity"] = 100 * self.subconcept_purity
            out["subconcept_purity_class"] = 100 * self.subconcept_purity_class
        if self.ami is not None and self.ami_null is not None:
            out |= {"ami": self.ami, "ami_null": self.ami_null[0], "ami_null_p95": self.ami_null[1]}
        if self.ami_ceiling is not None:
            out["ami_ceiling"] = self.ami_ceiling
        return out | (self.outside or {})

    def sentence(self) -> str:
        """One sentence on what RI finds, e.g. ``"10 polytopes for 10 classes: at this layer
        RI finds one decision region per class"``; "mostly one" when the largest polytope of a
        class holds at least 75 % of its images on average, else "several decision regions"."""
        counts = f"{self.distinct_polytopes} polytopes for {self.classes} classes"
        if self.distinct_polytopes == self.classes:
            return f"{counts}: at this layer RI finds one decision region per class"
        spread = (
            f"{self.effective_groups:.1f} effective groups, the largest of a class holding "
            f"{100 * self.largest_group_share:.0f} % of its images, {self.singletons} of one image"
        )
        mostly = self.largest_group_share >= 0.75
        found = "mostly one decision region" if mostly else "several decision regions"
        return f"{counts} ({spread}): at this layer RI finds {found} per class"


def majority_share(groups: Sequence[Hashable], labels: Sequence[int]) -> float:
    """Share of the images whose label is their group's most common one, in (0, 1]: the
    sub-concept purity of ``groups`` (N group labels) given ``labels`` (N sub-concepts)."""
    counts = Counter(zip(groups, labels, strict=True))
    largest: dict[object, int] = {}
    for (group, _), count in counts.items():
        largest[group] = max(largest.get(group, 0), count)
    return sum(largest.values()) / len(labels)


def _effective(sizes: Sequence[int]) -> float:
    """``exp`` of the Shannon entropy of the group sizes."""
    shares = torch.tensor(list(sizes), dtype=torch.float64) / sum(sizes)
    return math.exp(float(-(shares * shares.log()).sum()))


def _jaccard(covers: Sequence[Tensor]) -> Tensor:
    """K x K Jaccard indices of K sets of non-negative integers (two empty sets: 0)."""
    size = 1 + max((int(c.max()) for c in covers if c.numel()), default=0)
    member = torch.zeros(len(covers), size, dtype=torch.float64)
    for row, cover in enumerate(covers):
        member[row, cover.cpu().long()] = 1
    both = member @ member.T
    counts = member.sum(1)
    either = counts[:, None] + counts[None, :] - both
    return torch.where(either > 0, both / either.clamp(min=1), 0)


def merged_groups(covers: Sequence[Tensor], threshold: float = MERGE_JACCARD) -> list[int]:
    """Merge sets whose Jaccard index is at least ``threshold``, transitively.

    Args:
        covers: K sets of reference indices (1-D integer tensors), e.g. the covered reference
            images of K distinct polytopes.
        threshold: in (0, 1].

    Returns:
        K labels: the merged group of each set, a connected component of the graph joining
        the pairs at or above ``threshold``, numbered 0, 1, ... in order of first appearance.
        Three sets with A ~ B at 0.95 and B ~ C at 0.5 give two groups, ``[0, 0, 1]``.

    Raises:
        ValueError: ``threshold`` outside (0, 1].
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    labels = [-1] * len(covers)
    if not covers:
        return labels
    near = (_jaccard(covers) >= threshold).numpy()
    group = 0
    for first in range(len(covers)):
        if labels[first] >= 0:
            continue
        stack, labels[first] = [first], group
        while stack:
            for other in np.flatnonzero(near[stack.pop()]).tolist():
                if labels[other] < 0:
                    labels[other] = group
                    stack.append(other)
        group += 1
    return labels


def _informative(subconcepts: np.ndarray, classes: np.ndarray) -> list[np.ndarray]:
    """The rows of each class whose images hold at least two sub-concepts."""
    rows = [np.flatnonzero(classes == c) for c in np.unique(classes)]
    return [r for r in rows if len(np.unique(subconcepts[r])) >= 2]


def ami(
    groups: Sequence[Hashable], subconcepts: Sequence[int] | Tensor, classes: Sequence[int] | Tensor
) -> float:
    """Within-class adjusted mutual information between groups and sub-concepts.

    ``sum_c n_c AMI_c / sum_c n_c`` over the classes c whose images hold at least two
    sub-concepts, ``AMI_c`` scikit-learn's ``adjusted_mutual_info_score`` of the sub-concepts
    and the groups of class c's ``n_c`` images: 1 when the groups are the sub-concepts, about
    0 when they are independent of them (0 in expectation over random groupings of the same
    sizes), negative when below chance.

    Args:
        groups: N group labels (any hashable: polytope keys, say).
        subconcepts: N integer sub-concept labels.
        classes: N class labels (the groups' predicted classes).

    Returns:
        The weighted mean; NaN when no class holds two sub-concepts.
    """
    from sklearn.metrics import adjusted_mutual_info_score  # here: sklearn is slow to import

    ids = {key: i for i, key in enumerate(dict.fromkeys(groups))}
    group = np.array([ids[key] for key in groups])
    concepts, classes = np.asarray(subconcepts), np.asarray(classes)
    parts = _informative(concepts, classes)
    if not parts:
        return math.nan
    scores = [adjusted_mutual_info_score(concepts[r], group[r]) for r in parts]
    return float(np.average(scores, weights=[len(r) for r in parts]))


def within_class_null(
    score: Callable[[np.ndarray], float],
    subconcepts: Sequence[int] | Tensor,
    classes: Sequence[int] | Tensor,
    draws: int = AMI_NULL_DRAWS,
    seed: int = 0,
) -> np.ndarray:
    """``score`` of the sub-concepts shuffled within each class: what groups of the same sizes
    reach by chance.

    Args:
        score: of N shuffled sub-concept labels (e.g. `ami` of fixed groups).
        subconcepts: N integer sub-concept labels.
        classes: N class labels; a label moves only among the images of its class.
        draws: shuffles, drawn with a NumPy generator seeded with ``seed``.
        seed: the generator's seed.

    Returns:
        The ``draws`` scores, in the order drawn.
    """
    rng = np.random.default_rng(seed)
    concepts, classes = np.asarray(subconcepts), np.asarray(classes)
    rows = [np.flatnonzero(classes == c) for c in np.unique(classes)]
    values = []
    for _ in range(draws):
        shuffled = concepts.copy()
        for r in rows:
            shuffled[r] = concepts[rng.permutation(r)]
        values.append(score(shuffled))
    return np.asarray(values)


def ami_null(
    groups: Sequence[Hashable],
    subconcepts: Sequence[int] | Tensor,
    classes: Sequence[int] | Tensor,
    draws: int = AMI_NULL_DRAWS,
    seed: int = 0,
) -> tuple[float, float]:
    """`ami` of the same groups with the sub-concepts shuffled within each class
    (`within_class_null`).

    Args: as in `ami`; ``draws`` shuffles drawn with a NumPy generator seeded with ``seed``.

    Returns:
        The mean and the 95th percentile of the draws' AMI (NaN when `ami` is).
    """
    values = within_class_null(
        lambda shuffled: ami(groups, shuffled, classes), subconcepts, classes, draws, seed
    )
    if np.isnan(values).any():
        return math.nan, math.nan
    return float(values.mean()), float(np.percentile(values, 95))


def ami_ceiling(
    features: Tensor,
    subconcepts: Sequence[int] | Tensor,
    classes: Sequence[int] | Tensor,
    seed: int = 0,
) -> float:
    """`ami` of k-means groups: within each class, k-means (scikit-learn, ``random_state=seed``,
    3 starts) on the images' flattened feature maps with k = the sub-concepts among them.
    What a grouping of the same feature maps into as many groups as sub-concepts reaches: a
    reference point, not a bound (a grouping into more groups may reach a higher AMI).

    Args:
        features: N x ... feature maps (flattened to N x D).
        subconcepts: (N,) sub-concept labels, as in `ami`.
        classes: (N,) predicted classes, as in `ami`.
        seed: k-means' seed.

    Returns:
        The weighted mean (NaN when no class holds two sub-concepts).
    """
    from sklearn.cluster import KMeans  # here: sklearn is slow to import

    data = features.detach().flatten(1).float().cpu().numpy()
    concepts, classes = np.asarray(subconcepts), np.asarray(classes)
    groups = np.zeros(len(data), dtype=np.int64)
    for rows in _informative(concepts, classes):
        k = len(np.unique(concepts[rows]))
        groups[rows] = KMeans(n_clusters=k, random_state=seed, n_init=3).fit(data[rows]).labels_
    return ami(list(zip(classes.tolist(), groups.tolist(), strict=True)), concepts, classes)


def outside_main(
    keys: Sequence[PolytopeKey],
    covers: dict[PolytopeKey, Tensor],
    logits: Tensor,
    labels: Tensor,
) -> dict[str, float]:
    """The images outside their class's largest polytope (the *main* group; the class is the
    polytope's predicted class) against the main groups' images.

    Args:
        keys: N polytope keys, one per image.
        covers: each key's covered reference indices.
        logits: N x classes, the model's logits of the images.
        labels: N true classes.

    Returns:
        ``outside_share``: % of the images outside; ``margin_main`` / ``margin_outside``: the
        median logit margin (largest logit minus the second) of the images in / outside;
        ``error_main`` / ``error_outside``: % of them the model misclassifies;
        ``jaccard_outside``: the median Jaccard index of an outside image's covered set with
        its class's main polytope's (NaN where a side has no image).
    """
    sizes = Counter(keys)
    main: dict[int, PolytopeKey] = {}
    for key, _ in sizes.most_common():  # the first largest of each class
        main.setdefault(key[0], key)
    outside = torch.tensor([main[key[0]] != key for key in keys])
    top = logits.detach().float().cpu().topk(min(2, logits.shape[1]), dim=1).values
    margin = top[:, 0] - top[:, -1]
    wrong = (logits.argmax(1).cpu() != labels.cpu()).double()
    outer = {key for key in keys if main[key[0]] != key}
    jaccard = {key: float(_jaccard([covers[key], covers[main[key[0]]]])[0, 1]) for key in outer}

    def median(values: Tensor) -> float:
        return float(values.median()) if len(values) else math.nan

    def percent(values: Tensor) -> float:
        return 100 * float(values.mean()) if len(values) else math.nan

    return {
        "outside_share": percent(outside.double()),
        "margin_main": median(margin[~outside]),
        "margin_outside": median(margin[outside]),
        "error_main": percent(wrong[~outside]),
        "error_outside": percent(wrong[outside]),
        "jaccard_outside": median(
            torch.tensor([jaccard[key] for key in keys if key in jaccard], dtype=torch.float64)
        ),
    }


def polytope_groups(
    interpretations: Sequence[Interpretation],
    subconcepts: Tensor | None = None,
    features: Tensor | None = None,
    logits: Tensor | None = None,
    labels: Tensor | None = None,
    seed: int = 0,
) -> GroupStats:
    """Group N images by the polytope explaining each.

    Args:
        interpretations: N interpretations, the one explaining each image (one object may
            explain many images: a region's, say); all from one interpreter.
        subconcepts: (N,) integer sub-concept label of each image, or None.
        features: N x ... the images' feature maps at the interpreter's layer, for
            `ami_ceiling` (with ``subconcepts``), or None.
        logits: N x classes, the model's logits of the images, for `outside_main` (with
            ``labels``), or None.
        labels: (N,) the images' true classes, or None.
        seed: of `ami_null`'s draws and `ami_ceiling`'s k-means.

    Returns:
        The statistics (see `GroupStats`).

    Raises:
        ValueError: no interpretation, ``subconcepts`` not N integers, or ``features``,
            ``logits`` or ``labels`` not N rows.
    """
    n = len(interpretations)
    if n == 0:
        raise ValueError("polytope_groups needs at least one interpretation")
    for name, value in (("features", features), ("logits", logits), ("labels", labels)):
        if value is not None and len(value) != n:
            raise ValueError(f"{name} must have {n} rows, one per image, got {len(value)}")
    known: dict[int, PolytopeKey] = {}  # one key per object: a region explains many images
    keys, covers = [], {}
    for e in interpretations:
        if id(e) not in known:
            known[id(e)] = polytope_key(e)
            covers.setdefault(known[id(e)], e.covered)
        keys.append(known[id(e)])
    sizes = Counter(keys)
    per_class: dict[int, list[int]] = {}
    for (predicted, _), size in sizes.items():
        per_class.setdefault(predicted, []).append(size)
    largest = [max(s) / sum(s) for s in per_class.values()]
    merged = merged_groups([covers[key] for key in sizes])
    merged_sizes = Counter()
    for label, size in zip(merged, sizes.values(), strict=True):
        merged_sizes[label] += size
    stats = GroupStats(
        images=n,
        classes=len(per_class),
        distinct_polytopes=len(sizes),
        effective_groups=_effective(list(sizes.values())),
        largest_group_share=sum(largest) / len(largest),
        singletons=sum(size == 1 for size in sizes.values()),
        merged_groups=len(merged_sizes),
        merged_effective_groups=_effective(list(merged_sizes.values())),
    )
    if logits is not None and labels is not None:
        stats = dataclasses.replace(stats, outside=outside_main(keys, covers, logits, labels))
    if subconcepts is None:
        return stats
    concepts = torch.as_tensor(subconcepts).cpu()
    if concepts.shape != (n,) or concepts.is_floating_point() or concepts.dtype == torch.bool:
        raise ValueError(
            f"subconcepts must be {n} integers, got {concepts.dtype} of shape "
            f"{tuple(concepts.shape)}"
        )
    values = concepts.tolist()
    classes = [key[0] for key in keys]
    found = ami(keys, values, classes)
    return dataclasses.replace(
        stats,
        subconcept_purity=majority_share(keys, values),
        subconcept_purity_class=majority_share(classes, values),
        ami=None if math.isnan(found) else found,
        ami_null=None if math.isnan(found) else ami_null(keys, values, classes, seed=seed),
        ami_ceiling=(
            None
            if features is None or math.isnan(found)
            else ami_ceiling(features, values, classes, seed)
        ),
    )


def region_groups(
    regions: RegionSet,
    region: Tensor | None = None,
    subconcepts: Tensor | None = None,
    features: Tensor | None = None,
    logits: Tensor | None = None,
    labels: Tensor | None = None,
    seed: int = 0,
) -> GroupStats:
    """Images grouped by the polytope of the region interpreting them (`polytope_groups`;
    regions of one polytope are one group).

    Args:
        regions: the region set.
        region: (N,) the region of each image (`Assignment.region`); None: the reference
            set's (`RegionSet.reference_assignment`).
        subconcepts: (N,) sub-concept labels of the images, or None.
        features: the images' feature maps, as `polytope_groups` takes them, or None.
        logits: the images' logits, or None.
        labels: the images' true classes, or None.
        seed: the seed of the shuffled null and of k-means.
    """
    if region is None:
        region = regions.reference_assignment().region
    return polytope_groups(
        [regions.regions[v] for v in region.tolist()], subconcepts, features, logits, labels, seed
    )
