"""The regions gallery's cards, without HTTP: one card per distinct polytope.

k-means regions are inputs (the reference images nearest the centres), and several inputs often
share one polytope: the same predicted class, the same boundaries ``P`` and the same sides of
them (hence the same covered images). Such regions are one card, which says how many regions it
stands for. Each reference image is *interpreted* by exactly one region, as
:class:`repinterp.core.regions.RegionSet` assigns images (the covering region of largest
representativeness, else the region of the nearest k-means centre), so the cards' interpreted
counts add up to ``|R|``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.cover import sides
from ..core.interpretation import Interpretation
from ..core.nearest import nearest_rows
from ..core.regions import RegionSet

__all__ = ["Polytope", "distinct_polytopes", "polytope_key"]


@dataclass
class Polytope:
    """One card of the gallery.

    Attributes:
        regions: the k-means regions (indices into the region set) that share this polytope.
        inputs: their input reference images, in the same order.
        explanation: the interpretation of ``inputs[0]``.
        interpreted: reference images the polytope's regions interpret (see the module's
            docstring).
    """

    regions: list[int]
    inputs: list[int]
    explanation: Interpretation
    interpreted: int


def polytope_key(explanation: Interpretation) -> tuple[int, tuple[tuple[int, int], ...]]:
    """What makes two interpretations the same polytope: the predicted class, and each boundary
    of ``P`` (ascending) with the input's side of it."""
    p = explanation.boundaries.cpu()
    signs = sides(explanation.projections.cpu()[p]).tolist()
    return explanation.predicted_class, tuple(sorted(zip(p.tolist(), signs, strict=True)))


def _interpreted_by(regions: RegionSet, features: Tensor) -> Tensor:
    """(|R|,) the region interpreting each reference image, as ``RegionSet`` assigns them:
    the covering region of largest representativeness (ties: the lower region), else the
    region of the nearest k-means centre."""
    n = features.shape[0]
    covering = torch.zeros(len(regions), n, dtype=torch.bool)
    for v, region in enumerate(regions.regions):
        covering[v, region.covered.cpu()] = True
    size = torch.tensor([region.representativeness for region in regions.regions])
    best = torch.where(covering, size.unsqueeze(1), -1).max(0)
    region = best.indices
    uncovered = (best.values < 0).nonzero().flatten()
    if uncovered.numel():
        nearest = nearest_rows(features[uncovered].float(), regions.centres)[0][:, 0]
        region[uncovered] = nearest
    return region


def distinct_polytopes(regions: RegionSet, features: Tensor) -> list[Polytope]:
    """The region set's distinct polytopes, the most representative first (then by class and
    first region).

    Args:
        regions: k-means regions.
        features: |R| x (K h w) reference feature maps (the k-means' input).
    """
    counts = torch.bincount(_interpreted_by(regions, features), minlength=len(regions))
    cards: dict[tuple, Polytope] = {}
    inputs = regions.inputs.tolist()
    for v, (ref, e) in enumerate(zip(inputs, regions.regions, strict=True)):
        key = polytope_key(e)
        if key in cards:
            cards[key].regions.append(v)
            cards[key].inputs.append(ref)
            cards[key].interpreted += int(counts[v])
        else:
            cards[key] = Polytope([v], [ref], e, int(counts[v]))
    return sorted(
        cards.values(),
        key=lambda c: (-c.explanation.representativeness, c.explanation.predicted_class),
    )
