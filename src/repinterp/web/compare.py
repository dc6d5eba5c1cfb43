"""RI's heat maps next to the CAM baselines' (the paper's Fig. 2, live), without HTTP.

Each CAM method computes its channel weights on the input, once, through pytorch-grad-cam
([`baselines`][repinterp.evaluation.baselines]), and reuses them unchanged on the input's similar
images, as the paper's comparison does. Weights are kept per (input, method) in a small LRU;
Score-CAM's (one forward pass per channel) is the slow one, so callers ask for it last.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch
from torch import Tensor

from ..workspace import Workspace

__all__ = ["CAMS", "METHODS", "CamWeights"]

# Method ids in the API (and the page's order: RI first, Score-CAM last) -> names.
METHODS = {"ri": "RI", "gradcam": "Grad-CAM", "gradcampp": "Grad-CAM++", "scorecam": "Score-CAM"}
CAMS = tuple(method for method in METHODS if method != "ri")


class CamWeights:
    """The CAM baselines' channel weights on inputs of a workspace, each computed once.

    Args:
        workspace: the model, its target layer and its normalisation.
        cache_size: (input, method) pairs whose weights are kept; the least recently used
            pair is dropped first.
    """

    def __init__(self, workspace: Workspace, cache_size: int = 64) -> None:
        interpreter = workspace.interpreter
        self.model = interpreter.model
        self.layer = interpreter.target_layer
        self.device = interpreter.device
        self.normalization = workspace.normalization
        self.cache_size = cache_size
        self._weights: OrderedDict[tuple[str, str], Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def weights(self, method: str, key: str, pixels: Tensor, target_class: int) -> Tensor:
        """K channel weights of ``method`` (a CAM id of `METHODS`) for ``target_class``
        on the input ``key`` (C x H x W pixels in [0, 1])."""
        if method not in CAMS:
            raise ValueError(f"not a CAM method: {method!r}; expected one of {', '.join(CAMS)}")
        name = METHODS[method]
        with self._lock:
            cached = self._weights.get((key, method))
            if cached is not None:
                self._weights.move_to_end((key, method))
                return cached
        from ..evaluation.baselines import cam_weights  # here: pytorch-grad-cam is slow to load

        inputs = self.normalization(pixels.unsqueeze(0)).to(self.device)
        weights = cam_weights(name, self.model, self.layer, inputs, [target_class])[0]
        with self._lock:
            self._weights[(key, method)] = weights
            while len(self._weights) > self.cache_size:
                self._weights.popitem(last=False)
        return weights

    def maps(
        self, method: str, key: str, input_pixels: Tensor, target_class: int, pixels: Tensor
    ) -> Tensor:
        """Heat maps of ``method`` on N images, with the weights of input ``key`` reused.

        Args:
            method: a CAM id of `METHODS`.
            key: names the input whose weights are reused.
            input_pixels: the input, C x H x W in [0, 1].
            target_class: the class explained (the input's predicted class).
            pixels: N x C x H x W in [0, 1].

        Returns:
            N x H x W in [0, 1] (CPU), as pytorch-grad-cam normalises them.
        """
        from ..evaluation.baselines import reused_cam

        weights = self.weights(method, key, input_pixels, target_class)
        inputs = self.normalization(pixels).to(self.device)
        with torch.no_grad():
            return reused_cam(METHODS[method], self.model, self.layer, inputs, weights).cpu()
