"""Scoring a method's explanations: AD / AI of every image and, on a subset, the perturbation
metrics (ROAD, deletion, insertion); their means pooled over the images and per
interpretation.

``METRICS`` names what ``Options.metrics`` may choose. AD / AI (the paper's) are always
computed. ``ROAD`` is the expensive one (a sparse solve per image, percentile and order);
deletion and insertion cost ``steps + 1`` forward passes per image each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .metrics import DropIncrease, average_drop_increase, average_drop_increase_from_mask
from .perturbation import deletion_insertion, road
from .setup import Setup

__all__ = ["CURVE_KEYS", "METRICS", "Scores", "drop_increase", "score"]

METRICS = ("AD", "ROAD", "deletion", "insertion")
# Per-image keys of the perturbation metrics, and whether higher is better.
CURVE_KEYS = {
    "ROAD": True,
    "ROAD-MoRF": False,
    "ROAD-LeRF": True,
    "deletion": False,
    "insertion": True,
}


def drop_increase(setup: Setup, images01: Tensor, explanations: Tensor) -> DropIncrease:
    """AD/AI per image: keep the 20% hottest pixels of a heat map, or the given kept pixels."""
    if explanations.dtype == torch.bool:
        return average_drop_increase_from_mask(
            setup.model, images01, explanations, setup.normalize, setup.batch_size
        )
    return average_drop_increase(
        setup.model, images01, explanations, setup.normalize, batch_size=setup.batch_size
    )


@dataclass
class Scores:
    """Per-image scores of N explained images.

    Attributes:
        drop: (N,) the relative drop of AD, in [0, 1].
        increase: (N,) 1.0 where the score increased (AI), else 0.0.
        curves: the perturbation metrics by key of `CURVE_KEYS`, (N,) each, in % or
            percentage points; NaN for the images not scored.
    """

    drop: Tensor
    increase: Tensor
    curves: dict[str, Tensor]

    def pooled(self) -> dict[str, float]:
        """``mAD`` and ``mAI`` over all images, and each perturbation metric's mean over the
        images it scored (NaN for none), all in %."""
        out = {"mAD": 100 * _mean(self.drop), "mAI": 100 * _mean(self.increase)}
        return out | {key: _mean(values) for key, values in self.curves.items()}

    def per_interpretation(self, groups: Tensor) -> dict[str, float]:
        """``mAD_interp`` and ``mAI_interp``: AD and AI of the images each interpretation
        explains (its ``S_v``), averaged over the interpretations with images, in %."""
        groups = groups.cpu()
        means = {"mAD_interp": [], "mAI_interp": []}
        for v in groups.unique():
            rows = groups == v
            means["mAD_interp"].append(100 * _mean(self.drop[rows]))
            means["mAI_interp"].append(100 * _mean(self.increase[rows]))
        return {
            key: float(np.mean(values)) if values else math.nan for key, values in means.items()
        }


def score(
    setup: Setup,
    images01: Tensor,
    explanations: Tensor,
    metrics: tuple[str, ...] = METRICS,
    rows: Tensor | None = None,
    seed: int = 0,
) -> Scores:
    """Score explanations of images.

    Args:
        setup: the model and its normalisation.
        images01: N x C x H x W in [0, 1].
        explanations: N x H x W heat maps, or bool kept pixels (which rank no pixel: their
            perturbation metrics are NaN).
        metrics: which of `METRICS` (AD / AI always).
        rows: the images the perturbation metrics score (indices; None: all).
        seed: seeds ROAD's noise.
    """
    unknown = set(metrics) - set(METRICS)
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(sorted(unknown))}; choose from {METRICS}")
    scores = drop_increase(setup, images01, explanations)
    n = len(images01)
    rows = torch.arange(n) if rows is None else torch.as_tensor(rows).cpu()
    curves = {}
    wanted = [key for key in CURVE_KEYS if key.split("-")[0] in metrics]
    for key in wanted:
        curves[key] = torch.full((n,), math.nan)
    if wanted and explanations.dtype != torch.bool and len(rows):
        x, maps = images01[rows], explanations[rows].detach().float().cpu()
        computed = {}
        if "ROAD" in metrics:
            result = road(
                setup.model, x, maps, setup.normalize, batch_size=setup.batch_size, seed=seed
            )
            computed |= {
                "ROAD": result.combined,
                "ROAD-MoRF": result.morf,
                "ROAD-LeRF": result.lerf,
            }
        for mode in ("deletion", "insertion"):
            if mode in metrics:
                kwargs = {"mode": mode, "batch_size": setup.batch_size}
                computed[mode] = deletion_insertion(
                    setup.model, x, maps, setup.normalize, **kwargs
                )[1]
        for key, values in computed.items():
            curves[key][rows] = values
    return Scores(scores.drop, scores.increase.double(), curves)


def _mean(values: Tensor) -> float:
    """Mean of the values that are not NaN (NaN for none)."""
    values = values.double()
    values = values[~torch.isnan(values)]
    return float(values.mean()) if values.numel() else math.nan
