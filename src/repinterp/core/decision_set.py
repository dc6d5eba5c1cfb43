"""Decision sets: what ``D(x)`` excludes and which hyperplanes ``Q`` holds besides Eq. 2's.

The paper's cover (Eq. 3) keeps ``x``'s polytope free of ``D(x)``, the reference images
predicted another class, and draws ``Q`` from Eq. 2 alone. A *decision set* is the one place
where a granularity may change that, through four hooks, each called once per fit or per batch
of inputs:

- `DecisionSet.fit`, before the index pass: read what it needs off the reference set (a second
  pass over its feature maps, if it asks for one) and return its `Decisions`;
- `Decisions.boundaries`: hyperplanes ``Q`` holds after Eq. 2's (``top_classes`` < 0; their
  projections are computed apart, so that Eq. 2's columns are the paper's bit for bit);
- `Decisions.columns`: per-image columns the index keeps beside the projections, and that each
  input gets at explain;
- `Decisions.excluded`: the same-class reference images that ``D(x)`` also holds.

An input whose ``D(x)`` gains no image is covered on Eq. 2's boundaries alone, as the paper
covers it (`cover_columns`). The paper's granularity, `ClassSet` (``"class"``), has empty
hooks and is the default; the others (``strategy``) are beyond the paper and named
for what they compute; [`granularities`][repinterp.core.granularities] names them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from .boundaries import Boundaries, project

__all__ = [
    "ClassSet",
    "DecisionSet",
    "Decisions",
    "FitContext",
    "cover_columns",
    "extra_count",
    "project_blocks",
]


@dataclass
class FitContext:
    """What a decision set may read at fit.

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


class Decisions:
    """A fitted decision set: its hyperplanes, columns and exclusions (the paper's: none).

    Attributes:
        name: the granularity's name.
        boundaries: the hyperplanes ``Q`` holds after Eq. 2's, or None.
    """

    name: str = "class"
    boundaries: Boundaries | None = None

    def columns(self, head: nn.Module, features: Tensor, logits: Tensor) -> dict[str, Tensor]:
        """Per-image columns of N images with feature maps ``features`` and logits ``logits``
        (``head(features)``, computed once by the caller), N rows each."""
        return {}

    def finish(self, columns: dict[str, Tensor], predictions: Tensor) -> None:
        """Read the settings that depend on the whole reference set off its columns (|R| rows)
        and predictions, once the index pass is done; called at every fit."""

    def excluded(
        self,
        reference_columns: dict[str, Tensor],
        reference_predictions: Tensor,
        columns: dict[str, Tensor],
        predicted: Tensor,
    ) -> Tensor | None:
        """N x |R| bool: the reference images ``D(x)`` holds besides those of another class
        (None: none, as in the paper)."""
        return None

    def manifest(self) -> dict[str, Any]:
        """Fields of the index's manifest (none for the paper's granularity)."""
        return {}

    def tensors(self) -> dict[str, Tensor]:
        """State kept in the index's tensors besides its columns, by name; each name starts
        with ``decisions.`` (the index folder tells them from the columns by it)."""
        return {}

    def describe(self) -> str:
        """How every view names it (``print``, the viewer, the report, the notebook)."""
        return f"granularity {self.name} (the paper's RI)"


@dataclass(frozen=True)
class DecisionSet:
    """A granularity and the settings a user gave it; `fit` reads the rest off the data.

    Frozen and comparable, so that a [`FitConfig`][repinterp.core.config.FitConfig] holding it
    keys an evaluation's interpreters. Its dataclass fields are the user's settings, as keywords
    of [`decision_set`][repinterp.core.granularities.decision_set] (None: read off the data).
    """

    name: ClassVar[str] = "class"

    def fit(self, context: FitContext) -> Decisions:
        """The fitted decision set for one fit (every setting read off the data is read again)."""
        raise NotImplementedError

    def load(self, manifest: dict[str, Any], tensors: dict[str, Tensor]) -> Decisions:
        """The fitted decision set an index saved (its manifest fields and tensors).

        Raises:
            ValueError: the fields or tensors are missing or damaged.
        """
        raise NotImplementedError

    def describe(self) -> str:
        """How every view names it before a fit."""
        return f"granularity {self.name} (the paper's RI)"


@dataclass(frozen=True)
class ClassSet(DecisionSet):
    """The paper's decision set: ``D(x)`` = the reference images of another class, ``Q`` = Eq.
    2's boundaries."""

    name: ClassVar[str] = "class"

    def fit(self, context: FitContext) -> Decisions:
        return Decisions()

    def load(self, manifest: dict[str, Any], tensors: dict[str, Tensor]) -> Decisions:
        return Decisions()


def extra_count(q: Boundaries) -> int:
    """How many of ``Q``'s hyperplanes a decision set added (they come last; their
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


def cover_columns(extra: Tensor | None, n: int) -> Tensor:
    """Which of N inputs are covered on all of ``Q`` (True) rather than on Eq. 2's boundaries
    alone: those whose ``D(x)`` holds an image the decision set excluded (``extra``, N x |R|)."""
    if extra is None:
        return torch.zeros(n, dtype=torch.bool)
    return extra.any(1).cpu()
