"""Algorithm 1 of the paper: a greedy solution of the submodular-cost submodular-cover problem,
and Eq. 3 solved exactly.

Everything here works on *sides*: ``sign(<W_h, t> + b_h)`` in {-1, 0, 1} for every reference
image and boundary. A reference image is covered by ``P`` when it has the input's side on every
boundary of ``P``; it is *separated* by ``h`` when its side on ``h`` differs from the input's.

Algorithm 1 as the paper states it, for one input, is
[`repinterp.core.paper.algorithm_1`][repinterp.core.paper.algorithm_1]: the definition these fast
paths are tested against. Modules: ``common`` (sides, results, shape checks), ``incremental``
(the greedy's host path on bit sets), ``masked`` (its batched path on matrix products and CUDA
graphs), ``index`` ([`CoverIndex`][repinterp.core.cover.CoverIndex]), ``greedy``
([`greedy_cover`][repinterp.core.cover.greedy_cover]) and ``exact`` (the MILP).
"""

from __future__ import annotations

from .common import CoverResult, sides
from .exact import ExactCoverResult, exact_cover, fewest_boundaries
from .greedy import greedy_cover
from .prepared import CoverIndex

__all__ = [
    "CoverIndex",
    "CoverResult",
    "ExactCoverResult",
    "exact_cover",
    "fewest_boundaries",
    "greedy_cover",
    "sides",
]
