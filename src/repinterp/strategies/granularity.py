"""``granularity="strategy"``, beyond the paper: polytopes that follow the model's strategies.

A *strategy* is a group of the reference images the model predicts one class for, found without
labels by [`discover_strategies`][repinterp.strategies.discovery.discover_strategies] on one vector
per image (`VECTORS`). The granularity (see [`granularity`][repinterp.core.granularity]):

- at fit, one forward pass over the reference set reads every image's vector and feature map;
  the strategies are found per predicted class, and ``Q`` also holds a linear separator in the
  target layer's space for each pair of strategies of one class
  ([`strategy_separators`][repinterp.strategies.discovery.strategy_separators]), so that Algorithm 1
  can cut one strategy out of another;
- each image's column ``"strategy"`` is its strategy (the nearest centre of its predicted
  class, for the reference images and for every new input alike);
- ``D(x)`` also holds the images of ``x``'s class in another strategy, so ``P(x)`` is a
  polytope of ``x``'s strategy: the images it covers are those the model treats as ``x``'s.

A class of one strategy excludes nothing: its inputs get the paper's ``P(x)``, bit for bit.
Memory: the fit keeps the reference set's flattened feature maps in RAM (|R| x K h w float32)
for the separators, unlike the paper's granularity.
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
from .discovery import K_MAX, Strategies, discover_strategies, strategy_separators

__all__ = ["VECTORS", "StrategyDecisions", "StrategySet", "strategy_vectors"]

VECTORS = ("features", "pooled")
"""What a strategy is found on: ``features``, each image's flattened feature map at the target
layer; ``pooled``, its spatial mean per channel (K values)."""

_STATE = STATE_PREFIX + "strategies."


def strategy_vectors(features: Tensor, kind: str) -> Tensor:
    """N x D vectors of N feature maps (N x K x h x w) of kind ``kind`` (`VECTORS`), float32."""
    if kind == "pooled":
        return features.float().mean((2, 3))
    return features.float().flatten(1)


class StrategyDecisions(FittedGranularity):
    """``granularity="strategy"`` fitted.

    Attributes:
        strategies: the strategies found (their centres, and the strategy of each reference
            image as ``strategies.assignment``).
        vectors: the kind of vector they were found on (`VECTORS`).
    """

    def __init__(
        self, strategies: Strategies, vectors: str, boundaries: Boundaries | None = None
    ) -> None:
        self.strategies = strategies
        self.vectors = vectors
        self.boundaries = boundaries

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
        fields = {"granularity": self.name, "strategy_vectors": self.vectors}
        return fields | {"strategies": settings}, {
            _STATE + name: value for name, value in tensors.items()
        }

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
        features, predicted = [], []
        for t in context.stream():
            with torch.inference_mode():
                predicted.append(context.head(t).argmax(1).cpu())
            features.append(t.float().cpu())
        maps, classes = torch.cat(features), torch.cat(predicted)
        vectors = strategy_vectors(maps, self.vectors)
        strategies = discover_strategies(vectors, classes, context.seed, self.k_max)
        separators = strategy_separators(maps, strategies.assignment, classes)
        dtype = context.source_features.dtype
        extra = separators.to(context.source_features.device) if len(separators) else None
        if extra is not None:
            extra = Boundaries(extra.weight.to(dtype), extra.bias.to(dtype), extra.top_classes)
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
        return StrategyDecisions(Strategies.from_tensors(state, settings), vectors)

    def describe(self) -> str:
        return f"granularity strategy (found at fit on {self.vectors}, beyond the paper)"


StrategyDecisions.plug = StrategySet  # its name and capabilities
