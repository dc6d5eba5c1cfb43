"""``RepresentativeInterpreter``: fit on a reference set, then explain inputs as
[`Interpretation`][repinterp.core.interpretation.Interpretation]s (re-exported here)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from . import display  # noqa: F401  (importing it registers the views of core.views)
from .core.boundaries import Boundaries
from .core.config import FitConfig, interpreter_config
from .core.granularities import PAPERS
from .core.interpretation import Interpretation, check_solver
from .core.reference_index import FEATURE_FILE, ReferenceIndex, input_rows
from .core.regions import RegionSet
from .core.representative import interpret
from .data.inputs import Transform, as_inputs, one_input
from .data.reference import (
    Reference,
    ReferenceSet,
    as_batch,
    as_reference,
    check_finite_rows,
    gather_images,
)
from .maps.contrastive import Contrast, contrastive_boundaries, contrastive_heatmaps
from .models.split import LayerSpec, SplitModel, split_at
from .runtime.deprecation import renamed
from .runtime.devices import model_device, resolve_device
from .runtime.precision import engine_dtype, exact_float32
from .store.index_build import fit_index
from .store.index_model import check_model, open_saved, restore_granularity, save_with_model
from .store.shards import Shards
from .strategies.channel_relevance import input_relevance
from .strategies.model import Strategy, kept_strategies

__all__ = ["FEATURE_FILE", "Interpretation", "RepresentativeInterpreter"]


class RepresentativeInterpreter:
    """Finds representative interpretations of a CNN classifier (Lam, Chu et al., ICCV 2021):
    ``fit`` samples ``|Q|`` boundaries of the head ``G`` and indexes the reference set's sides,
    ``explain`` solves Eq. 3 for an input and returns its polytope ``P(x)``; in full float32.

    Args:
        model: a classifier in eval mode, float32 or float64: images -> logits (or ``.logits``).
        target_layer: where ``psi`` ends: a name, the module, or ``[module]``; None: found at
            ``fit`` ([`locate_split`][repinterp.models.split.locate_split]).
        n_boundaries: ``|Q|``; it and the four below are the fit's settings (`FitConfig`).
        seed: seeds the sample of ``Q``.
        batch_size: images per forward pass.
        progress: show progress bars.
        granularity: by name: ``"class"``, the paper's RI, or beyond the paper ``"strategy"``.
        device: where to compute; None: the model's. Another **moves the user's model** there.
        solver: ``"greedy"`` (Algorithm 1) or ``"exact"`` (a MILP); ``explain`` can override it.
        transform: how ``explain`` reads a PIL image or ``uint8`` array
            ([`inputs`][repinterp.data.inputs]); ``load`` gives back the one an index records.
        config: the fit's settings as one ``FitConfig`` (also ``sampling``, ``num_workers``,
            ``output``, ``allow_nonlinear_head``, ``input_shape``, ``time_limit``) instead of
            the keywords above; ``**moved``: those as keywords, deprecated (0.6; until 0.7).

    Raises ValueError: a model in training mode or half precision, a bad layer, head or number.
    """

    def __init__(
        self,
        model: nn.Module,
        target_layer: LayerSpec | None = None,
        n_boundaries: int = 50,
        seed: int = 0,
        device: str | torch.device | None = None,
        batch_size: int = 64,
        progress: bool = True,
        granularity: str = PAPERS,
        solver: str = "greedy",
        transform: Transform | None = None,
        config: FitConfig | None = None,
        **moved: Any,
    ) -> None:
        if model.training:
            raise ValueError("the model is in training mode: call model.eval() first")
        self.config = interpreter_config(
            config, moved, n_boundaries, seed, batch_size, progress, granularity
        )
        self.solver = check_solver(solver)
        self.dtype = engine_dtype(model)
        self.device = resolve_device(device) if device is not None else model_device(model)
        self.model = model.to(self.device)
        self.transform = transform
        self._split = split_at(model, target_layer, self.config, self.dtype)
        self.target_layer: str | None = self._split.layer if self._split is not None else None
        self._index: ReferenceIndex | None = None
        # the last fit's reference set, to draw its images (after load: None, or set it here)
        self.reference: Reference | ReferenceSet | None = None
        self._feature_dir: tempfile.TemporaryDirectory | None = None

    def __repr__(self) -> str:
        layer = repr(self.target_layer) if self.target_layer else "a layer chosen at fit"
        i = self._index
        fitted = f"|Q| = {len(i.boundaries)}, |R| = {len(i)}" if i is not None else None
        fitted = fitted or f"|Q| = {self.config.n_boundaries}, not fitted"
        beyond = f", {self.granularity_text}" if self.config.granularity.beyond_paper else ""
        return (
            f"RepresentativeInterpreter({type(self.model).__name__} at {layer}, {fitted}, "
            f"seed {self.config.seed}, device {self.device}, solver {self.solver!r}{beyond})"
        )

    @property
    def granularity(self) -> str:
        """The granularity's name (``"class"``: the paper's)."""
        return self.config.granularity.name

    @property
    def granularity_text(self) -> str:
        """The granularity in words, as every view names it (the fitted one's, once fitted)."""
        plug = self.config.granularity if self._index is None else self._index.granularity
        return plug.describe()

    @property
    def split(self) -> SplitModel:
        """The model split at the target layer, ``psi`` and ``G``."""
        if self._split is None:
            raise RuntimeError("target_layer=None: the layer is chosen at fit")
        return self._split

    @exact_float32()
    def fit(
        self,
        reference: Reference | ReferenceSet,
        class_names: list[str] | None = None,
        keep_features: bool = False,
        shards: Shards | None = None,
    ) -> RepresentativeInterpreter:
        """Sample ``Q`` and index ``reference`` (see
        [`fit_index`][repinterp.store.index_build.fit_index]), kept as ``self.reference``;
        ``keep_features`` for ``regions``; ``shards`` to resume a killed fit. Returns self."""
        reference = as_reference(reference)
        settings = (self.config, self.device, class_names, keep_features, shards)
        self._split, self._index, self._feature_dir = fit_index(
            self.model, self._split, reference, *settings
        )
        self.target_layer = self._split.layer
        self.reference = reference
        return self

    @property
    def index(self) -> ReferenceIndex:
        """The reference index (``Q``, the projections, classes and logits of ``R``)."""
        if self._index is None:
            raise RuntimeError("the interpreter is not fitted: call fit(reference) first")
        return self._index

    @property
    def is_fitted(self) -> bool:
        """Whether ``fit`` (or ``load``) has given it an index."""
        return self._index is not None

    fitted_index = renamed("RepresentativeInterpreter", "fitted_index", "index")

    @property
    def boundary_sources(self) -> Tensor:
        """Reference indices of the images behind ``Q``, in ``Q``'s order."""
        return self.index.sources

    @property
    def class_names(self) -> list[str] | None:
        return self.index.meta.get("class_names")

    @property
    def reference_features(self) -> Tensor:
        """|R| x (K h w) reference feature maps, memory-mapped (CPU)."""
        return self.index.features

    def reference_images(
        self, indices: Tensor | list[int], reference: Reference | None = None
    ) -> Tensor | None:
        """Reference images by index, from ``reference`` or the last fit's (None if none)."""
        source = self.reference if reference is None else reference
        return gather_images(source, indices, len(self.index))

    def _batches(self, images: Tensor) -> list[Tensor]:
        """``images`` checked, in the model's dtype, in batches on the device."""
        images = as_batch(images, self.dtype, shape=self.index.input_shape)
        return [part.to(self.device) for part in images.split(self.config.batch_size)]

    @exact_float32()
    @torch.inference_mode()
    def features(self, images: Tensor) -> Tensor:
        """``psi(images)``: N x C x H x W -> N x K x h x w on the device, in batches."""
        empty = torch.empty(0, *self.index.feature_shape, device=self.device, dtype=self.dtype)
        features = torch.cat([empty, *(self.split.psi(part) for part in self._batches(images))])
        check_finite_rows("feature maps", features)
        return features

    def logits_and_projections(
        self, images: Tensor, index: ReferenceIndex | None = None
    ) -> tuple[Tensor, Tensor]:
        """Logits (N x classes) and projections on ``Q`` (of ``index``; None: the fit's)."""
        return self._forward(images, index=index)[:2]

    forward = renamed("RepresentativeInterpreter", "forward", "logits_and_projections")

    @exact_float32()
    def input_relevance(
        self, images: Tensor, contrast: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Logits (N x classes) and gradient x input maps (N x H x W) of N images, on the CPU
        (see [`input_relevance`][repinterp.strategies.channel_relevance.input_relevance])."""
        empty, batches = (self.index.n_classes, *self.index.input_shape[-2:]), self._batches(images)
        return input_relevance(self.split.psi, self.split.head, batches, empty, contrast)

    @exact_float32()
    def _forward(
        self, images: Tensor, keep_features: bool = False, index: ReferenceIndex | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None, dict[str, Tensor]]:
        """The inputs' rows on ``index``, as at fit, checked to be finite."""
        index = self.index if index is None else index
        empty = torch.empty(0, device=self.device, dtype=self.dtype)
        psi, head, batches = self.split.psi, self.split.head, self._batches(images)
        rows = input_rows(psi, head, batches, index, empty, keep_features)
        check_finite_rows("logits or projections", rows[0], rows[1])
        return rows

    def explain(self, image: Any, solver: str | None = None) -> Interpretation:
        """Interpret one image: C x H x W, normalised as the model expects, or what
        ``transform`` reads ([`one_input`][repinterp.data.inputs.one_input])."""
        return self.explain_batch(one_input(image, self.transform).unsqueeze(0), solver)[0]

    @exact_float32()
    def explain_batch(self, images: Any, solver: str | None = None) -> list[Interpretation]:
        """Interpret N images (see [`as_inputs`][repinterp.data.inputs.as_inputs]) together."""
        index = self.index
        images = as_inputs(images, self.transform, index.input_shape)
        out = self._interpret(self._forward(images, FEATURE_FILE in index.files), solver)
        for e, image in zip(out, images, strict=True):
            e.image = image
        return out

    @exact_float32()
    def explain_reference(
        self, indices: Tensor | list[int], solver: str | None = None
    ) -> list[Interpretation]:
        """Interpret reference images from the index alone, with no forward pass."""
        return self._interpret(self.index.rows(indices), solver)

    def _interpret(self, rows: tuple, solver: str | None) -> list[Interpretation]:
        solver = self.solver if solver is None else check_solver(solver)
        return interpret(self, *rows[:2], solver, self.config.time_limit, *rows[2:])

    @exact_float32()
    def contrastive_boundaries(self, images: Any, contrast: Contrast) -> Boundaries:
        """Beyond the paper: each image's boundary between ``c`` and ``c'`` (``contrast``), see
        [`contrastive_boundaries`][repinterp.maps.contrastive.contrastive_boundaries]."""
        features = self.features(as_inputs(images, self.transform, self.index.input_shape))
        return contrastive_boundaries(self.split.head, features, contrast, self.index.n_classes)

    @exact_float32()
    def contrastive_heatmap(self, images: Any, contrast: Contrast) -> Tensor:
        """Beyond the paper: why ``c`` rather than ``c'``: N x H x W maps in [0, 1]
        ([`contrastive_heatmaps`][repinterp.maps.contrastive.contrastive_heatmaps])."""
        images = as_inputs(images, self.transform, self.index.input_shape)
        boundaries = self.contrastive_boundaries(images, contrast)
        return contrastive_heatmaps(self.features(images), boundaries, tuple(images.shape[-2:]))

    def strategies(self, reference: Reference | None = None) -> list[Strategy]:
        """Beyond the paper: a strategy index's strategies (`strategies.model.kept_strategies`)."""
        return kept_strategies(self, reference, self.config.batch_size)

    @exact_float32()
    def regions(self, n_regions: int | None = None, seed: int = 0) -> RegionSet:
        """k-means regions (`RegionSet.build`); needs ``fit(..., keep_features=True)``."""
        return RegionSet.build(self, n_regions=n_regions, seed=seed)

    def save(self, path: str | Path, overwrite: bool = False) -> None:
        """Save to the folder ``path`` with the model's fingerprints (`save_with_model`)."""
        model, graph = self.model, self.split.fingerprint
        save_with_model(self.index, path, model, graph, self.transform, overwrite)

    @classmethod
    def load(
        cls,
        path: str | Path,
        model: nn.Module,
        device: str | torch.device | None = None,
        granularity: str | None = None,
        **kwargs: Any,
    ) -> RepresentativeInterpreter:
        """The interpreter of the index at ``path`` for ``model``, checked to be the one it was
        made with (`open_saved`); ``kwargs``: the constructor's."""
        index, layer, kwargs = open_saved(path, model, granularity, kwargs)
        ri = cls(model, layer, device=device, **kwargs)
        check_model(index, path, ri.model, ri.split.fingerprint)
        restore_granularity(index, path, ri.config.granularity)
        ri._index = index.to(ri.device)
        return ri
