"""The regions gallery's cards, without HTTP: one card per distinct polytope.

k-means regions are inputs (the reference images nearest the centres), and several inputs often
share one polytope: the same predicted class, the same boundaries ``P`` and the same sides of
them (hence the same covered images). Such regions are one card, which says how many regions it
stands for. Each reference image is *interpreted* by exactly one region, as
:class:`repinterp.core.regions.RegionSet` assigns images (the covering region of largest
representativeness, else the region of the nearest k-means centre), so the cards' interpreted
counts add up to ``|R|``. The notion lives in :mod:`repinterp.core.regions` (a notebook's
``RegionSet`` shows the same cards); the gallery takes it from there.
"""

from __future__ import annotations

from ..core.groups import polytope_key
from ..core.regions import Polytope, distinct_polytopes

__all__ = ["Polytope", "distinct_polytopes", "polytope_key"]
