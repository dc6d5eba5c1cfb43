"""Grad-CAM, Grad-CAM++ and Score-CAM (through pytorch-grad-cam) as methods of the protocols."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ...maps.polytope_weights import draw_indices
from ..baselines import ReusableCAM
from ..run import Run
from .base import Method

__all__ = ["AVERAGES", "CAMMethod"]

# The controls of ours: over which images a CAM's reused weights are averaged.
AVERAGES = ("cluster", "class")


class CAMMethod(Method):
    """A CAM method with reused channel weights (``baselines.ReusableCAM``).

    Args:
        name: a key of ``baselines.CAM_METHODS``.
        average: None (the paper's: the weights of one input image), or a control of ours,
            named ``NAME+AVERAGE``, whose weights are the mean of the weights of
            ``options.score_images`` reference images drawn with the run's seed. It has what
            RI's polytope-averaged Score-CAM (``RI+score``) has, weights averaged over many
            images, but no polytope:

            - ``"cluster"``: in ``unseen``, images of the k-means cluster (reused on the
              images of its centre); in ``reference``, the input and its nearest neighbours
              outside the images scored (as ``"class"`` draws its own), so that no image the
              maps are scored on helped make the weights but the input's own.
            - ``"class"``: images the model predicts the class of. In ``unseen``, one draw per
              class, reused on every image predicted that class; in ``reference``, the input
              and images of its predicted class drawn outside the images scored, as
              ``RI+score`` draws its own (the input and covered images outside them).
    """

    def __init__(self, name: str, average: str | None = None) -> None:
        if average is not None and average not in AVERAGES:
            raise ValueError(f"unknown average {average!r}; choose one of {', '.join(AVERAGES)}")
        self.base = name
        self.average = average
        self.name = f"{name}+{average}" if average else name

    def _cam(self, run: Run) -> ReusableCAM:
        return ReusableCAM(
            self.base, run.setup.model, run.setup.target_layer, progress=run.options.progress
        )

    def _mean_weights(self, run: Run, groups: list[Tensor]) -> ReusableCAM:
        """A CAM whose row ``v`` of weights is the mean over the reference images ``groups[v]``."""
        cam = self._cam(run)
        weights = cam.fit(run.setup.inputs("reference", torch.cat(groups)))
        cam.weights = torch.stack(
            [part.mean(0) for part in weights.split([len(g) for g in groups])]
        )
        return cam

    def _of_class(self, run: Run, c: int) -> Tensor:
        """The reference images the model predicts class ``c`` (CPU long).

        Raises:
            ValueError: there is none.
        """
        members = (run.setup.predictions["reference"] == c).nonzero().flatten()
        if not len(members):
            raise ValueError(f"{self.name}: no reference image is predicted class {c}")
        return members

    def groups(self, run: Run) -> Tensor:
        if self.average == "class":
            return run.setup.predictions["unseen"]
        return super().groups(run)

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        inputs = run.setup.normalize(images01).to(run.setup.device)
        rng, n = np.random.default_rng(run.seed), run.options.score_images
        if self.average is None:
            cam = self._cam(run)
            cam.fit(run.setup.inputs("reference", run.regions.inputs.cpu()))
            return cam.heatmaps(inputs, run.unseen_centre)
        if self.average == "class":
            classes, row = run.setup.predictions["unseen"].unique(return_inverse=True)
            groups = [draw_indices(self._of_class(run, c), n, rng) for c in classes.tolist()]
            return self._mean_weights(run, groups).heatmaps(inputs, row)
        centre, groups = run.reference_centre[0], []
        for v in range(len(run.regions)):
            members = (centre == v).nonzero().flatten()
            if not len(members):  # a centre no reference image is nearest: its own input
                members = run.regions.inputs[v : v + 1].cpu()
            groups.append(draw_indices(members, n, rng))
        return self._mean_weights(run, groups).heatmaps(inputs, run.unseen_centre)

    @staticmethod
    def _neighbours_outside(run: Run, index: int, scored: Tensor) -> Tensor:
        """The input ``index`` and its ``options.score_images - 1`` nearest reference images
        (Euclidean, in feature space) outside ``scored``, the images its maps are scored on."""
        n, row = run.options.score_images, run.inputs.tolist().index(index)
        ranking = run.neighbours(max(*run.options.ks, len(scored)) + n)[row]
        taken = torch.cat([scored.cpu(), ranking.new_tensor([index])])
        outside = ranking[~torch.isin(ranking, taken)]
        return torch.cat([ranking.new_tensor([index]), outside[: n - 1]])

    def reuse(self, run: Run, index: int, images: Tensor) -> Tensor:
        if self.average == "cluster":
            cam = self._mean_weights(run, [self._neighbours_outside(run, index, images)])
        elif self.average == "class":
            members = self._of_class(run, int(run.setup.predictions["reference"][index]))
            rng = np.random.default_rng(run.seed)
            drawn = draw_indices(members, run.options.score_images, rng, index, images)
            cam = self._mean_weights(run, [drawn])
        else:
            cam = self._cam(run)
            cam.fit(run.setup.inputs("reference", [index]))
        return cam.heatmaps(run.setup.inputs("reference", images), [0] * len(images))

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        similar = run.neighbours(k)[run.inputs.tolist().index(index)]
        return similar, self.reuse(run, index, similar)
