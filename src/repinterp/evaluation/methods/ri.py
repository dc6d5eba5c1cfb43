"""Representative interpretations (the paper's method) as a method of the protocols."""

from __future__ import annotations

from torch import Tensor

from ..run import Run, self_first
from .base import Method

__all__ = ["RIMethod"]


class RIMethod(Method):
    """Representative interpretations: regions on unseen images, semantic distance on the
    reference set."""

    name = "RI"

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        return run.regions.heatmap(run.setup.normalize(images01).to(run.setup.device))

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        explanation = run.interpreter.explain_reference([index])[0]
        similar = self_first(explanation.similar().cpu(), index, k)
        return similar, explanation.heatmap(run.setup.inputs("reference", similar))
