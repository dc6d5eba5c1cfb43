"""ACE (``evaluation.ace``, the algorithm) as a method of the protocols."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..run import Run
from .base import Method

if TYPE_CHECKING:
    from ..ace import ACE

__all__ = ["ACEMethod"]


class ACEMethod(Method):
    """ACE (``evaluation.ace``): one fit per group of discovery images, reused on new images
    by assigning their segments to the concepts."""

    name = "ACE"

    def _fit(self, run: Run, discovery: Tensor, target_class: int) -> ACE:
        from ..ace import ACE

        ace = ACE(run.setup.model, run.setup.target_layer, run.setup.normalize, seed=run.seed)
        return ace.fit(run.setup.pixels("reference", discovery), target_class=target_class)

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        keep = torch.zeros(images01.shape[0], *images01.shape[2:], dtype=torch.bool)
        centre, distance = run.reference_centre
        for v in range(len(run.regions)):
            rows = (run.unseen_centre == v).nonzero().flatten()
            if not rows.numel():
                continue
            members = (centre == v).nonzero().flatten()
            members = members[torch.sort(distance[members], stable=True).indices]
            ace = self._fit(run, members[: run.options.ace_images], int(run.regions.classes[v]))
            keep[rows] = ace.keep_masks(images01[rows])
        return keep

    def reuse(self, run: Run, index: int, images: Tensor) -> Tensor:
        """Kept pixels of ``images`` by the fit on the input's ``ace_images`` nearest reference
        images (its predicted class; fitted once per run and input)."""
        row = run.inputs.tolist().index(index)
        discovery = run.neighbours(run.options.ace_images)[row]
        target = int(run.setup.predictions["reference"][index])
        ace = run.cached(("ace", index), lambda: self._fit(run, discovery, target))
        return ace.keep_masks(run.setup.pixels("reference", images))

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        similar = run.neighbours(k)[run.inputs.tolist().index(index)]
        return similar, self.reuse(run, index, similar)
