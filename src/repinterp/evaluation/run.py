"""One seeded run of a protocol (`Run`): the interpreter fitted with the run's seed, and what
the methods share from it (k-means regions, nearest centres, sampled inputs, neighbours, the
images the perturbation metrics score, and a cache for the methods' own shared work)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
from torch import Tensor

from ..core.config import FitConfig
from ..core.granularities import PAPERS, granularity
from ..core.nearest import nearest_rows
from ..core.regions import RegionSet
from ..data.datasets import ImageSet
from ..interpreter import RepresentativeInterpreter
from .setup import Setup

__all__ = ["Run", "RunOptions", "fit_label", "self_first"]

T = TypeVar("T")


class RunOptions(Protocol):
    """What a run reads of the protocol's options (`
    Options` has these)."""

    n_boundaries: int
    n_regions: int | None
    n_inputs: int
    ace_images: int
    curve_images: int


class Run:
    """One seeded run: an interpreter with ``Q`` sampled by ``seed``, and what derives from it.

    Attributes:
        setup: the setup.
        seed: the run's seed (``Q``, k-means, sampled inputs, ACE).
        options: the options.
        interpreter: fitted on the reference set, with its feature maps kept.
        fit_s: seconds the fit took.
        fit_seconds: seconds each index's fit took, by `fit_label` of its settings.
        kmeans_s: seconds k-means and the regions' covers took (0 until ``regions`` is used).
    """

    def __init__(self, setup: Setup, seed: int, options: RunOptions) -> None:
        self.setup = setup
        self.seed = seed
        self.options = options
        self.fit_seconds: dict[str, float] = {}
        self._interpreters: dict[FitConfig, RepresentativeInterpreter] = {}
        self.interpreter = self.interpreter_for(self.fit_config())
        self.fit_s = self.fit_seconds["uniform"]
        self.kmeans_s = 0.0
        self._neighbours: dict[int, Tensor] = {}
        self._cache: dict[Any, Any] = {}

    def fit_config(
        self,
        sampling: str = "uniform",
        granularity_name: str = PAPERS,
        n_boundaries: int | None = None,
    ) -> FitConfig:
        """The run's fit settings: ``Q`` drawn with the run's seed by ``sampling`` (see
        [`sample_sources`][repinterp.core.boundaries.sample_sources]), the granularity
        ``granularity_name`` with its defaults, ``n_boundaries`` (None: the options')."""
        return FitConfig(
            n_boundaries=self.options.n_boundaries if n_boundaries is None else n_boundaries,
            seed=self.seed,
            sampling=sampling,
            batch_size=self.setup.batch_size,
            progress=False,
            granularity=granularity(granularity_name),
        )

    def fit(self, config: FitConfig, keep_features: bool = False) -> RepresentativeInterpreter:
        """An interpreter fitted on the reference set with ``config``."""
        setup = self.setup
        reference = setup.reference
        ri = RepresentativeInterpreter(
            setup.model, setup.target_layer, device=setup.device, config=config
        )
        source = reference.inputs() if isinstance(reference, ImageSet) else reference
        return ri.fit(source, list(reference.class_names), keep_features=keep_features)

    def interpreter_for(self, config: FitConfig) -> RepresentativeInterpreter:
        """The run's interpreter fitted with ``config`` (once per run, with its feature maps;
        the seconds go to ``fit_seconds[fit_label(config)]``)."""
        if config not in self._interpreters:
            start = time.perf_counter()
            ri = self.fit(config, True)
            self.fit_seconds[fit_label(config)] = time.perf_counter() - start
            self._interpreters[config] = ri
        return self._interpreters[config]

    def cached(self, key: Any, make: Callable[[], T]) -> T:
        """``make()``, computed once per run and ``key`` (work several methods share)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @cached_property
    def regions(self) -> RegionSet:
        """``|V|`` k-means regions (k-means seeded with the run's seed)."""
        start = time.perf_counter()
        regions = self.interpreter.regions(self.options.n_regions, seed=self.seed)
        self.kmeans_s = time.perf_counter() - start
        return regions

    @cached_property
    def features(self) -> Tensor:
        """|R| x d flattened reference feature maps (CPU, memory-mapped)."""
        return self.interpreter.reference_features

    @cached_property
    def reference_centre(self) -> tuple[Tensor, Tensor]:
        """Nearest k-means centre of every reference image, and the distance to it."""
        index, distance = nearest_rows(self.features, self.regions.centres)
        return index[:, 0], distance[:, 0]

    @cached_property
    def unseen_centre(self) -> Tensor:
        """Nearest k-means centre of every unseen image (CPU long)."""
        features = torch.cat([self.interpreter.features(x) for x in self.setup.chunks("unseen")])
        return nearest_rows(features.flatten(1).cpu(), self.regions.centres)[0][:, 0]

    @cached_property
    def curve_rows(self) -> Tensor:
        """Indices of the unseen images the perturbation metrics score: ``curve_images`` of
        them (`unseen_rows`)."""
        return self.unseen_rows(self.options.curve_images)

    def unseen_rows(self, n: int) -> Tensor:
        """Indices of ``n`` unseen images drawn with the run's seed (all when fewer), ascending
        (CPU long); a smaller ``n`` draws a subset of the same images."""
        rng = np.random.default_rng(self.seed)
        return torch.from_numpy(np.sort(rng.permutation(len(self.setup.unseen))[:n]))

    @cached_property
    def inputs(self) -> Tensor:
        """``n_inputs`` reference indices drawn with the run's seed, without replacement."""
        n = min(self.options.n_inputs, len(self.setup.reference))
        rng = np.random.default_rng(self.seed)
        return torch.from_numpy(rng.choice(len(self.setup.reference), n, replace=False))

    def neighbours(self, k: int) -> Tensor:
        """n_inputs x min(k, |R|): each input's Euclidean nearest reference images in feature
        space, the input first (ties by lower index)."""
        k = min(k, len(self.setup.reference))
        if k not in self._neighbours:
            near = nearest_rows(self.features[self.inputs], self.features, k)[0]
            self._neighbours[k] = torch.stack(
                [self_first(row, int(i), k) for row, i in zip(near, self.inputs, strict=True)]
            )
        return self._neighbours[k]


def fit_label(config: FitConfig) -> str:
    """How results name an index: its sampling, then ``+granularity`` beyond the paper's
    (``"uniform"``, ``"uniform+strategy"``, ...)."""
    plug = config.granularity
    beyond = f"+{plug.name}" if plug.beyond_paper else ""
    return config.sampling + beyond


def self_first(ranking: Tensor, index: int, k: int | None = None) -> Tensor:
    """``ranking`` with ``index`` moved (or added) to the front, cut to ``k``."""
    return torch.cat([ranking.new_tensor([index]), ranking[ranking != index]])[:k]
