"""How many polytopes RI finds: images grouped by the polytope ``P`` that explains them.

Two interpretations are the same polytope when they predict the same class and have the same
boundaries of ``Q`` with the same sides ([`polytope_key`][repinterp.core.groups.polytope_key]). Over
N explained images, [`polytope_groups`][repinterp.core.groups.polytope_groups] counts the distinct
polytopes, how evenly the images spread over them (``effective_groups``: the exponential of the
Shannon entropy of the group sizes, N when every image has its own polytope, 1 when all share one),
how much of a class its largest polytope holds, the polytopes of one image, and, given sub-concept
labels (the ``shapes`` data set's), how pure the groups are in sub-concept beside one group per
class. A layer where RI finds about one polytope per class makes P(x)'s heat map about a class
average (`GroupStats.sentence`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .cover import sides
from .interpretation import Interpretation

__all__ = ["GroupStats", "PolytopeKey", "polytope_groups", "polytope_key"]

# The predicted class, and each boundary of P (ascending index into Q) with the input's side.
PolytopeKey = tuple[int, tuple[tuple[int, int], ...]]


def polytope_key(interpretation: Interpretation) -> PolytopeKey:
    """What makes two interpretations (of one interpreter, one ``Q``) the same polytope: the
    predicted class, and each boundary of ``P(x)`` (ascending) with ``x``'s side of it (-1, 0
    or 1). The order the greedy chose the boundaries in does not matter."""
    p = interpretation.boundaries.cpu()
    signs = sides(interpretation.projections.cpu()[p]).tolist()
    return interpretation.predicted_class, tuple(sorted(zip(p.tolist(), signs, strict=True)))


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
    """

    images: int
    classes: int
    distinct_polytopes: int
    effective_groups: float
    largest_group_share: float
    singletons: int
    subconcept_purity: float | None = None
    subconcept_purity_class: float | None = None

    def to_dict(self) -> dict[str, float]:
        """The statistics as the protocols report them: counts, ``effective_groups``, and the
        shares and purities in % (the sub-concept keys only when measured)."""
        out = {
            "distinct_polytopes": float(self.distinct_polytopes),
            "effective_groups": self.effective_groups,
            "largest_group_share": 100 * self.largest_group_share,
            "singletons": float(self.singletons),
        }
        if self.subconcept_purity is not None:
            out["subconcept_purity"] = 100 * self.subconcept_purity
            out["subconcept_purity_class"] = 100 * self.subconcept_purity_class
        return out

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


def _majority_share(groups: list[object], labels: list[int]) -> float:
    """Share of the images whose label is their group's most common one."""
    counts = Counter(zip(groups, labels, strict=True))
    largest: dict[object, int] = {}
    for (group, _), count in counts.items():
        largest[group] = max(largest.get(group, 0), count)
    return sum(largest.values()) / len(labels)


def polytope_groups(
    interpretations: Sequence[Interpretation], subconcepts: Tensor | None = None
) -> GroupStats:
    """Group N images by the polytope explaining each.

    Args:
        interpretations: N interpretations, the one explaining each image (one object may
            explain many images: a region's, say); all from one interpreter.
        subconcepts: (N,) integer sub-concept label of each image, or None.

    Returns:
        The statistics (see `GroupStats`).

    Raises:
        ValueError: no interpretation, or ``subconcepts`` not N integers.
    """
    n = len(interpretations)
    if n == 0:
        raise ValueError("polytope_groups needs at least one interpretation")
    known: dict[int, PolytopeKey] = {}  # one key per object: a region explains many images
    keys = []
    for e in interpretations:
        if id(e) not in known:
            known[id(e)] = polytope_key(e)
        keys.append(known[id(e)])
    sizes = Counter(keys)
    shares = torch.tensor(list(sizes.values()), dtype=torch.float64) / n
    per_class: dict[int, list[int]] = {}
    for (predicted, _), size in sizes.items():
        per_class.setdefault(predicted, []).append(size)
    largest = [max(s) / sum(s) for s in per_class.values()]
    purity = purity_class = None
    if subconcepts is not None:
        labels = torch.as_tensor(subconcepts).cpu()
        if labels.shape != (n,) or labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(
                f"subconcepts must be {n} integers, got {labels.dtype} of shape "
                f"{tuple(labels.shape)}"
            )
        values = labels.tolist()
        purity = _majority_share(keys, values)
        purity_class = _majority_share([key[0] for key in keys], values)
    return GroupStats(
        images=n,
        classes=len(per_class),
        distinct_polytopes=len(sizes),
        effective_groups=math.exp(float(-(shares * shares.log()).sum())),
        largest_group_share=sum(largest) / len(largest),
        singletons=sum(size == 1 for size in sizes.values()),
        subconcept_purity=purity,
        subconcept_purity_class=purity_class,
    )
