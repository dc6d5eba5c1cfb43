"""``granularity="strategy"``, beyond the paper: polytopes that follow the model's strategies.

A *strategy* is a group of the reference images the model predicts one class for, found without
labels by [`discover_strategies`][repinterp.strategies.discovery.discover_strategies] on one vector
per image (`VECTORS`). The granularity (see [`granularity`][repinterp.core.granularity]):

- at fit, one forward pass over the reference set reads every image's vector; the strategies
  are found per predicted class, and ``Q`` also holds, for each pair of strategies of one class,
  the bisector of their k-means cells as a hyperplane in the target layer's space
  ([`cell_bisectors`][repinterp.strategies.discovery.cell_bisectors] mapped back through the
  vectors, which are linear in the feature map: `bisector_boundaries`), so that Algorithm 1 can
  cut one strategy out of another and a strategy's polytope can be cut to its cell exactly;
- each image's column ``"strategy"`` is its strategy (the nearest centre of its predicted
  class, for the reference images and for every new input alike);
- ``D(x)`` also holds the images of ``x``'s class in another strategy, so ``P(x)`` is a
  polytope of ``x``'s strategy: the images it covers are those the model treats as ``x``'s.

A class of one strategy excludes nothing: its inputs get the paper's ``P(x)``, bit for bit.
Memory: the fit keeps the reference set's vectors in RAM (|R| x K h w float32 for
``features``), unlike the paper's granularity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..core.boundaries import Boundaries
from ..core.cover import CoverResult
from ..core.granularity import (
    STATE_PREFIX,
    FitContext,
    FittedGranularity,
    Granularity,
    Solve,
    covers_with_exclusions,
)
from .discovery import K_MAX, SEPARATOR_CLASSES, Strategies, cell_bisectors, discover_strategies

__all__ = [
    "VECTORS",
    "StrategyDecisions",
    "StrategySet",
    "bisector_boundaries",
    "strategy_vectors",
]

VECTORS = ("features", "pooled")
"""What a strategy is found on: ``features``, each image's flattened feature map at the target
layer; ``pooled``, its spatial mean per channel (K values)."""

_STATE = STATE_PREFIX + "strategies."
_SUMMARY = STATE_PREFIX + "summary."


def strategy_vectors(features: Tensor, kind: str) -> Tensor:
    """N x D vectors of N feature maps (N x K x h x w) of kind ``kind`` (`VECTORS`), float32."""
    if kind == "pooled":
        return features.float().mean((2, 3))
    return features.float().flatten(1)


def bisector_boundaries(
    strategies: Strategies, feature_shape: tuple[int, ...], kind: str
) -> Boundaries:
    """`cell_bisectors` of ``strategies`` (found on vectors of kind ``kind``) as hyperplanes on
    feature maps of shape ``feature_shape`` (K x h x w): ``<W, t> = <u, v(t)>`` for the linear
    map ``v`` of `strategy_vectors` (``W = u`` reshaped; pooled: ``u_k / (h w)`` at every
    position of channel ``k``).

    Returns:
        `Boundaries` (one per pair, ``top_classes`` `SEPARATOR_CLASSES`, float64 on the CPU);
        none when no class has two strategies.
    """
    pairs, u, c = cell_bisectors(strategies)
    k, h, w = feature_shape
    if kind == "pooled":
        weight = (u / (h * w))[:, :, None, None].expand(len(u), k, h, w)
    else:
        weight = u.reshape(len(u), k, h, w)
    top = torch.full((len(pairs), 2), SEPARATOR_CLASSES, dtype=torch.long)
    return Boundaries(weight.contiguous(), c, top)


class StrategyDecisions(FittedGranularity):
    """``granularity="strategy"`` fitted.

    Attributes:
        strategies: the strategies found (their centres, and the strategy of each reference
            image as ``strategies.assignment``).
        vectors: the kind of vector they were found on (`VECTORS`).
        summary: the model's strategies as ``RepresentativeInterpreter.strategies()`` found
            them, kept to be saved with the index (tensors by name, and one JSON-able entry per
            strategy: see `repinterp.strategies.model.strategies_state`); None until they are
            found.
    """

    def __init__(
        self,
        strategies: Strategies,
        vectors: str,
        boundaries: Boundaries | None = None,
        summary: tuple[dict[str, Tensor], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.strategies = strategies
        self.vectors = vectors
        self.boundaries = boundaries
        self.summary = summary

    def columns(self, head: nn.Module, features: Tensor, logits: Tensor) -> dict[str, Tensor]:
        vectors = strategy_vectors(features, self.vectors)
        strategy = self.strategies.assign(vectors, logits.argmax(1))
        return {"strategy": strategy.to(features.device)}

    def covers(
        self,
        reference_columns: dict[str, Tensor],
        input_sides: Tensor,
        other: Tensor,
        columns: dict[str, Tensor],
        solve: Solve,
    ) -> list[tuple[CoverResult, int]]:
        """``D(x)`` also holds the images of ``x``'s class in another strategy; an input whose
        ``D(x)`` gains none is covered on Eq. 2's boundaries alone, as the paper covers it."""
        device = other.device
        reference = reference_columns["strategy"].to(device)
        own = columns["strategy"].to(device)
        same_class = ~other  # the images of x's predicted class
        excluded = same_class & (reference[None] != own[:, None])
        return covers_with_exclusions(excluded, input_sides, other, solve)

    def state(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        tensors, settings = self.strategies.tensors()
        fields = {
            "granularity": self.name,
            "strategy_vectors": self.vectors,
            "strategies": settings,
        }
        out = {_STATE + name: value for name, value in tensors.items()}
        if self.summary is not None:
            fields["strategy_summary"] = self.summary[1]
            out.update({_SUMMARY + name: value for name, value in self.summary[0].items()})
        return fields, out

    def describe(self) -> str:
        k = self.strategies.k
        return (
            f"granularity strategy ({len(self.strategies)} strategies in {len(k)} classes, "
            f"found on {self.vectors}, beyond the paper)"
        )


@dataclass(frozen=True)
class StrategySet(Granularity):
    """``granularity="strategy"`` (beyond the paper): a polytope per strategy of a class.

    Attributes:
        k_max: the most strategies per class (1: the paper's RI).
        vectors: what strategies are found on (`VECTORS`).

    Raises:
        ValueError: ``k_max`` below 1 or an unknown ``vectors``.
    """

    name: ClassVar[str] = "strategy"
    beyond_paper: ClassVar[bool] = True
    has_strategies: ClassVar[bool] = True
    k_max: int = K_MAX
    vectors: str = "features"

    def __post_init__(self) -> None:
        if isinstance(self.k_max, bool) or not isinstance(self.k_max, int) or self.k_max < 1:
            raise ValueError(f"k_max must be a whole number >= 1, got {self.k_max!r}")
        if self.vectors not in VECTORS:
            raise ValueError(
                f"unknown strategy vectors {self.vectors!r}; choose one of {', '.join(VECTORS)}"
            )

    def fit(self, context: FitContext) -> StrategyDecisions:
        vectors, predicted = [], []
        for t in context.stream():
            with torch.inference_mode():
                predicted.append(context.head(t).argmax(1).cpu())
            vectors.append(strategy_vectors(t, self.vectors).cpu())
        classes = torch.cat(predicted)
        strategies = discover_strategies(torch.cat(vectors), classes, context.seed, self.k_max)
        source = context.source_features
        bisectors = bisector_boundaries(strategies, tuple(source.shape[1:]), self.vectors)
        if not len(bisectors):
            return StrategyDecisions(strategies, self.vectors)
        extra = Boundaries(
            bisectors.weight.to(source.device, source.dtype),
            bisectors.bias.to(source.device, source.dtype),
            bisectors.top_classes.to(source.device),
        )
        return StrategyDecisions(strategies, self.vectors, extra)

    def load(self, manifest: dict[str, Any], tensors: dict[str, Tensor]) -> StrategyDecisions:
        state = {
            k.removeprefix(_STATE): v.cpu() for k, v in tensors.items() if k.startswith(_STATE)
        }
        settings = manifest.get("strategies")
        if not isinstance(settings, dict) or not state:
            raise ValueError("its strategies are missing")
        vectors = manifest.get("strategy_vectors")
        if vectors not in VECTORS:
            raise ValueError(f"its strategy vectors {vectors!r} are unknown")
        if "strategy" not in tensors:
            raise ValueError("its strategy column is missing")
        summary = None
        if isinstance(manifest.get("strategy_summary"), list):
            saved = {
                k.removeprefix(_SUMMARY): v.cpu()
                for k, v in tensors.items()
                if k.startswith(_SUMMARY)
            }
            summary = (saved, manifest["strategy_summary"])
        strategies = Strategies.from_tensors(state, settings)
        return StrategyDecisions(strategies, vectors, summary=summary)

    def describe(self) -> str:
        return f"granularity strategy (found at fit on {self.vectors}, beyond the paper)"


StrategyDecisions.plug = StrategySet  # its name and capabilities
