"""Representative interpretations (the paper's method) and its variants as methods of the
protocols."""

from __future__ import annotations

import torch
from torch import Tensor

from ...core.boundaries import SAMPLINGS
from ...core.config import FitConfig
from ...core.granularities import GRANULARITIES, PAPERS
from ...core.interpretation import SIMILARITY_METRICS, Interpretation
from ...core.regions import RegionSet
from ...maps.polytope_weights import covered_sample, with_score_weights
from ..run import Run, self_first
from .base import Method

__all__ = ["KNOBS", "RIMethod"]

# Each knob of RI, its values, the paper's first.
KNOBS: dict[str, tuple[str, ...]] = {
    "solver": ("greedy", "exact"),
    "sampling": SAMPLINGS,
    "weights": ("gradient", "score"),
    "similar": SIMILARITY_METRICS,
    "granularity": GRANULARITIES,
}


class RIMethod(Method):
    """Representative interpretations: regions on unseen images, similar images on the
    reference set; the paper's by default.

    Args:
        solver: ``"greedy"`` (Algorithm 1) or ``"exact"`` (the MILP; its time limit is
            ``options.time_limit``).
        sampling: how ``Q`` is drawn: ``"uniform"``, ``"balanced"`` or ``"pairs"``
            ([`sample_sources`][repinterp.core.boundaries.sample_sources]).
        weights: the heat maps' channel weights: ``"gradient"`` (§5.1) or ``"score"``
            (polytope-averaged Score-CAM, `polytope_weights`: Score-CAM's
            weights averaged over the input and ``options.score_images - 1`` covered images,
            drawn outside the images the heat maps are scored on).
        similar: the ranking of similar images in ``reference``: ``"semantic"`` (§5.2),
            ``"euclidean"`` or ``"cosine"`` (``Interpretation.similar``).
        granularity: ``"class"`` (the paper's) or a granularity beyond it by name
            ([`granularities`][repinterp.core.granularities]; e.g. ``RI+strategy``: a polytope
            per strategy of a class).

    Its name is ``RI`` followed by ``+value`` for each knob not at the paper's value, in the
    order above (e.g. ``RI+pairs+score``).
    """

    def __init__(
        self,
        solver: str = "greedy",
        sampling: str = "uniform",
        weights: str = "gradient",
        similar: str = "semantic",
        granularity: str = PAPERS,
    ) -> None:
        self.knobs = {"solver": solver, "sampling": sampling, "weights": weights}
        self.knobs["similar"] = similar
        self.knobs["granularity"] = granularity
        for knob, value in self.knobs.items():
            if value not in KNOBS[knob]:
                raise ValueError(
                    f"unknown {knob} {value!r}; choose one of {', '.join(KNOBS[knob])}"
                )
        self.name = "RI" + "".join(
            f"+{value}" for knob, value in self.knobs.items() if value != KNOBS[knob][0]
        )

    def fit_config(self, run: Run) -> FitConfig:
        """The settings of its index in the run (``Run.interpreter_for``)."""
        return run.fit_config(self.knobs["sampling"], self.knobs["granularity"])

    def fit_configs(self, run: Run) -> tuple[FitConfig, ...]:
        return (self.fit_config(run),)

    def _weighted(
        self, run: Run, interpretation: Interpretation, x: int, scored: Tensor | None = None
    ) -> Interpretation:
        """The interpretation of reference image ``x`` drawn with this variant's weights:
        ``+score`` averages over ``x`` and ``options.score_images - 1`` covered images drawn
        with the run's seed outside ``scored`` (the images its heat maps are scored on)."""
        if self.knobs["weights"] == "gradient" or not interpretation.has_heatmap:
            return interpretation
        sample = covered_sample(
            interpretation, run.options.score_images, run.seed, include=x, exclude=scored
        )
        return with_score_weights(interpretation, run.setup.inputs("reference", sample))

    def regions(self, run: Run) -> RegionSet:
        """The run's k-means regions (inputs and centres), their covers solved on this
        variant's ``Q`` by its solver, drawn with its weights."""
        knobs = self.knobs
        return run.cached(
            ("regions", self.fit_config(run), knobs["solver"], knobs["weights"]),
            lambda: self._regions(run),
        )

    def _regions(self, run: Run) -> RegionSet:
        base = run.regions
        config = self.fit_config(run)
        ri = run.interpreter_for(config)
        regions = base.regions
        if (config, self.knobs["solver"]) != (run.fit_config(), "greedy"):
            regions = ri.explain_reference(base.inputs, solver=self.knobs["solver"])
        inputs = base.inputs.tolist()
        regions = [self._weighted(run, r, x) for r, x in zip(regions, inputs, strict=True)]
        return RegionSet(ri, base.inputs, regions, base.centres)

    def unseen(self, run: Run, images01: Tensor) -> Tensor:
        return self.regions(run).heatmap(run.setup.normalize(images01).to(run.setup.device))

    def groups(self, run: Run) -> Tensor:
        regions = self.regions(run)
        parts = [regions.assign(x).region.cpu() for x in run.setup.chunks("unseen")]
        return torch.cat(parts)

    def _explanation(self, run: Run, index: int) -> Interpretation:
        """``P(x)`` of reference image ``index`` on this variant's ``Q`` by its solver (solved
        once per run)."""
        key, solver = self.fit_config(run), self.knobs["solver"]
        ri = run.interpreter_for(key)
        return run.cached(
            ("reference", key, solver, index),
            lambda: ri.explain_reference([index], solver=solver)[0],
        )

    def similar_to(self, run: Run, index: int, k: int) -> Tensor:
        """The top-``k`` of the reference images ``P(x)`` of reference image ``index`` covers,
        ranked by this variant's ``similar``, ``index`` first (CPU long, at most ``k``)."""
        ranking = self._explanation(run, index).similar(metric=self.knobs["similar"]).cpu()
        return self_first(ranking, index, k)

    def reuse(self, run: Run, index: int, images: Tensor) -> Tensor:
        explanation = self._weighted(run, self._explanation(run, index), index, images)
        return explanation.heatmap(run.setup.inputs("reference", images))

    def reference(self, run: Run, index: int, k: int) -> tuple[Tensor, Tensor]:
        similar = self.similar_to(run, index, k)
        return similar, self.reuse(run, index, similar)

    def reference_polytopes(self, run: Run, indices: list[int]) -> list[Interpretation]:
        return [self._explanation(run, index) for index in indices]
