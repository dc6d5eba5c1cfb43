"""Grad-CAM, Grad-CAM++ and Score-CAM (through pytorch-grad-cam) as methods of the protocols."""

from __future__ import annotations

from torch import Tensor

from ..baselines import ReusableCAM
from ..run import Run
from .base import Method

__all__ = ["CAMMethod"]


class CAMMethod(Method):
    """A CAM method with reused channel weights (``baselines.ReusableCAM``).

    Args:
        name: a key of ``baselines.CAM_METHODS``.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def _cam(self, run: Run) -> ReusableCAM:
        return ReusableCAM(self.name, run.setup.model, run.setup.target_layer)

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        cam = self._cam(run)
        cam.fit(run.setup.inputs("reference", run.regions.inputs.cpu()))
        inputs = run.setup.normalize(images01).to(run.setup.device)
        return cam.heatmaps(inputs, run.unseen_centre)

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        similar = run.neighbours(k)[run.inputs.tolist().index(index)]
        cam = self._cam(run)
        cam.fit(run.setup.inputs("reference", [index]))
        return similar, cam.heatmaps(run.setup.inputs("reference", similar), [0] * len(similar))
