"""The granularity: the one plug through which the method may go beyond the paper.

The paper's cover (Eq. 3) keeps ``x``'s polytope free of ``D(x)``, the reference images
predicted another class, and draws ``Q`` from Eq. 2 alone. A *granularity* may change that,
through three hooks:

1. `Granularity.fit`, before the index pass: read what it needs off the reference set (a second
   pass over its feature maps, if it asks for one) and return the `FittedGranularity`, whose
   ``boundaries`` are hyperplanes ``Q`` holds after Eq. 2's (``top_classes`` < 0; their
   projections are computed apart, so that Eq. 2's columns are the paper's bit for bit);
2. `FittedGranularity.columns`: per-image columns the index keeps beside the projections, and
   that each input gets at explain;
3. `FittedGranularity.covers`: the cover problems of N inputs: which images ``D(x)`` holds and
   on which hyperplanes each input is covered.

Besides the hooks, a fitted granularity keeps its record (`FittedGranularity.state`,
`Granularity.load`) and names itself (``describe``). The paper's granularity is `Granularity`
itself (``"class"``): empty hooks, the default. Those beyond the paper subclass it, named for
what they compute, and say what they offer as capabilities (``has_strategies``), so that no
surface compares names; [`granularities`][repinterp.core.granularities] names them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from .boundaries import Boundaries, project

if TYPE_CHECKING:
    from .cover import CoverResult

__all__ = [
    "STATE_PREFIX",
    "Covers",
    "FitContext",
    "FittedGranularity",
    "Granularity",
    "Solve",
    "covers_with_exclusions",
    "extra_count",
    "project_blocks",
]

Solve = Callable[[bool, Tensor, Tensor], "CoverResult"]
"""Algorithm 1 (or the exact solver) for N inputs: ``solve(all_of_q, input_sides, other)``,
on all of ``Q`` or on Eq. 2's boundaries alone (of ``input_sides``, N x |Q|, it reads those
columns then), ``other`` the N x |R| images ``D(x)`` holds."""
Covers = list[tuple["CoverResult", int]]
"""Per input, in order, the cover result that holds it and its row there."""
STATE_PREFIX = "decisions."
"""How the index's tensors name a granularity's state, apart from its columns (the name of
repinterp 0.5's indexes, whose granularity was called their decision set)."""


@dataclass
class FitContext:
    """What a granularity may read at fit.

    Attributes:
        head: ``G``.
        source_features: |Q| x K x h x w feature maps of ``Q``'s source images.
        n_boundaries: ``|Q|`` asked for.
        seed: the fit's seed.
        stream: a pass over the reference set: yields its feature maps (B x K x h x w, on the
            device) batch by batch, in order; each call is one more forward pass.
    """

    head: nn.Module
    source_features: Tensor
    n_boundaries: int
    seed: int
    stream: Callable[[], Iterator[Tensor]]


@dataclass(frozen=True)
class Granularity:
    """A granularity and the settings a user gave it; `fit` reads the rest off the data. This
    class is the paper's (``"class"``): ``D(x)`` = the reference images of another class, ``Q``
    = Eq. 2's boundaries.

    Frozen and comparable, so that a [`FitConfig`][repinterp.core.config.FitConfig] holding it
    keys an evaluation's interpreters. A subclass's dataclass fields are the user's settings, as
    keywords of [`granularity`][repinterp.core.granularities.granularity] (None: read off the
    data).

    Attributes:
        name: its name in the registry.
        beyond_paper: whether it changes the paper's method (False: the paper's).
        has_strategies: whether its index knows the model's strategies
            (``RepresentativeInterpreter.strategies``, ``repinterp audit``).
    """

    name: ClassVar[str] = "class"
    beyond_paper: ClassVar[bool] = False
    has_strategies: ClassVar[bool] = False

    def fit(self, context: FitContext) -> FittedGranularity:
        """Hook 1: the fitted granularity for one fit (every setting read off the data is read
        again)."""
        return FittedGranularity()

    def load(self, fields: dict[str, Any], tensors: dict[str, Tensor]) -> FittedGranularity:
        """The fitted granularity an index saved (its manifest's fields and its tensors).

        Raises:
            ValueError: the fields or tensors are missing or damaged.
        """
        return FittedGranularity()

    def describe(self) -> str:
        """How every view names it before a fit."""
        return f"granularity {self.name} (the paper's RI)"


class FittedGranularity:
    """A fitted granularity: its hyperplanes, columns and cover problems (the paper's: Eq. 2's
    boundaries, no column, ``D(x)`` the other classes).

    Attributes:
        plug: the `Granularity` class that made it (its name and capabilities).
        boundaries: the hyperplanes ``Q`` holds after Eq. 2's, or None.
    """

    plug: ClassVar[type[Granularity]] = Granularity
    boundaries: Boundaries | None = None

    @property
    def name(self) -> str:
        return self.plug.name

    @property
    def beyond_paper(self) -> bool:
        return self.plug.beyond_paper

    @property
    def has_strategies(self) -> bool:
        return self.plug.has_strategies

    def columns(self, head: nn.Module, features: Tensor, logits: Tensor) -> dict[str, Tensor]:
        """Hook 2: per-image columns of N images with feature maps ``features`` and logits
        ``logits`` (``head(features)``, computed once by the caller), N rows each."""
        return {}

    def covers(
        self,
        reference_columns: dict[str, Tensor],
        input_sides: Tensor,
        other: Tensor,
        columns: dict[str, Tensor],
        solve: Solve,
    ) -> Covers:
        """Hook 3: the covers of N inputs, solved with ``solve``.

        Args:
            reference_columns: the index's columns (hook 2 of the reference set), |R| rows.
            input_sides: N x |Q| sides of the inputs.
            other: N x |R| bool, the reference images of another class than each input's.
            columns: the inputs' columns (hook 2), N rows each.
            solve: the solver (`Solve`).
        """
        result = solve(True, input_sides, other)
        return [(result, i) for i in range(input_sides.shape[0])]

    def state(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """Its record: fields of the index's manifest and tensors besides its columns, whose
        names start with `STATE_PREFIX` (the paper's: none)."""
        return {}, {}

    def describe(self) -> str:
        """How every view names it (``print``, the viewer, the report, the notebook)."""
        return f"granularity {self.name} (the paper's RI)"


def covers_with_exclusions(
    excluded: Tensor, input_sides: Tensor, other: Tensor, solve: Solve
) -> Covers:
    """The covers of N inputs whose ``D(x)`` also holds ``excluded`` (N x |R|): those that gained
    an image are covered on all of ``Q``, the others on Eq. 2's boundaries alone, as the paper
    covers them."""
    other = other | excluded.to(other.device)
    full = excluded.any(1).cpu()
    where: list[tuple[CoverResult, int] | None] = [None] * input_sides.shape[0]
    for group, all_of_q in ((full, True), (~full, False)):
        rows = group.nonzero().flatten()
        if not len(rows):
            continue
        on = rows.to(input_sides.device)
        result = solve(all_of_q, input_sides[on], other[on])
        for j, i in enumerate(rows.tolist()):
            where[i] = (result, j)
    return where  # type: ignore[return-value]


def extra_count(q: Boundaries) -> int:
    """How many of ``Q``'s hyperplanes a granularity added (they come last; their
    ``top_classes`` are negative: they separate no pair of classes)."""
    return int((q.top_classes[:, 0] < 0).sum())


def project_blocks(features: Tensor, boundaries: Boundaries, n_extra: int) -> Tensor:
    """[`project`][repinterp.core.boundaries.project] on Eq. 2's boundaries and, apart, on the
    ``n_extra`` hyperplanes after them, so that Eq. 2's columns are those of a class fit bit for
    bit (N x |Q|)."""
    if n_extra == 0:
        return project(features, boundaries)
    q = len(boundaries) - n_extra
    device = boundaries.bias.device
    blocks = (torch.arange(q, device=device), torch.arange(q, len(boundaries), device=device))
    return torch.cat([project(features, boundaries.select(b)) for b in blocks], 1)
