"""Which polytope explains an image, and what a group of images is made of.

Two interpretations are the same polytope when they predict the same class and have the same
boundaries of ``Q`` with the same sides (`polytope_key`): what regions, the viewer and the
analysis of the groups RI finds (`repinterp.evaluation.groupings`) count by. `composition`
says which sub-labels a group of images holds, as the notebook cards and the viewer show it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .cover import sides
from .interpretation import Interpretation

__all__ = ["PolytopeKey", "composition", "polytope_key"]

# The predicted class, and each boundary of P (ascending index into Q) with the input's side.
PolytopeKey = tuple[int, tuple[tuple[int, int], ...]]


def polytope_key(interpretation: Interpretation) -> PolytopeKey:
    """What makes two interpretations (of one interpreter, one ``Q``) the same polytope: the
    predicted class, and each boundary of ``P(x)`` (ascending) with ``x``'s side of it (-1, 0
    or 1). The order the greedy chose the boundaries in does not matter."""
    p = interpretation.boundary_ids.cpu()
    signs = sides(interpretation.projections.cpu()[p]).tolist()
    return interpretation.predicted_class, tuple(sorted(zip(p.tolist(), signs, strict=True)))


def composition(
    members: Sequence[int] | Tensor, sub_labels: Tensor, names: Sequence[str] | None = None
) -> list[dict[str, int | str]]:
    """What a group of images is made of, by sub-label (a sub-concept known for evaluation
    only, such as ``mnist-super``'s digit): ``{"sub_label", "name", "count"}`` per sub-label
    present, the most frequent first (ties: the lower sub-label), JSON-ready.

    Args:
        members: indices of the group's images into ``sub_labels``.
        sub_labels: (N,) integer sub-label of every image.
        names: one name per sub-label; None: the sub-label's number.
    """
    rows = torch.as_tensor(members, dtype=torch.long)
    values, counts = sub_labels.cpu().long()[rows].unique(return_counts=True)
    order = sorted(zip(values.tolist(), counts.tolist(), strict=True), key=lambda v: (-v[1], v[0]))
    return [
        {"sub_label": v, "name": str(v) if names is None else str(names[v]), "count": n}
        for v, n in order
    ]
