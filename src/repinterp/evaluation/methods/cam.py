"""Grad-CAM, Grad-CAM++ and Score-CAM (through pytorch-grad-cam) as methods of the protocols."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..baselines import ReusableCAM
from ..run import Run
from .base import Method

__all__ = ["CAMMethod"]


class CAMMethod(Method):
    """A CAM method with reused channel weights (``baselines.ReusableCAM``).

    Args:
        name: a key of ``baselines.CAM_METHODS``.
        cluster: a control of ours (named ``NAME+cluster``): the weights reused for a k-means
            cluster are the mean of the weights of ``options.score_images`` of its reference
            images (drawn with the run's seed), not of the one nearest its centre; in
            ``reference``, the mean over the input's nearest neighbours. It has what RI's
            polytope Score-CAM has (weights averaged over many images) but no polytope.
    """

    def __init__(self, name: str, cluster: bool = False) -> None:
        self.base = name
        self.cluster = cluster
        self.name = f"{name}+cluster" if cluster else name

    def _cam(self, run: Run) -> ReusableCAM:
        return ReusableCAM(self.base, run.setup.model, run.setup.target_layer)

    def _mean_weights(self, run: Run, groups: list[Tensor]) -> ReusableCAM:
        """A CAM whose row ``v`` of weights is the mean over the reference images ``groups[v]``."""
        cam = self._cam(run)
        weights = cam.fit(run.setup.inputs("reference", torch.cat(groups)))
        cam.weights = torch.stack(
            [part.mean(0) for part in weights.split([len(g) for g in groups])]
        )
        return cam

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        inputs = run.setup.normalize(images01).to(run.setup.device)
        if not self.cluster:
            cam = self._cam(run)
            cam.fit(run.setup.inputs("reference", run.regions.inputs.cpu()))
            return cam.heatmaps(inputs, run.unseen_centre)
        centre, rng = run.reference_centre[0], np.random.default_rng(run.seed)
        groups = []
        for v in range(len(run.regions)):
            members = (centre == v).nonzero().flatten()
            if not len(members):  # a centre no reference image is nearest: its own input
                members = run.regions.inputs[v : v + 1].cpu()
            chosen = rng.permutation(len(members))[: run.options.score_images]
            groups.append(members[torch.from_numpy(np.sort(chosen))])
        return self._mean_weights(run, groups).heatmaps(inputs, run.unseen_centre)

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        similar = run.neighbours(k)[run.inputs.tolist().index(index)]
        if self.cluster:
            group = run.neighbours(run.options.score_images)[run.inputs.tolist().index(index)]
            cam = self._mean_weights(run, [group])
        else:
            cam = self._cam(run)
            cam.fit(run.setup.inputs("reference", [index]))
        return similar, cam.heatmaps(run.setup.inputs("reference", similar), [0] * len(similar))
